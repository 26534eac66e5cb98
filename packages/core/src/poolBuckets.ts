/**
 * The size bucket of a pooled device allocation: requests are rounded up so
 * that allocations of similar sizes can be reused. 256-byte steps up to
 * 64 KiB (256 is also CUDA's allocation alignment and a multiple of WebGPU's
 * storage offset alignment), then eight buckets per power of two (at most
 * 12.5% slack). A request of 0 bytes takes the smallest bucket.
 */
export function poolBucketBytes(bytes: number): number {
  const b = Math.max(bytes, 1);
  if (b <= 64 * 1024) return Math.ceil(b / 256) * 256;
  const step = 2 ** (Math.floor(Math.log2(b)) - 3);
  return Math.ceil(b / step) * step;
}
