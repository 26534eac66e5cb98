import type { Shape } from '../shape.js';
import type { LinearActivation } from './activations.js';
import type { linear } from './fused.js';
import type { batchedMatmul, MatmulPrecision, matmul } from './matmul.js';
import type { AttrsOf, SpecCall } from './specCall.js';

// The shapes a backend's matrix-product kernels are planned and launched in,
// shared so that the backends describe a product the same way. The tile sizes
// themselves are each backend's tuning.

/** A block's tile of C (bm × bn), its step along K (bk) and each thread's tile (tm × tn). */
export interface MatmulTile {
  readonly bm: number;
  readonly bn: number;
  readonly bk: number;
  readonly tm: number;
  readonly tn: number;
}

/** The dimensions of one product of a batch: op(a) is [M, K], op(b) is [K, N]. */
export interface MatmulDims {
  readonly batch: number;
  readonly m: number;
  readonly n: number;
  readonly k: number;
  /** a is stored [K, M]. */
  readonly transA: boolean;
  /** b is stored [N, K]. */
  readonly transB: boolean;
}

/** y = alpha · op(a)·op(b) (+ beta · c) over a backend's operand type `O`, and linear's epilogue. */
export interface MatmulLaunch<O> extends MatmulDims {
  readonly a: O;
  readonly b: O;
  readonly c: O | undefined;
  readonly y: O;
  /** linear: a bias per column of y, an activation, and z = the pre-activation when given. */
  readonly bias?: O;
  readonly z?: O;
  readonly activation?: LinearActivation;
  readonly alpha: number;
  readonly beta: number;
  /** matmul's precision: 'tf32' or 'half' allow f32 operands rounded to tf32 or a half dtype; absent or 'f32', exact. */
  readonly precision?: MatmulPrecision;
}

// ---- from a spec's call ------------------------------------------------------------

/** matmul's call as one product: y [M, N] = alpha · op(a)·op(b) (+ beta · c). */
export function matmulLaunch<O extends { readonly shape: Shape }>(
  call: SpecCall<O, AttrsOf<typeof matmul>>,
): MatmulLaunch<O> {
  const [a, b, c] = call.inputs;
  const y = call.outputs[0]!;
  const [m, n] = y.shape as [number, number];
  const k = call.attrs.transA ? a!.shape[0]! : a!.shape[1]!;
  return { a: a!, b: b!, c, y, batch: 1, m, n, k, ...call.attrs };
}

/** batchedMatmul's call: B products y[i] = alpha · op(a[i])·op(b[i]), no c. */
export function batchedMatmulLaunch<O extends { readonly shape: Shape }>(
  call: SpecCall<O, AttrsOf<typeof batchedMatmul>>,
): MatmulLaunch<O> {
  const [a, b] = call.inputs;
  const y = call.outputs[0]!;
  const [batch, m, n] = y.shape as [number, number, number];
  const k = call.attrs.transA ? a!.shape[1]! : a!.shape[2]!;
  return { a: a!, b: b!, c: undefined, y, batch, m, n, k, ...call.attrs, beta: 0 };
}

/** linear's call: y = act(x·wᵀ + bias) with w stored [N, K], z the pre-activation when asked for. */
export function linearLaunch<O extends { readonly shape: Shape }>(
  call: SpecCall<O, AttrsOf<typeof linear>>,
): MatmulLaunch<O> {
  const [x, w, bias] = call.inputs;
  const [y, z] = call.outputs;
  const [m, n] = y!.shape as [number, number];
  return {
    a: x!,
    b: w!,
    c: undefined,
    y: y!,
    bias,
    z,
    activation: call.attrs.activation,
    batch: 1,
    m,
    n,
    k: x!.shape[1]!,
    alpha: 1,
    beta: 0,
    transA: false,
    transB: true,
  };
}
