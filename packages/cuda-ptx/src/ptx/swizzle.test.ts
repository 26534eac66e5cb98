import { InvalidArgumentError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { SHARED_SWIZZLES, SWIZZLE_SPAN, swizzledTileOffset, swizzleOffset } from './swizzle.js';

/** The 16-byte bank group (4 of the 32 four-byte banks) a shared address falls in. */
const bankGroup = (offset: number) => (offset >>> 4) & 7;

/** Bank groups the 8 row addresses of an 8×8 ldmatrix matrix hit: rows r0 … r0+7 at one logical column. */
function ldmatrixGroups(
  place: (row: number, colByte: number) => number,
  r0: number,
  colByte: number,
): number[] {
  return Array.from({ length: 8 }, (_, i) => bankGroup(place(r0 + i, colByte)));
}

describe('shared-memory swizzles', () => {
  for (const swizzle of SHARED_SWIZZLES) {
    const span = SWIZZLE_SPAN[swizzle];

    it(`${swizzle}: a bijection on each 1024-byte block that keeps 16-byte chunks whole`, () => {
      for (const block of [0, 1024, 4096]) {
        const images = new Set<number>();
        for (let o = block; o < block + 1024; o++) {
          const s = swizzleOffset(swizzle, o);
          expect(s >>> 10).toBe(o >>> 10);
          expect(s & 15).toBe(o & 15);
          images.add(s);
        }
        expect(images.size).toBe(1024);
      }
    });

    it(`${swizzle}: the rows of every ldmatrix matrix hit 8 different bank groups`, () => {
      const place = (row: number, colByte: number) => swizzledTileOffset(swizzle, row, colByte);
      for (let r0 = 0; r0 < 64; r0 += 8) {
        for (let col = 0; col < span; col += 16) {
          expect(new Set(ldmatrixGroups(place, r0, col)).size).toBe(8);
        }
      }
    });
  }

  it('is what makes 128-byte rows conflict-free: unswizzled they hit one bank group', () => {
    const plain = (row: number, colByte: number) => row * 128 + colByte;
    expect(new Set(ldmatrixGroups(plain, 0, 32)).size).toBe(1);
    expect(ldmatrixGroups((r, c) => swizzledTileOffset('128B', r, c), 0, 32)).toEqual([
      2, 3, 0, 1, 6, 7, 4, 5,
    ]);
  });

  it('moves chunks as the wgmma and TMA swizzle modes do', () => {
    // 128B: chunk c of row r goes to c ^ (r % 8).
    expect(swizzledTileOffset('128B', 3, 16 * 5 + 2)).toBe(3 * 128 + 16 * (5 ^ 3) + 2);
    // 64B: rows pair up into 128-byte lines; chunk c of row r goes to c ^ ((r >> 1) % 4).
    expect(swizzledTileOffset('64B', 5, 16)).toBe(5 * 64 + 16 * (1 ^ 2));
    // 32B: four rows per line; chunk c goes to c ^ ((r >> 2) % 2).
    expect(swizzledTileOffset('32B', 4, 0)).toBe(4 * 32 + 16);
    expect(swizzleOffset('none', 777)).toBe(777);
  });

  it('rejects offsets, columns and modes it has no place for', () => {
    expect(() => swizzleOffset('64B', -1)).toThrow(InvalidArgumentError);
    expect(() => swizzledTileOffset('64B', 0, 64)).toThrow(
      "swizzledTileOffset: argument 'colByte': the column is outside the swizzled row (expected an integer in 0 .. 63 (rows of 64 bytes), got number 64)",
    );
    expect(() => swizzleOffset('16B' as 'none', 0)).toThrow(InvalidArgumentError);
  });
});
