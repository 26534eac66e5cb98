import { poolBucketBytes } from '../poolBuckets.js';

const MIB = 2 ** 20;

/**
 * The size classes of the caching allocator, in the manner of PyTorch's CUDA
 * caching allocator. With splitting, block sizes are multiples of 512 bytes
 * and segments (what the device is asked for) are larger than the blocks
 * carved from them: 2 MiB segments hold blocks of up to 1 MiB (the small
 * pool), 20 MiB segments hold blocks of up to 10 MiB, and larger requests
 * get a segment of their own rounded up to 2 MiB. Small and large blocks
 * come from separate pools, so that short-lived small blocks do not pin
 * large segments. Without splitting, a block is a whole segment and its size
 * is its `poolBucketBytes` bucket (at most 12.5% slack).
 */
export const MIN_BLOCK_BYTES = 512;
export const SMALL_BLOCK_LIMIT = MIB;
export const SMALL_SEGMENT_BYTES = 2 * MIB;
export const LARGE_SEGMENT_BYTES = 20 * MIB;
const MID_BLOCK_LIMIT = 10 * MIB;
const LARGE_ROUNDING = 2 * MIB;

export type PoolName = 'small' | 'large';

/** The block size a request of `bytes` takes. */
export function blockBytes(bytes: number, splitting: boolean): number {
  if (!splitting) return poolBucketBytes(bytes);
  return Math.max(MIN_BLOCK_BYTES, Math.ceil(bytes / MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES);
}

/** Which pool a block of `size` (a `blockBytes` value) comes from. */
export function poolOf(size: number): PoolName {
  return size <= SMALL_BLOCK_LIMIT ? 'small' : 'large';
}

/** The bytes of a new segment for a block of `size` (a `blockBytes` value). */
export function segmentBytes(size: number, splitting: boolean): number {
  if (!splitting) return size;
  if (size <= SMALL_BLOCK_LIMIT) return SMALL_SEGMENT_BYTES;
  if (size <= MID_BLOCK_LIMIT) return LARGE_SEGMENT_BYTES;
  return Math.ceil(size / LARGE_ROUNDING) * LARGE_ROUNDING;
}

/**
 * Whether a free block of `size` handed out for `wanted` bytes is split,
 * leaving the rest free: in the small pool when at least a minimal block is
 * left, in the large pool when more than a small block's limit is left.
 */
export function shouldSplit(size: number, wanted: number): boolean {
  const rest = size - wanted;
  return poolOf(wanted) === 'small' ? rest >= MIN_BLOCK_BYTES : rest > SMALL_BLOCK_LIMIT;
}
