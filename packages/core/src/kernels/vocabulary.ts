import { bytesPerElement } from '../dtype.js';
import { sizeOf } from '../shape.js';

// Small names the kernel files of every package share, declared here once.

/** The dtypes of a kernel that takes f32 only. */
export const F32 = ['f32'] as const;

/** Bytes of one f32 element: the unit of the f32 kernels' memory costs. */
export const F32_BYTES = bytesPerElement('f32');

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
