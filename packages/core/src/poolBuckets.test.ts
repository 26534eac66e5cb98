import { describe, expect, it } from 'vitest';
import { poolBucketBytes } from './poolBuckets.js';

describe('poolBucketBytes', () => {
  it('rounds sizes to 256-byte steps, then to eighths of a power of two', () => {
    expect([0, 1, 4, 256, 257, 65536].map(poolBucketBytes)).toEqual([256, 256, 256, 256, 512, 65536]);
    expect(poolBucketBytes(65537)).toBe(65536 + 8192);
    expect(poolBucketBytes(1_000_000)).toBe(1_048_576);
    for (const n of [70_000, 1_234_567, 99_999_999, 2 ** 33 + 1]) {
      const b = poolBucketBytes(n);
      expect(b).toBeGreaterThanOrEqual(n);
      expect(b / n).toBeLessThanOrEqual(1.125);
      // Every size in a bucket maps to the bucket itself.
      expect(poolBucketBytes(b)).toBe(b);
    }
  });
});
