import type { DeviceProperties } from '../driver/driver.js';
import type { KernelEncoder, LaunchValue, Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type Pred, type R32 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { launchSplitAndMerge } from './attentionMerge.js';
import { MAX_SPLITS } from './attentionPlan.js';
import { normalised, PAGED_PARAMS } from './attentionRows.js';
import { LOWEST } from './attentionStates.js';
import { loadPointer, loadU32 } from './common.js';
import { loadDeviceU32 } from './decodingAccess.js';
import { mmaBlock } from './flashAttentionMma.js';
import { mmaProduct, onlineSoftmax, swizzled } from './mmaTiles.js';
import {
  type FloatStorage,
  loadAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// One query token's attention over a bf16 KV cache on tensor cores (sm_80
// mma.sync m16n8k16), for grouped heads: the G ≤ 8 query heads of a kv head
// are the rows of one 16-row A operand, so K and V are read once for all of
// them and no lane reduces a dot product by shuffles. The 8 rows G does not
// fill carry the f32 q's remainder after rounding to bf16 (row g + 8 holds
// q − bf16(q) of row g), and the softmax weights go in the same way, so the
// products keep about 16 bits of q and of the weights: close to the CUDA-core
// kernel's f32, where a plain bf16 q would lose 8. Row g's and g + 8's
// accumulators sit in the same lane, which adds them.
//
// Each warp streams its own 16-token tiles of K and V through a ring of
// shared-memory stages with cp.async (no block barrier in the loop), the
// warps of a block taking every fourth tile of its split. The warps' states
// are merged through shared memory at the end into the normalised output
// (one pass) or the split's state for incrementalAttention's merge kernel.

type Params = Readonly<Record<string, Param<ParamType>>>;

/** Warps a block; each takes every DECODE_MMA_WARPS-th tile of the split. */
export const DECODE_MMA_WARPS = 4;
/** Tokens of a warp's tile: one k step of the P·V product. */
export const DECODE_MMA_TILE = 16;
/** Tokens a block's warps take in one round. */
export const DECODE_MMA_ROUND = DECODE_MMA_WARPS * DECODE_MMA_TILE;
export const DECODE_MMA_HEAD_DIMS: readonly number[] = [64, 128];
/** Query heads a kv head may have: the A operand's first 8 rows (the other 8 hold remainders). */
export const DECODE_MMA_MAX_GROUP = 8;
/** Shared memory a block aims at, which sets its stages (two blocks an SM at least). */
const STAGE_BUDGET = 64 * 1024;

export interface DecodeMmaConfig {
  readonly headDim: number;
  /** Query heads a kv head has (1 … DECODE_MMA_MAX_GROUP). */
  readonly group: number;
  /** Whether the block leaves a partial state for the merge kernel instead of the output. */
  readonly split: boolean;
  /** Whether seqLen is read from device memory (`seqLenAt`) instead of a parameter. */
  readonly deviceLength: boolean;
  /** Storage of q and out; the caches are bf16. */
  readonly act: FloatStorage;
  /**
   * Page pools [numPages, kvHeads, pageSize, headDim] read through block
   * tables, one sequence per block along z, its length read from device
   * memory: log2 of the page size (at least 16, so that a tile lies in one
   * page). A sequence of length 0 leaves zeros.
   */
  readonly pageShift?: number;
}

/** Bytes of one warp's stage: a K and a V tile of 16 rows. */
function stageBytes(headDim: number): number {
  return 2 * DECODE_MMA_TILE * headDim * 2;
}

/** Stages a warp's ring holds: as many as fit the budget, 2 to 4. */
export function decodeMmaStages(headDim: number): number {
  return Math.max(2, Math.min(4, Math.floor(STAGE_BUDGET / (DECODE_MMA_WARPS * stageBytes(headDim)))));
}

/** The block's dynamic shared memory: every warp's ring (reused for the merge of the warps' states). */
export function decodeMmaSharedBytes(c: Pick<DecodeMmaConfig, 'headDim' | 'group'>): number {
  const rings = DECODE_MMA_WARPS * decodeMmaStages(c.headDim) * stageBytes(c.headDim);
  const states = DECODE_MMA_WARPS * c.group * (c.headDim + 2) * 4;
  return Math.max(rings, states);
}

export function decodeMmaKey(c: DecodeMmaConfig): string {
  const paged = c.pageShift === undefined ? '' : `/paged${c.pageShift}`;
  return `decoding/attention-mma/${c.split ? 'split' : 'single'}/d${c.headDim}g${c.group}${c.deviceLength ? '/len' : ''}${paged}${storageKey([c.act, 'bf16'])}`;
}

/** x ≈ hi + lo, each pair packed as bf16: hi = bf16(x), lo = bf16(x − hi). */
function splitPair(k: KernelBuilder, x0: F32, x1: F32): { hi: R32; lo: R32 } {
  const hi = k.cvtPack('bf16', k.reg('u32'), x0, x1);
  const h0 = k.mov('b32', k.reg('f32'), k.shl('b32', k.reg('u32'), hi, 16));
  const h1 = k.mov('b32', k.reg('f32'), k.and('b32', k.reg('u32'), hi, 0xffff0000));
  const r0 = k.sub('f32', k.reg('f32'), x0, h0, { rnd: 'rn' });
  const r1 = k.sub('f32', k.reg('f32'), x1, h1, { rnd: 'rn' });
  return { hi, lo: k.cvtPack('bf16', k.reg('u32'), r0, r1) };
}

/** The first cache row of the tile at token `base` (in rows of headDim), and whether it may be read. */
type TileRow = (base: R32) => { readonly rowAt: R32; readonly valid?: Pred };

/** A contiguous cache [nKvHeads, maxSeq, headDim]: row kvHead · maxSeq + base. */
function contiguousTileRow(k: KernelBuilder, p: Params, kvHead: R32): TileRow {
  const headRow = k.mulLo('u32', k.reg('u32'), kvHead, loadU32(k, p, 'maxSeq'));
  return (base) => ({ rowAt: k.add('u32', k.reg('u32'), headRow, base) });
}

/**
 * Page pools [numPages, kvHeads, pageSize, headDim]: the tile lies in page
 * blockTables[b, base >> shift] at offset base mod pageSize (tiles start at
 * multiples of 16, pages hold a power of two of at least 16 rows). A page
 * outside the pool is read as zeros, from the pool's first row.
 */
function pagedTileRow(k: KernelBuilder, p: Params, shift: number, sequence: R32, kvHead: R32): TileRow {
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

/**
 * Attention of the `group` query heads of kv head ctaid.y over the tokens
 * [ctaid.x · splitTokens, +splitTokens) ∩ [0, seqLen) of a [nKvHeads, maxSeq,
 * headDim] bf16 cache pair, grid (splits, nKvHeads); or, paged, of sequence
 * ctaid.z over its pages, grid (splits, nKvHeads, B).
 */
export function decodeMmaModule(c: DecodeMmaConfig): PtxModule {
  const { headDim: hd, group: G, act } = c;
  const rowBytes = hd * 2;
  const tileBytes = DECODE_MMA_TILE * rowBytes;
  const stages = decodeMmaStages(hd);
  const ringBytes = stages * 2 * tileBytes;
  const kSteps = hd / 16;
  const chunksPerRow = hd / 8;
  const copies = (DECODE_MMA_TILE * chunksPerRow) / 32;
  const actBytes = STORAGE_BYTES[act];
  const outputs: Record<string, ParamType> = c.split
    ? { partAcc: 'ptr', partMax: 'ptr', partSum: 'ptr' }
    : { out: 'ptr' };
  const paged = c.pageShift !== undefined;
  const m = new PtxModule({ target: 'sm_80' });
  const smem = m.dynamicShared('smem', 128);
  m.entry(
    c.split ? 'attention_mma_split' : 'attention_mma',
    {
      q: 'ptr',
      kCache: 'ptr',
      vCache: 'ptr',
      ...outputs,
      ...(paged
        ? PAGED_PARAMS
        : { maxSeq: 'u32', ...(c.deviceLength ? { seqLenAt: 'ptr' } : { seqLen: 'u32' }) }),
      splitTokens: 'u32',
      scale: 'f32',
    } as Record<string, ParamType>,
    (k, p) => {
      const block = mmaBlock(k, hd);
      const { tid, warp, groupId, colPair } = block;
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const kvHead = k.ctaid('y');
      const split = k.ctaid('x');
      const head0 = k.mulLo('u32', k.reg('u32'), kvHead, G);
      // Paged: sequence b along z, whose heads are rows b·nHeads … of q, out and the states.
      const sequence = paged ? k.ctaid('z') : undefined;
      const row0 = sequence
        ? k.madLo('u32', k.reg('u32'), sequence, k.mulLo('u32', k.reg('u32'), k.nctaid('y'), G), head0)
        : head0;
      let seqLen: R32;
      if (sequence) {
        const given = loadDeviceU32(k, k.elementAddress(loadPointer(k, p, 'seqLens'), sequence, 4));
        const capacity = k.mulLo('u32', k.reg('u32'), loadU32(k, p, 'pageSize'), loadU32(k, p, 'maxPages'));
        // given − 1 < capacity as u32: 1 … capacity (0, an idle row, and negatives wrap past it).
        const inRange = k.setp('lt', 'u32', k.reg('pred'), k.sub('u32', k.reg('u32'), given, 1), capacity);
        seqLen = k.selp('u32', k.reg('u32'), given, 0, inRange);
      } else if (c.deviceLength) {
        const given = loadDeviceU32(k, loadPointer(k, p, 'seqLenAt'));
        // given − 1 < maxSeq as u32: 1 … maxSeq (0 and negatives wrap past it).
        const inRange = k.setp(
          'lt',
          'u32',
          k.reg('pred'),
          k.sub('u32', k.reg('u32'), given, 1),
          loadU32(k, p, 'maxSeq'),
        );
        seqLen = k.selp('u32', k.reg('u32'), given, 0, inRange);
      } else seqLen = loadU32(k, p, 'seqLen');
      const splitTokens = loadU32(k, p, 'splitTokens');
      const t0 = k.mulLo('u32', k.reg('u32'), split, splitTokens);
      const t1 = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), t0, splitTokens), seqLen);

      // The warp's ring; its copies: chunk lane + 32i of a tile (row, 16-byte chunk), swizzled.
      const ring = k.madLo('u32', k.reg('u32'), warp, ringBytes, k.sharedAddress(smem));
      const copy = Array.from({ length: copies }, (_, i) => {
        const s = k.add('u32', k.reg('u32'), lane, 32 * i);
        const row = k.shr('u32', k.reg('u32'), s, Math.log2(chunksPerRow));
        const chunk = k.and('b32', k.reg('u32'), s, chunksPerRow - 1);
        // Bytes past the tile's first row in the cache.
        const offset = k.mulLo('u32', k.reg('u32'), s, 16);
        return { row, offset, shared: swizzled(k, rowBytes, row, chunk) };
      });
      const tileRow = paged
        ? pagedTileRow(k, p, c.pageShift!, sequence!, kvHead)
        : contiguousTileRow(k, p, kvHead);
      const kBase = loadPointer(k, p, 'kCache');
      const vBase = loadPointer(k, p, 'vCache');
      // Tile i of this warp starts at token t0 + 16·warp + 64·i.
      const first = k.madLo('u32', k.reg('u32'), warp, DECODE_MMA_TILE, t0);

      /** Starts the copies of the tile at token `base` into stage `stage` (zeros past t1), then commits. */
      const issue = (base: R32, stage: R32) => {
        k.ifThen(k.setp('lt', 'u32', k.reg('pred'), base, t1), () => {
          const { rowAt, valid } = tileRow(base);
          const kAt = k.elementAddress(kBase, rowAt, rowBytes);
          const vAt = k.elementAddress(vBase, rowAt, rowBytes);
          for (const cp of copy) {
            const token = k.add('u32', k.reg('u32'), base, cp.row);
            const before = k.setp('lt', 'u32', k.reg('pred'), token, t1);
            // A page outside the pool reads nothing: its rows are zeros.
            const inside = valid ? k.and('pred', k.reg('pred'), before, valid) : before;
            // A row past t1 is read as zeros (a V row of garbage times a zero weight could be NaN).
            const bytes = k.selp('u32', k.reg('u32'), 16, 0, inside);
            const at = k.add('u32', k.reg('u32'), stage, cp.shared);
            const src = k.selp('u32', k.reg('u32'), cp.offset, 0, inside);
            k.cpAsync('cg', at, k.elementAddress(kAt, src, 1), 16, { srcBytes: bytes });
            k.cpAsync('cg', addr(at, tileBytes), k.elementAddress(vAt, src, 1), 16, { srcBytes: bytes });
          }
        });
        k.cpAsyncCommitGroup();
      };
      const nextStage = (stage: R32) => {
        k.add('u32', stage, stage, 2 * tileBytes);
        const wrapped = k.setp(
          'eq',
          'u32',
          k.reg('pred'),
          stage,
          k.add('u32', k.reg('u32'), ring, ringBytes),
        );
        k.selp('u32', stage, ring, stage, wrapped);
      };

      // The ring's first stages-1 tiles in flight before the loop.
      const issueBase = k.mov('u32', k.reg('u32'), first);
      const issueStage = k.mov('u32', k.reg('u32'), ring);
      for (let s = 0; s < stages - 1; s++) {
        issue(issueBase, issueStage);
        k.add('u32', issueBase, issueBase, DECODE_MMA_ROUND);
        nextStage(issueStage);
      }

      // q · scale as A fragments (loaded while the first tiles are in flight): row g (< G) its bf16 part, row g + 8 the remainder, other rows 0.
      const scale = k.ldParam(p.scale as Param<'f32'>);
      const rowOk = k.setp('lt', 'u32', k.reg('pred'), groupId, G);
      const qAt = k.elementAddress(
        loadPointer(k, p, 'q'),
        k.madLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, groupId), hd, colPair),
        actBytes,
      );
      const qFrag = Array.from({ length: kSteps }, (_, kk) => {
        const halves = [0, 8].map((offset) => {
          const x = k.regs('f32', 2);
          loadAsF32(k, act, x, addr(qAt, actBytes * (16 * kk + offset)), { ok: rowOk });
          for (const r of x) k.mul('f32', r, r, scale, { rnd: 'rn' });
          return splitPair(k, x[0]!, x[1]!);
        });
        return [halves[0]!.hi, halves[0]!.lo, halves[1]!.hi, halves[1]!.lo] as unknown as Vec4<R32>;
      });

      const mRow = k.mov('f32', k.reg('f32'), LOWEST);
      const lRow = k.mov('f32', k.reg('f32'), 0);
      const o = Array.from({ length: hd / 8 }, () => k.regs('f32', 4));
      for (const r of o) for (const x of r) k.mov('f32', x, 0);
      const sAcc = [k.regs('f32', 4), k.regs('f32', 4)];
      const log2e = k.mov('f32', k.reg('f32'), Math.LOG2E);
      const useStage = k.mov('u32', k.reg('u32'), ring);
      const base = k.reg('u32');
      k.forRange(base, first, t1, DECODE_MMA_ROUND, () => {
        issue(issueBase, issueStage);
        k.add('u32', issueBase, issueBase, DECODE_MMA_ROUND);
        nextStage(issueStage);
        k.cpAsyncWaitGroup(stages - 1);
        k.warpSync();

        const kTile = useStage;
        const vTile = k.add('u32', k.reg('u32'), useStage, tileBytes);
        const kAt = block.tile.bases(kTile, block.bRow, block.bHalf);
        const vAt = block.tile.bases(vTile, block.bTransRow, block.bTransHalf);
        for (const r of sAcc) for (const x of r) k.mov('f32', x, 0);
        mmaProduct(
          k,
          'bf16',
          sAcc,
          (kk) => qFrag[kk]!,
          { at: (nb, kk) => block.tile.at(kAt, nb, kk) },
          { nBlocks: 1, kSteps },
        );
        // A head's score is its row's sum and its remainder row's (elements 0, 1 and 2, 3).
        for (const r of sAcc) {
          k.add('f32', r[0]!, r[0]!, r[2]!, { rnd: 'rn' });
          k.add('f32', r[1]!, r[1]!, r[3]!, { rnd: 'rn' });
        }
        // Tokens past t1 weigh nothing: only a split's last tile has any.
        const partial = k.setp(
          'gt',
          'u32',
          k.reg('pred'),
          k.add('u32', k.reg('u32'), base, DECODE_MMA_TILE),
          t1,
        );
        k.ifThen(partial, () => {
          sAcc.forEach((r, j) => {
            for (const e of [0, 1]) {
              const token = k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), base, colPair), 8 * j + e);
              const valid = k.setp('lt', 'u32', k.reg('pred'), token, t1);
              k.selp('f32', r[e]!, r[e]!, Number.NEGATIVE_INFINITY, valid);
            }
          });
        });
        const [rescale] = onlineSoftmax(k, sAcc, [mRow], [lRow], log2e);
        for (const r of o) for (const x of r) k.mul('f32', x, x, rescale!, { rnd: 'rn' });
        // The weights as A: row g their bf16 part, row g + 8 the remainder.
        const w0 = splitPair(k, sAcc[0]![0]!, sAcc[0]![1]!);
        const w1 = splitPair(k, sAcc[1]![0]!, sAcc[1]![1]!);
        const pFrag = [w0.hi, w0.lo, w1.hi, w1.lo] as unknown as Vec4<R32>;
        mmaProduct(
          k,
          'bf16',
          o,
          () => pFrag,
          { at: (dn, kb) => block.tile.at(vAt, kb, dn), trans: true },
          { nBlocks: kSteps, kSteps: 1, kOuter: true },
        );
        k.warpSync();
        nextStage(useStage);
      });
      k.cpAsyncWaitAll();
      k.barSync();

      // The warps' states in shared memory: max and sum [warp][g], acc [warp][g][headDim].
      const states = k.sharedAddress(smem);
      const sumsAt = DECODE_MMA_WARPS * G * 4;
      const accAt = 2 * DECODE_MMA_WARPS * G * 4;
      for (const offset of [1, 2])
        k.add('f32', lRow, lRow, k.shflSync('bfly', k.reg('f32'), lRow, offset), { rnd: 'rn' });
      const stateRow = k.madLo('u32', k.reg('u32'), warp, G, groupId);
      k.ifThen(rowOk, () => {
        const quadFirst = k.setp('eq', 'u32', k.reg('pred'), colPair, 0);
        const at = k.madLo('u32', k.reg('u32'), stateRow, 4, states);
        k.predicated(quadFirst, () => {
          k.stShared('f32', at, mRow);
          k.stShared('f32', addr(at, sumsAt), lRow);
        });
        const accRow = k.madLo(
          'u32',
          k.reg('u32'),
          k.madLo('u32', k.reg('u32'), stateRow, hd, colPair),
          4,
          states,
        );
        o.forEach((r, j) => {
          const pair = [0, 1].map((e) => k.add('f32', k.reg('f32'), r[e]!, r[e + 2]!, { rnd: 'rn' }));
          k.stShared('f32', addr(accRow, accAt + 32 * j), pair as unknown as Vec2<F32>);
        });
      });
      k.barSync();

      const outAt = c.split ? undefined : loadPointer(k, p, 'out');
      const part = c.split
        ? {
            acc: loadPointer(k, p, 'partAcc'),
            max: loadPointer(k, p, 'partMax'),
            sum: loadPointer(k, p, 'partSum'),
            splits: k.nctaid('x'),
          }
        : undefined;
      const idx = k.reg('u32');
      k.forRange(idx, tid, G * hd, 32 * DECODE_MMA_WARPS, () => {
        const g = k.shr('u32', k.reg('u32'), idx, Math.log2(hd));
        const dim = k.and('b32', k.reg('u32'), idx, hd - 1);
        const mAt = k.madLo('u32', k.reg('u32'), g, 4, states);
        const aAt = k.madLo('u32', k.reg('u32'), idx, 4, states);
        const ms = Array.from({ length: DECODE_MMA_WARPS }, (_, w) =>
          k.ldShared('f32', k.reg('f32'), addr(mAt, 4 * w * G)),
        );
        const top = ms.slice(1).reduce((a, b) => k.max('f32', k.reg('f32'), a, b), ms[0]!);
        const l = k.mov('f32', k.reg('f32'), 0);
        const acc = k.mov('f32', k.reg('f32'), 0);
        ms.forEach((mw, w) => {
          const d = k.sub('f32', k.reg('f32'), mw, top, { rnd: 'rn' });
          const weight = k.ex2(k.reg('f32'), k.mul('f32', k.reg('f32'), d, log2e, { rnd: 'rn' }), {
            ftz: true,
          });
          const lw = k.ldShared('f32', k.reg('f32'), addr(mAt, sumsAt + 4 * w * G));
          const aw = k.ldShared('f32', k.reg('f32'), addr(aAt, accAt + 4 * w * G * hd));
          k.fma('f32', l, lw, weight, l);
          k.fma('f32', acc, aw, weight, acc);
        });
        const row = k.add('u32', k.reg('u32'), row0, g);
        if (part) {
          // State (row, split) of [nHeads, splits]; its acc row of headDim after it.
          const state = k.madLo('u32', k.reg('u32'), row, part.splits, split);
          k.stGlobal('f32', k.elementAddress(part.acc, k.madLo('u32', k.reg('u32'), state, hd, dim), 4), acc);
          k.predicated(k.setp('eq', 'u32', k.reg('pred'), dim, 0), () => {
            k.stGlobal('f32', k.elementAddress(part.max, state, 4), top);
            k.stGlobal('f32', k.elementAddress(part.sum, state, 4), l);
          });
        } else {
          const value = normalised(k, acc, l, paged);
          storeFromF32(
            k,
            act,
            k.elementAddress(outAt!, k.madLo('u32', k.reg('u32'), row, hd, dim), actBytes),
            value,
          );
        }
      });
    },
    { maxThreadsPerBlock: 32 * DECODE_MMA_WARPS, triggerDependents: true },
  );
  return m;
}

