import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type Param, type Pred, type R32 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { DECODE_MMA_ROUND, DECODE_MMA_TILE, decodeMmaStages } from './attentionMmaPlan.js';
import { loadPointer, loadU32 } from './common.js';
import { swizzled } from './mmaTiles.js';

// Where the tensor-core decode attention's K and V tiles come from (a
// contiguous cache or page pools), and each warp's ring of shared-memory
// stages that cp.async fills ahead of the tile the warp multiplies.

type Params = Readonly<Record<string, Param<ParamType>>>;

/** Bytes of a 16-row tile of one cache. */
export function tileBytes(headDim: number): number {
  return DECODE_MMA_TILE * headDim * 2;
}

/** Bytes of a warp's ring: its stages of a K and a V tile. */
export function ringBytes(headDim: number): number {
  return decodeMmaStages(headDim) * 2 * tileBytes(headDim);
}

/** The first cache row of the tile at token `base` (in rows of headDim), and whether it may be read. */
export type TileRow = (base: R32) => { readonly rowAt: R32; readonly valid?: Pred };

/** A contiguous cache [nKvHeads, maxSeq, headDim]: row kvHead · maxSeq + base. */
export function contiguousTileRow(k: KernelBuilder, p: Params, kvHead: R32): TileRow {
  const headRow = k.mulLo('u32', k.reg('u32'), kvHead, loadU32(k, p, 'maxSeq'));
  return (base) => ({ rowAt: k.add('u32', k.reg('u32'), headRow, base) });
}

/**
 * Page pools [numPages, kvHeads, pageSize, headDim]: the tile lies in page
 * blockTables[b, base >> shift] at offset base mod pageSize (tiles start at
 * multiples of 16, pages hold a power of two of at least 16 rows). A page
 * outside the pool is read as zeros, from the pool's first row.
 */
export function pagedTileRow(
  k: KernelBuilder,
  p: Params,
  shift: number,
  sequence: R32,
  kvHead: R32,
): TileRow {
  const maxPages = loadU32(k, p, 'maxPages');
  const kvHeads = loadU32(k, p, 'kvHeads');
  const numPages = loadU32(k, p, 'numPages');
  const tables = k.elementAddress(
    loadPointer(k, p, 'blockTables'),
    k.mulLo('u32', k.reg('u32'), sequence, maxPages),
    4,
  );
  return (base) => {
    const page = k.ldGlobal(
      'u32',
      k.reg('u32'),
      k.elementAddress(tables, k.shr('u32', k.reg('u32'), base, shift), 4),
    );
    // Negative entries are huge as u32.
    const valid = k.setp('lt', 'u32', k.reg('pred'), page, numPages);
    const headRow = k.shl('b32', k.reg('u32'), k.madLo('u32', k.reg('u32'), page, kvHeads, kvHead), shift);
    const row = k.add('u32', k.reg('u32'), headRow, k.and('b32', k.reg('u32'), base, 2 ** shift - 1));
    return { rowAt: k.selp('u32', k.reg('u32'), row, 0, valid), valid };
  };
}

/** A warp's ring of stages: a K tile, then its V tile, in each. */
export interface KvTileRing {
  /** The warp's first tile's token (each later one a round on). */
  readonly first: R32;
  /** The stage the loop multiplies next: its K tile, the V tile tileBytes after it. */
  readonly useStage: R32;
  /** Starts the copies of the next tile not yet issued (zeros past t1) into the stage after the last, and commits them. */
  issueNext(): void;
  /** Waits until the tile in useStage is in shared memory, for the whole warp. */
  waitForUse(): void;
  /** The warp is done with useStage: the next one is used, and this one may be refilled. */
  releaseUse(): void;
  /** Waits for every copy still in flight (tiles past the split's end are empty groups). */
  drain(): void;
}

