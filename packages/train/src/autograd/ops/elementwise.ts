import {
  add as addSpec,
  biasAdd as biasAddSpec,
  clipBackward,
  clip as clipSpec,
  div as divSpec,
  exp as expSpec,
  type KernelSpec,
  mul as mulSpec,
  type NoAttrs,
  scale as scaleSpec,
  sub as subSpec,
  type Tensor,
} from '@rayo/core';
import { reduceToShape } from '../broadcast.js';
import type { Tape, Variable } from '../tape.js';

/** Gradients of a binary operation with respect to its broadcast output shape. */
type BinaryGrads = (
  tape: Tape,
  a: Variable,
  b: Variable,
  y: Variable,
  dy: Tensor,
  needs: readonly boolean[],
) => [Tensor | undefined, Tensor | undefined];

/** Which of the operands and the output a binary operation's gradients read. */
type BinaryReads = (a: Tensor, b: Tensor, y: Tensor) => readonly Tensor[];

function binary(spec: KernelSpec<NoAttrs>, grads: BinaryGrads, reads: BinaryReads) {
  return (tape: Tape, a: Variable, b: Variable): Variable => {
    const value = tape.run1(spec, [a.value, b.value]);
    const y: Variable = tape.record(
      value,
      [a, b],
      (dy, needs) => {
        const [da, db] = grads(tape, a, b, y, dy, needs);
        return [da && reduceToShape(tape, da, a.shape), db && reduceToShape(tape, db, b.shape)];
      },
      reads(a.value, b.value, value),
    );
    return y;
  };
}

/** `a + b` with NumPy broadcasting; gradients are summed over broadcast axes on the device. */
export const add = binary(
  addSpec,
  (_tape, _a, _b, _y, dy, needs) => [needs[0] ? dy : undefined, needs[1] ? dy : undefined],
  () => [],
);

/** `a − b` with broadcasting. */
export const sub = binary(
  subSpec,
  (tape, _a, _b, _y, dy, needs) => [
    needs[0] ? dy : undefined,
    needs[1] ? tape.run1(scaleSpec, [dy], { alpha: -1 }) : undefined,
  ],
  () => [],
);

/** `a · b` with broadcasting. */
export const mul = binary(
  mulSpec,
  (tape, a, b, _y, dy, needs) => [
    needs[0] ? tape.run1(mulSpec, [dy, b.value]) : undefined,
    needs[1] ? tape.run1(mulSpec, [dy, a.value]) : undefined,
  ],
  (a, b) => [a, b],
);

/** `a / b` with broadcasting. */
export const div = binary(
  divSpec,
  (tape, _a, b, y, dy, needs) => [
    needs[0] ? tape.run1(divSpec, [dy, b.value]) : undefined,
    // d(a/b)/db = −y / b.
    needs[1]
      ? tape.run1(scaleSpec, [tape.run1(divSpec, [tape.run1(mulSpec, [dy, y.value]), b.value])], {
          alpha: -1,
        })
      : undefined,
  ],
  (_a, b, y) => [b, y],
);

/** `alpha · x + beta`. */
export function scale(tape: Tape, x: Variable, alpha: number, beta = 0): Variable {
  const y = tape.run1(scaleSpec, [x.value], { alpha, beta });
  return tape.record(y, [x], (dy) => [tape.run1(scaleSpec, [dy], { alpha })], []);
}

/** `x[..., j] + bias[j]`; the bias gradient is the column sums of dy, on the device. */
export function biasAdd(tape: Tape, x: Variable, bias: Variable): Variable {
  const y = tape.run1(biasAddSpec, [x.value, bias.value]);
  return tape.record(
    y,
    [x, bias],
    (dy, needs) => [needs[0] ? dy : undefined, needs[1] ? reduceToShape(tape, dy, bias.shape) : undefined],
    [],
  );
}

/** `min(max(x, min), max)`; the gradient passes where x is inside the range. */
export function clip(tape: Tape, x: Variable, min: number, max: number): Variable {
  const y = tape.run1(clipSpec, [x.value], { min, max });
  return tape.record(y, [x], (dy) => [tape.run1(clipBackward, [dy, x.value], { min, max })], [x.value]);
}

/** `e^x`. */
export function exp(tape: Tape, x: Variable): Variable {
  const value = tape.run1(expSpec, [x.value]);
  return tape.record(value, [x], (dy) => [tape.run1(mulSpec, [dy, value])], [value]);
}
