import type { LinearActivation } from './fused.js';

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
  /** matmul's precision: 'tf32' allows f32 operands rounded to tf32; absent or 'f32', exact. */
  readonly precision?: 'f32' | 'tf32';
}