/**
 * A warp's ring at shared address `ring`, its first stages − 1 tiles (from
 * token `first`, a round apart) already in flight. Lane `lane` copies
 * 16-byte chunks lane + 32i of each tile, swizzled as ldmatrix reads them.
 */
export function kvTileRing(
  k: KernelBuilder,
  p: Params,
  g: {
    readonly ring: R32;
    readonly lane: R32;
    readonly headDim: number;
    readonly first: R32;
    readonly t1: R32;
    readonly tileRow: TileRow;
  },
): KvTileRing {
  const rowBytes = g.headDim * 2;
  const tile = tileBytes(g.headDim);
  const stages = decodeMmaStages(g.headDim);
  const chunksPerRow = g.headDim / 8;
  const copies = Array.from({ length: (DECODE_MMA_TILE * chunksPerRow) / 32 }, (_, i) => {
    const s = k.add('u32', k.reg('u32'), g.lane, 32 * i);
    const row = k.shr('u32', k.reg('u32'), s, Math.log2(chunksPerRow));
    const chunk = k.and('b32', k.reg('u32'), s, chunksPerRow - 1);
    // Bytes past the tile's first row in the cache.
    const offset = k.mulLo('u32', k.reg('u32'), s, 16);
    return { row, offset, shared: swizzled(k, rowBytes, row, chunk) };
  });
  const kBase = loadPointer(k, p, 'kCache');
  const vBase = loadPointer(k, p, 'vCache');
  const end = k.add('u32', k.reg('u32'), g.ring, ringBytes(g.headDim));
  const advance = (stage: R32) => {
    k.add('u32', stage, stage, 2 * tile);
    k.selp('u32', stage, g.ring, stage, k.setp('eq', 'u32', k.reg('pred'), stage, end));
  };
  const issueBase = k.mov('u32', k.reg('u32'), g.first);
  const issueStage = k.mov('u32', k.reg('u32'), g.ring);
  const issueNext = () => {
    k.ifThen(k.setp('lt', 'u32', k.reg('pred'), issueBase, g.t1), () => {
      const { rowAt, valid } = g.tileRow(issueBase);
      const kAt = k.elementAddress(kBase, rowAt, rowBytes);
      const vAt = k.elementAddress(vBase, rowAt, rowBytes);
      for (const cp of copies) {
        const token = k.add('u32', k.reg('u32'), issueBase, cp.row);
        const before = k.setp('lt', 'u32', k.reg('pred'), token, g.t1);
        // A page outside the pool reads nothing: its rows are zeros.
        const inside = valid ? k.and('pred', k.reg('pred'), before, valid) : before;
        // A row past t1 is read as zeros (a V row of garbage times a zero weight could be NaN).
        const bytes = k.selp('u32', k.reg('u32'), 16, 0, inside);
        const at = k.add('u32', k.reg('u32'), issueStage, cp.shared);
        const src = k.selp('u32', k.reg('u32'), cp.offset, 0, inside);
        k.cpAsync('cg', at, k.elementAddress(kAt, src, 1), 16, { srcBytes: bytes });
        k.cpAsync('cg', addr(at, tile), k.elementAddress(vAt, src, 1), 16, { srcBytes: bytes });
      }
    });
    // Every call commits a group (empty past t1), so the waits count stages.
    k.cpAsyncCommitGroup();
    k.add('u32', issueBase, issueBase, DECODE_MMA_ROUND);
    advance(issueStage);
  };
  for (let s = 0; s < stages - 1; s++) issueNext();
  const useStage = k.mov('u32', k.reg('u32'), g.ring);
  return {
    first: g.first,
    useStage,
    issueNext,
    waitForUse() {
      k.cpAsyncWaitGroup(stages - 1);
      k.warpSync();
    },
    releaseUse() {
      // Every lane's reads of the stage are done before any lane refills it.
      k.warpSync();
      advance(useStage);
    },
    drain() {
      k.cpAsyncWaitAll();
    },
  };
}
