import { bytesPerElement, type DType } from '../dtype.js';
import type { TensorMeta } from '../kernel.js';
import { sizeOf } from '../shape.js';

// Small names the kernel files of every package share, declared here once.

/** The dtypes of an input that takes f32 only. */
export const F32 = ['f32'] as const;

/**
 * The dtypes of a float input that may be stored in half precision. The
 * kernel computes in f32; its outputs take the dtype of its `activation`
 * group unless the spec says otherwise.
 */
export const FLOAT = ['f32', 'f16', 'bf16'] as const;

/** Bytes of one f32 element: the unit of the f32 kernels' memory costs. */
export const F32_BYTES = bytesPerElement('f32');

/**
 * The dtype group of matmul-family weights: they may be half while the
 * activations are f32 (weight-only half, what decoding reads most of).
 */
export const WEIGHTS = 'weight';

/**
 * The dtype group of matmul's c, whose dtype y takes: an f32 residual stream
 * under half operands.
 */
export const RESIDUALS = 'residual';

/**
 * The values of an `out` attribute, the dtype of a kernel's y: `'auto'` as
 * the spec's inputs give it, or the float dtype named (an f32 result
 * rounded once to nearest even as it is stored: a producer writing the half
 * operand of a tensor-core product, so that no cast pass follows it).
 */
export const OUT_DTYPES = ['auto', ...FLOAT] as const;
export type OutDType = (typeof OUT_DTYPES)[number];

/** The declaration of an `out` attribute; `auto` says what 'auto' gives. */
export function outDtypeAttr(auto: string) {
  return {
    kind: 'enum',
    values: OUT_DTYPES,
    default: 'auto',
    doc: `y's dtype: 'auto' (default) ${auto}, or the one named (computed in f32, rounded to nearest even as stored)`,
  } as const;
}

/** The dtype an `out` attribute gives y: `auto` for 'auto', else the one named. */
export function outDtypeOf(out: OutDType, auto: DType): DType {
  return out === 'auto' ? auto : out;
}

/** The dtype group of KV caches: they may be half while queries and new rows are f32. */
export const CACHES = 'cache';

/** The dtype group of optimizer gradients: they may be half while master weights and moments are f32. */
export const GRADIENTS = 'gradient';

/** Bytes of a tensor in memory: its elements times the size of its dtype (0 when absent). */
export function bytesOf(meta: TensorMeta | undefined): number {
  return meta ? sizeOf(meta.shape) * bytesPerElement(meta.dtype) : 0;
}

/** The attributes of a kernel that takes none. */
export type NoAttrs = Record<never, never>;

/** Rows of the last axis: `rows` rows of length `n`. */
export function rowsOf(shape: readonly number[]): { rows: number; n: number } {
  return { rows: sizeOf(shape.slice(0, -1)), n: shape[shape.length - 1]! };
}

/** The smallest power of two >= n (1 for n <= 1). */
export function pow2AtLeast(n: number): number {
  return n <= 1 ? 1 : 2 ** Math.ceil(Math.log2(n));
}