// ---- plan and launch --------------------------------------------------------------------

/** Blocks an SM is meant to hold (each has DECODE_MMA_WARPS warps and 64 KiB of stages). */
const BLOCKS_PER_SM = 2;

export interface DecodeMmaPlan {
  readonly splits: number;
  /** Tokens a split, whole rounds of DECODE_MMA_ROUND (the last split may have fewer). */
  readonly splitTokens: number;
}

/** A cache of at most this many tokens a kv head takes one pass: a merge costs more than the parallelism gives. */
export const SINGLE_PASS_TOKENS = 256;
/** Splits of at least this many tokens where that still gives every SM a block: fewer states to merge. */
const LONG_SPLIT_TOKENS = 256;

/**
 * Splits of whole rounds of the block's warps. Measured on an H200 (32
 * query heads over 8 kv heads): a cache of up to SINGLE_PASS_TOKENS takes
 * one pass (256 tokens, d 64: 3.97 µs against 5.63 in 4 splits and their
 * merge); a longer one takes splits of at least LONG_SPLIT_TOKENS where
 * that leaves a block for every SM (4,096 tokens, d 128: 11.4 µs in 16
 * splits against 12.3 in 33), else as many as give every SM a block (1,024
 * tokens: 16 splits of 64, 8.28 µs against 8.95 in 4 of 256), and never
 * more than BLOCKS_PER_SM blocks an SM or MAX_SPLITS. `minSplitTokens`
 * (the attentionSplitTokens switch) replaces the rule with splits of at
 * least that many tokens.
 */
