import {
  batchedMatmul as batchedMatmulSpec,
  matmul as matmulSpec,
  scale,
  type Tensor,
  transpose as transposeSpec,
} from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

export interface MatmulOptions {
  /** `a` is stored transposed ([K, M]). */
  readonly transA?: boolean;
  /** `b` is stored transposed ([N, K]), e.g. a linear layer's [out, in] weight. */
  readonly transB?: boolean;
  /** Scales the product. */
  readonly alpha?: number;
  /** Added to the product, times `beta`. */
  readonly c?: Variable;
  readonly beta?: number;
}

type Product = (x: Tensor, y: Tensor, transX: boolean, transY: boolean) => Tensor;

/**
 * Gradients of `y = alpha · op(a) · op(b)` in the layouts `a` and `b` are
 * stored in, as products with transpose flags: no operand is transposed in
 * memory.
 */
function productGrads(
  mm: Product,
  a: Tensor,
  b: Tensor,
  dy: Tensor,
  transA: boolean,
  transB: boolean,
  needs: readonly boolean[],
): [Tensor | undefined, Tensor | undefined] {
  let da: Tensor | undefined;
  let db: Tensor | undefined;
  if (needs[0]) {
    // dA = dY · op(B)ᵀ, or its transpose op(B) · dYᵀ when A is stored [K, M].
    da = transA ? mm(b, dy, transB, true) : mm(dy, b, false, !transB);
  }
  if (needs[1]) {
    // dB = op(A)ᵀ · dY, or its transpose dYᵀ · op(A) when B is stored [N, K].
    db = transB ? mm(dy, a, true, transA) : mm(a, dy, !transA, false);
  }
  return [da, db];
}

/** `alpha · op(a) · op(b) (+ beta · c)` for matrices. */
export function matmul(tape: Tape, a: Variable, b: Variable, options: MatmulOptions = {}): Variable {
  const { transA = false, transB = false, alpha = 1, beta = 1, c } = options;
  const y = tape.run1(matmulSpec, [a.value, b.value, c?.value], { transA, transB, alpha, beta });
  const mm: Product = (x, z, tx, tz) => tape.run1(matmulSpec, [x, z], { transA: tx, transB: tz, alpha });
  return tape.record(y, c ? [a, b, c] : [a, b], (dy, needs) => {
    const [da, db] = productGrads(mm, a.value, b.value, dy, transA, transB, needs);
    const dc = needs[2] ? (beta === 1 ? dy : tape.run1(scale, [dy], { alpha: beta })) : undefined;
    return [da, db, dc];
  });
}

export interface BatchedMatmulOptions {
  readonly transA?: boolean;
  readonly transB?: boolean;
  readonly alpha?: number;
}

/** `alpha · op(a[i]) · op(b[i])` for each batch index i of [B, ·, ·] operands. */
export function batchedMatmul(
  tape: Tape,
  a: Variable,
  b: Variable,
  options: BatchedMatmulOptions = {},
): Variable {
  const { transA = false, transB = false, alpha = 1 } = options;
  const y = tape.run1(batchedMatmulSpec, [a.value, b.value], { transA, transB, alpha });
  const mm: Product = (x, z, tx, tz) =>
    tape.run1(batchedMatmulSpec, [x, z], { transA: tx, transB: tz, alpha });
  return tape.record(y, [a, b], (dy, needs) => productGrads(mm, a.value, b.value, dy, transA, transB, needs));
}

/** Swaps the last two axes (a copy). */
export function transpose(tape: Tape, x: Variable): Variable {
  const y = tape.run1(transposeSpec, [x.value]);
  return tape.record(y, [x], (dy) => [tape.run1(transposeSpec, [dy])]);
}
