import { bytesPerElement } from '../dtype.js';
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