export function planDecodeMma(
  device: Pick<DeviceProperties, 'multiprocessors'>,
  nKvHeads: number,
  seqLen: number,
  minSplitTokens?: number,
): DecodeMmaPlan {
  const wanted = Math.ceil((device.multiprocessors * BLOCKS_PER_SM) / nKvHeads);
  const rounds = Math.floor(seqLen / Math.max(DECODE_MMA_ROUND, minSplitTokens ?? 0));
  const ruled =
    minSplitTokens !== undefined
      ? rounds
      : seqLen <= SINGLE_PASS_TOKENS
        ? 1
        : Math.min(
            rounds,
            Math.max(Math.floor(seqLen / LONG_SPLIT_TOKENS), Math.ceil(device.multiprocessors / nKvHeads)),
          );
  const splits = Math.max(1, Math.min(wanted, MAX_SPLITS, ruled));
  const splitTokens = Math.max(
    DECODE_MMA_ROUND,
    Math.ceil(seqLen / splits / DECODE_MMA_ROUND) * DECODE_MMA_ROUND,
  );
  return { splits: Math.max(1, Math.ceil(seqLen / splitTokens)), splitTokens };
}

/**
 * Whether the tensor-core kernel takes this attention: bf16 caches on sm_80
 * or later, head dimension 64 or 128, at most 8 query heads a kv head,
 * caches 16-byte aligned (cp.async) and q 8-byte aligned (pairs), unless
 * the attentionKernel switch asks for the CUDA-core kernel.
 */
