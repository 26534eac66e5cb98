import {
  layerNormBackward,
  layerNorm as layerNormSpec,
  rmsNormBackward,
  rmsNorm as rmsNormSpec,
} from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

/** `x / sqrt(mean(x²) + eps) · weight` over the last axis. */
export function rmsNorm(tape: Tape, x: Variable, weight: Variable, eps = 1e-6): Variable {
  const y = tape.run1(rmsNormSpec, [x.value, weight.value], { eps });
  return tape.record(
    y,
    [x, weight],
    (dy) => tape.run(rmsNormBackward, [dy, x.value, weight.value], { eps }),
    [x.value, weight.value],
  );
}

/** `(x − mean) / sqrt(var + eps) · gamma + beta` over the last axis. */
export function layerNorm(tape: Tape, x: Variable, gamma: Variable, beta: Variable, eps = 1e-5): Variable {
  const y = tape.run1(layerNormSpec, [x.value, gamma.value, beta.value], { eps });
  return tape.record(
    y,
    [x, gamma, beta],
    (dy) => tape.run(layerNormBackward, [dy, x.value, gamma.value], { eps }),
    [x.value, gamma.value],
  );
}
