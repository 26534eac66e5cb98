import {
  crossEntropyBackward,
  crossEntropy as crossEntropySpec,
  mul,
  scale,
  sub,
  sumSquares,
  type Tensor,
} from '@rayo/core';
import { type Tape, Variable } from '../tape.js';

/**
 * Mean cross-entropy of `logits` [N, C] against class ids `targets` [N] (i32):
 * a scalar. The backward is the fused softmax-minus-one-hot kernel.
 */
export function crossEntropy(tape: Tape, logits: Variable, targets: Tensor | Variable): Variable {
  const t = targets instanceof Variable ? targets.value : targets;
  const y = tape.run1(crossEntropySpec, [logits.value, t]);
  return tape.record(y, [logits], (dy) => [tape.run1(crossEntropyBackward, [logits.value, t, dy])], [
    logits.value,
    t,
  ]);
}

/** Mean squared error `mean((prediction − target)²)` over every element: a scalar (no gradient flows to `target`). */
export function mseLoss(tape: Tape, prediction: Variable, target: Tensor | Variable): Variable {
  const t = target instanceof Variable ? target.value : target;
  const n = prediction.size;
  const diff = tape.run1(sub, [prediction.value, t]);
  const y = tape.run1(scale, [tape.run1(sumSquares, [diff], { axis: 'all' })], { alpha: 1 / n });
  return tape.record(
    y,
    [prediction],
    (dy) => [tape.run1(scale, [tape.run1(mul, [diff, dy])], { alpha: 2 / n })],
    [diff],
  );
}