export function decodeMmaApplies(
  encoder: KernelEncoder,
  shape: { readonly nHeads: number; readonly nKvHeads: number; readonly headDim: number },
  q: Operand,
  kCache: Operand,
  vCache: Operand,
): boolean {
  return (
    encoder.tuning.attentionKernel !== 'lanes' &&
    (encoder.device.computeCapability?.[0] ?? 0) >= 8 &&
    storageOf(kCache) === 'bf16' &&
    storageOf(vCache) === 'bf16' &&
    DECODE_MMA_HEAD_DIMS.includes(shape.headDim) &&
    shape.nHeads / shape.nKvHeads <= DECODE_MMA_MAX_GROUP &&
    kCache.ptr % 16n === 0n &&
    vCache.ptr % 16n === 0n &&
    q.ptr % 8n === 0n
  );
}

/** Pools whose pages hold a power of two of at least one tile's rows: log2 of the page size, else undefined. */
export function decodeMmaPageShift(pageSize: number): number | undefined {
  const shift = Math.log2(pageSize);
  return Number.isInteger(shift) && pageSize >= DECODE_MMA_TILE ? shift : undefined;
}

/** Where a decode attention reads: a contiguous cache of a length given or on the device, or page pools. */
export type DecodeMmaSource =
  | { readonly kind: 'cache'; readonly maxSeq: number; readonly seqLen: number | Operand }
  | {
      readonly kind: 'pages';
      readonly batch: number;
      readonly pageShift: number;
      /** blockTables, seqLens, pageSize, maxPages, kvHeads, numPages. */
      readonly args: Readonly<Record<string, LaunchValue>>;
      /** maxPages · pageSize: every sequence is planned for its table's capacity. */
      readonly capacity: number;
    };

