import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { pow2AtLeast, rowsOf } from './vocabulary.js';

describe('pow2AtLeast', () => {
  it('is 1 up to 1, then the smallest power of two not below n', () => {
    expect([0, 1, 2, 3, 4, 5, 31, 32, 33, 1000].map(pow2AtLeast)).toEqual([
      1, 1, 2, 4, 4, 8, 32, 32, 64, 1024,
    ]);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 30 }), (n) => {
        const p = pow2AtLeast(n);
        expect(Number.isInteger(Math.log2(p))).toBe(true);
        expect(p >= n && p / 2 < n).toBe(true);
      }),
    );
  });
});

describe('rowsOf', () => {
  it('splits a shape into rows of its last axis', () => {
    expect(rowsOf([2, 3, 5])).toEqual({ rows: 6, n: 5 });
    expect(rowsOf([7])).toEqual({ rows: 1, n: 7 });
  });
});
