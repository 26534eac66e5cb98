import {
  batchedMatmul as batchedMatmulSpec,
  biasActivationBackward,
  cast,
  InvalidArgumentError,
  type LinearActivation,
  linear as linearSpec,
  type MatmulPrecision,
  matmul as matmulSpec,
  scale,
  type Tensor,
  transpose as transposeSpec,
} from '@rayo/core';
import { reduceToShape } from '../broadcast.js';
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
  /** How the forward and both backward products are computed (default 'f32'; see matmul's spec). */
  readonly precision?: MatmulPrecision;
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
  const { transA = false, transB = false, alpha = 1, beta = 1, c, precision = 'f32' } = options;
  const y = tape.run1(matmulSpec, [a.value, b.value, c?.value], { transA, transB, alpha, beta, precision });
  const mm: Product = (x, z, tx, tz) =>
    tape.run1(matmulSpec, [x, z], { transA: tx, transB: tz, alpha, precision });
  return tape.record(
    y,
    c ? [a, b, c] : [a, b],
    (dy, needs) => {
      const [da, db] = productGrads(mm, a.value, b.value, dy, transA, transB, needs);
      const dc = needs[2] ? (beta === 1 ? dy : tape.run1(scale, [dy], { alpha: beta })) : undefined;
      return [da, db, dc];
    },
    [a.value, b.value],
  );
}

/**
 * `act(x · wᵀ + b)` for x [M, K] and w stored [N, K]: one kernel, the bias
 * and activation in the product's epilogue. Its backward is one
 * `biasActivationBackward` (dz = dy · act'(z) and the bias gradient in one
 * pass) and the two products dx = dz · w and dw = dzᵀ · x. The kernel keeps
 * z only where a gradient needs it and the activation is not relu, whose
 * backward reads y; without an activation dz is dy and the bias gradient
 * its column sums.
 */
export function linear(
  tape: Tape,
  x: Variable,
  w: Variable,
  bias?: Variable,
  activation: LinearActivation = 'none',
): Variable {
  const inputs = bias ? [x, w, bias] : [x, w];
  const grads = tape.gradEnabled && inputs.some((v) => v.requiresGrad);
  const preActivation = grads && activation !== 'none' && activation !== 'relu';
  const [y, z] = tape.run(linearSpec, [x.value, w.value, bias?.value], { activation, preActivation });
  const saved = activation === 'relu' ? y! : z;
  return tape.record(
    y!,
    inputs,
    (dy, needs) => {
      let dz = dy;
      let db: Tensor | undefined;
      if (activation === 'none') {
        if (needs[2]) db = reduceToShape(tape, dy, bias!.shape);
      } else {
        [dz, db] = tape.run(biasActivationBackward, [dy, saved], { activation }) as [Tensor, Tensor];
      }
      const mm = (a: Tensor, b: Tensor, transA: boolean) => tape.run1(matmulSpec, [a, b], { transA });
      return [
        needs[0] ? mm(dz, w.value, false) : undefined,
        needs[1] ? mm(dz, x.value, true) : undefined,
        needs[2] ? db : undefined,
      ];
    },
    [x.value, w.value, activation === 'none' ? undefined : saved],
  );
}

/**
 * `x · wᵀ` for x [M, K] and w stored [N, K] under a reduced `precision`, the
 * three products (y, dx = dy · w, dw = dyᵀ · x) summed in f32 with f32
 * outputs, so that w's gradient is f32. Under 'half' an f32 w is cast to
 * `halfDtype` (default bf16) once here and the copy serves forward and dx;
 * an f32 x is kept for dw as a copy of that dtype, so the f32 x is freed
 * once nothing else reads it. Every product has the half copy as its b, so
 * matmul rounds its f32 a (x, dy) to the same dtype: the copies change no
 * result.
 */
export function reducedLinear(
  tape: Tape,
  x: Variable,
  w: Variable,
  precision: MatmulPrecision,
  halfDtype: 'f16' | 'bf16' = 'bf16',
): Variable {
  if (halfDtype !== 'f16' && halfDtype !== 'bf16') {
    throw new InvalidArgumentError('a half operand is f16 or bf16', {
      operation: 'reducedLinear',
      argument: 'halfDtype',
      expected: "'f16' or 'bf16'",
      actual: String(halfDtype),
    });
  }
  const half = (t: Tensor) =>
    precision === 'half' && t.dtype === 'f32' ? tape.run1(cast, [t], { to: halfDtype }) : t;
  const wOperand = half(w.value);
  const y = tape.run1(matmulSpec, [x.value, wOperand], { transB: true, precision });
  // Layers that share x (q, k and v; gate and up) share its half copy.
  const xSaved =
    tape.gradEnabled && w.requiresGrad && precision === 'half' && x.value.dtype === 'f32'
      ? tape.halfCopy(x.value, halfDtype)
      : x.value;
  return tape.record(
    y,
    [x, w],
    (dy, needs) => [
      needs[0] ? tape.run1(matmulSpec, [dy, wOperand], { precision }) : undefined,
      needs[1] ? tape.run1(matmulSpec, [dy, xSaved], { transA: true, precision }) : undefined,
    ],
    [x.requiresGrad ? wOperand : undefined, w.requiresGrad ? xSaved : undefined],
  );
}

export interface BatchedMatmulOptions {
  readonly transA?: boolean;
  readonly transB?: boolean;
  readonly alpha?: number;
  /** How the forward and both backward products are computed (default 'f32'). */
  readonly precision?: MatmulPrecision;
}

/** `alpha · op(a[i]) · op(b[i])` for each batch index i of [B, ·, ·] operands. */
export function batchedMatmul(
  tape: Tape,
  a: Variable,
  b: Variable,
  options: BatchedMatmulOptions = {},
): Variable {
  const { transA = false, transB = false, alpha = 1, precision = 'f32' } = options;
  const y = tape.run1(batchedMatmulSpec, [a.value, b.value], { transA, transB, alpha, precision });
  const mm: Product = (x, z, tx, tz) =>
    tape.run1(batchedMatmulSpec, [x, z], { transA: tx, transB: tz, alpha, precision });
  return tape.record(
    y,
    [a, b],
    (dy, needs) => productGrads(mm, a.value, b.value, dy, transA, transB, needs),
    [a.value, b.value],
  );
}

/** Swaps the last two axes (a copy). */
export function transpose(tape: Tape, x: Variable): Variable {
  const y = tape.run1(transposeSpec, [x.value]);
  return tape.record(y, [x], (dy) => [tape.run1(transposeSpec, [dy])], []);
}