/**
 * Launches the tensor-core attention of q ([nHeads, headDim], or [B, nHeads,
 * headDim] over pages) into `out`: one pass, or splits and their merge. A
 * length on the device is planned for its bound.
 */
export function launchDecodeMma(
  encoder: KernelEncoder,
  shape: { readonly nHeads: number; readonly nKvHeads: number; readonly headDim: number },
  a: { readonly q: Operand; readonly kCache: Operand; readonly vCache: Operand; readonly scale: number },
  source: DecodeMmaSource,
  out: Operand,
): void {
  const paged = source.kind === 'pages';
  const batch = paged ? source.batch : 1;
  const onDevice = paged || typeof source.seqLen !== 'number';
  const bound = paged ? source.capacity : onDevice ? source.maxSeq : (source.seqLen as number);
  const plan = planDecodeMma(
    encoder.device,
    shape.nKvHeads * batch,
    bound,
    encoder.tuning.attentionSplitTokens,
  );
  const act = storageOf(a.q);
  const config: DecodeMmaConfig = {
    headDim: shape.headDim,
    group: shape.nHeads / shape.nKvHeads,
    split: plan.splits > 1,
    deviceLength: !paged && onDevice,
    act,
    ...(paged ? { pageShift: source.pageShift } : {}),
  };
  const args = {
    ...a,
    ...(paged
      ? source.args
      : { maxSeq: source.maxSeq, ...(onDevice ? { seqLenAt: source.seqLen } : { seqLen: source.seqLen }) }),
    splitTokens: plan.splitTokens,
  };
  const launch = {
    key: decodeMmaKey(config),
    module: () => decodeMmaModule(config),
    grid: paged ? ([plan.splits, shape.nKvHeads, batch] as const) : ([plan.splits, shape.nKvHeads] as const),
    block: 32 * DECODE_MMA_WARPS,
    sharedBytes: decodeMmaSharedBytes(config),
  };
  if (!config.split) {
    encoder.launch({ ...launch, entry: 'attention_mma', args: { ...args, out } });
    return;
  }
  launchSplitAndMerge(
    encoder,
    {
      rows: batch * shape.nHeads,
      splits: plan.splits,
      headDim: shape.headDim,
      width: 4,
      act,
      zeroEmpty: paged,
    },
    out,
    (states) => encoder.launch({ ...launch, entry: 'attention_mma_split', args: { ...args, ...states } }),
  );
}
