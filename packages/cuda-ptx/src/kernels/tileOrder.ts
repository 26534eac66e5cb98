import type { KernelBuilder } from '../ptx/kernel.js';
import type { R32 } from '../ptx/operands.js';

/** Tile rows per group of the block order: consecutive blocks share rows of a and columns of b in L2. */
export const GROUP_ROWS = 8;

/**
 * The first row and column of block x's tile of y (or of tile `block`, for
 * persistent kernels) in the grouped order:
 * GROUP_ROWS tile rows are walked column by column (the last group may have
 * fewer rows).
 */
export function groupedTile(
  k: KernelBuilder,
  tilesM: R32,
  tilesN: R32,
  bm: number,
  bn: number,
  block: R32 = k.ctaid(),
): { row0: R32; col0: R32 } {
  const groupSize = k.mulLo('u32', k.reg('u32'), tilesN, GROUP_ROWS);
  const group = k.div('u32', k.reg('u32'), block, groupSize);
  const firstRow = k.mulLo('u32', k.reg('u32'), group, GROUP_ROWS);
  const rowsInGroup = k.min('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), tilesM, firstRow), GROUP_ROWS);
  const inGroup = k.sub('u32', k.reg('u32'), block, k.mulLo('u32', k.reg('u32'), group, groupSize));
  const tileRow = k.add('u32', k.reg('u32'), firstRow, k.rem('u32', k.reg('u32'), inGroup, rowsInGroup));
  const tileCol = k.div('u32', k.reg('u32'), inGroup, rowsInGroup);
  return {
    row0: k.mulLo('u32', k.reg('u32'), tileRow, bm),
    col0: k.mulLo('u32', k.reg('u32'), tileCol, bn),
  };
}
