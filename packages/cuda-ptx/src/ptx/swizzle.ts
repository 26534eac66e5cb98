import { describeValue, misuse } from './errors.js';

/**
 * XOR swizzles of shared-memory tiles, the layouts ldmatrix reads without
 * bank conflicts and that wgmma descriptors and TMA name by their span: a
 * tile is stored in rows of exactly `span` bytes (32, 64 or 128), and the
 * 16-byte chunk index inside each 128-byte line is XORed with the line's
 * index (bits 7 and up of the offset), so the 8 row addresses of an 8×8
 * ldmatrix matrix, which share a logical chunk, fall in 8 different 16-byte
 * bank groups. A tile wider than the span is stored as panels of span-wide
 * rows. `none` is the identity.
 */
export type SharedSwizzle = 'none' | '32B' | '64B' | '128B';

export const SHARED_SWIZZLES: readonly SharedSwizzle[] = ['none', '32B', '64B', '128B'];

/** Bytes of one swizzled row: the swizzle's span (16 for `none`, the unit it moves). */
export const SWIZZLE_SPAN: Readonly<Record<SharedSwizzle, number>> = {
  none: 16,
  '32B': 32,
  '64B': 64,
  '128B': 128,
};

/** The chunk-index bits that the line index is XORed into: log2(span / 16) bits from bit 4. */
export function swizzleMask(swizzle: SharedSwizzle): number {
  const span = SWIZZLE_SPAN[swizzle];
  if (span === undefined) {
    throw misuse('swizzleMask', 'unknown shared-memory swizzle', {
      argument: 'swizzle',
      expected: `one of ${SHARED_SWIZZLES.join(', ')}`,
      actual: describeValue(swizzle),
    });
  }
  return span - 16;
}

/**
 * The swizzled byte offset of logical byte `offset` of a tile: bits 4.. of
 * the offset XOR bits 7.. (the 128-byte line), masked to the swizzle's span.
 * A bijection on every 1024-byte block (8 lines), and it keeps each 16-byte
 * chunk whole, so 16-byte vectors and ldmatrix rows stay contiguous.
 */
export function swizzleOffset(swizzle: SharedSwizzle, offset: number): number {
  const mask = swizzleMask(swizzle);
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw misuse('swizzleOffset', 'expected a byte offset', {
      argument: 'offset',
      expected: 'a non-negative integer',
      actual: describeValue(offset),
    });
  }
  return offset ^ ((offset >>> 3) & mask);
}

/** The swizzled offset of byte `colByte` of row `row` in a tile of span-wide rows. */
export function swizzledTileOffset(swizzle: SharedSwizzle, row: number, colByte: number): number {
  const span = SWIZZLE_SPAN[swizzle];
  if (!Number.isInteger(colByte) || colByte < 0 || colByte >= span) {
    throw misuse('swizzledTileOffset', 'the column is outside the swizzled row', {
      argument: 'colByte',
      expected: `an integer in 0 .. ${span - 1} (rows of ${span} bytes)`,
      actual: describeValue(colByte),
    });
  }
  return swizzleOffset(swizzle, row * span + colByte);
}
