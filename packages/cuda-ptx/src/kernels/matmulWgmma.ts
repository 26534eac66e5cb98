import type { MatmulLaunch } from '@rayo/core';
import type { TensorMapTiled } from '../driver/tensorMap.js';
import { elementPtr, type KernelEncoder, type Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { type HalfDType, PRODUCT_PARAMS, productDims } from './common.js';
import { loadParams } from './entryParams.js';
import { siluF32 } from './math.js';
import { encodeSplitSum } from './matmulSplitK.js';
import { encodeTranspose32 } from './memory.js';
import { pairsAligned, storePair } from './pairStores.js';
import type { FloatStorage } from './storage.js';
import { groupedTile } from './tileOrder.js';

// The matrix product on sm_90a warpgroup MMA, for half operands (f16, bf16)
// and for f32 operands multiplied as tf32 (matmul's precision 'tf32'): a producer
// warpgroup streams tiles of a and b into shared memory with bulk tensor
// copies (TMA), two consumer warpgroups multiply them with wgmma.mma_async,
// and full/empty mbarriers per stage hand the buffers back and forth.

/**
 * Block tile: BM × BN of y, one 128-byte row of K per stage (64 halves or
 * 32 tf32); each consumer warpgroup owns 64 rows × BN. BN is 256, or 128
 * for outputs whose 256-wide tiles would leave SMs idle (`wgmmaTileN`).
 */
export const WG_BM = 128;
export const WG_BN = 256;
/** The narrow tile's N. */
export const WG_BN_NARROW = 128;
export type WgmmaTileN = typeof WG_BN | typeof WG_BN_NARROW;
/** Stages in flight (4 × 48 KiB of the 227 KiB an H100 block may have). */
export const WG_STAGES = 4;
/** A producer warpgroup and two consumer warpgroups. */
export const WG_THREADS = 384;
export const WG_ENTRY = 'matmul_wgmma';

/** Register budgets after `setmaxnreg`: the producer needs few, the consumers hold 128 accumulators each. */
const PRODUCER_REGS = 40;
const CONSUMER_REGS = 232;

/** 128-byte swizzled rows of the inner (contiguous) axis. */
const ROW = 128;
/** One 8-row swizzle atom. */
const ATOM = 8 * ROW;
/** A box of 64 inner × 64 outer elements (8 KiB). */
const PANEL = 64 * ROW;
const A_BYTES = WG_BM * ROW;
/** Bytes of one stage: a's 128 rows and b's `bn` rows (or columns) of one 128-byte K row. */
const stageBytes = (bn: WgmmaTileN) => A_BYTES + bn * ROW;
/** 1024 bytes of slack to align the stages to the swizzle atom, then the stages, then 2 × STAGES mbarriers. */
export const wgSharedBytes = (bn: WgmmaTileN = WG_BN) => 1024 + WG_STAGES * stageBytes(bn) + 16 * WG_STAGES;

/** The operands' dtype: half, or f32 multiplied as tf32. */
export type WgmmaDType = HalfDType | 'tf32';

/** Bytes of an element, K of a stage and K of one wgmma instruction. */
export function shapeOf(dtype: WgmmaDType) {
  const bytes = dtype === 'tf32' ? 4 : 2;
  return { bytes, bk: ROW / bytes, instrK: dtype === 'tf32' ? 8 : 16 };
}

export interface WgmmaVariant {
  /** tf32: a, b, c and y are f32 and a, b K-major (transA false, transB true). */
  readonly dtype: WgmmaDType;
  /** a is stored [K, M] (its tiles M-major). */
  readonly transA: boolean;
  /** b is stored [N, K] (its tiles K-major); else [K, N], N-major. */
  readonly transB: boolean;
  /** Adds beta · c. */
  readonly withC: boolean;
  /** Half operands: y and c are f32 (absent: the operands' dtype). tf32's are always f32. */
  readonly out?: 'f32';
  /** The tile's N (default WG_BN). */
  readonly bn?: WgmmaTileN;
  /**
   * gateUpSwiglu on tensor cores: b is two weights stored [N, K] (transB),
   * gate and up, each tile's first bn / 2 rows of b from the gate and the
   * rest from the up weight at the same rows, and y = silu(gate) · up, a
   * tile bn / 2 columns wide. No c, alpha or splits.
   */
  readonly gated?: boolean;
}

export function wgmmaKey(v: WgmmaVariant): string {
  const layout = `${v.transA ? 't' : 'n'}${v.transB ? 't' : 'n'}`;
  return `matmul/wgmma${WG_BM}x${v.bn ?? WG_BN}x${shapeOf(v.dtype).bk}s${WG_STAGES}/${v.dtype}/${layout}${v.withC ? '/c' : ''}${v.out && v.dtype !== 'tf32' ? `/y${v.out}` : ''}${v.gated ? '/swiglu' : ''}`;
}

/** The dtype of y and c. */
function outputOf(v: WgmmaVariant): HalfDType | 'f32' {
  return v.dtype === 'tf32' ? 'f32' : (v.out ?? v.dtype);
}

/**
 * How an operand's stage tile sits in shared memory and how a consumer's
 * descriptor walks it. K-major (a untransposed, b transposed): one box of
 * 64 k × rows, 128-byte rows, 8-row atoms 1024 bytes apart (SBO), the next
 * 16 of K 32 bytes on. MN-major: boxes of 64 MN × 64 k, one per 64 of MN,
 * 8 KiB apart (LBO), one 128-byte row per k, 8-k atoms 1024 bytes apart
 * (SBO), the next 16 of K 2048 bytes on.
 */
function operandLayout(kMajor: boolean, dtype: WgmmaDType) {
  const { bytes, instrK } = shapeOf(dtype);
  return {
    fields: kMajor
      ? ({ leadingByteOffset: 16, strideByteOffset: ATOM, swizzle: '128B' } as const)
      : ({ leadingByteOffset: PANEL, strideByteOffset: ATOM, swizzle: '128B' } as const),
    /** Descriptor address units (16 bytes) per instruction's K. */
    kStep: kMajor ? (instrK * bytes) / 16 : (instrK * ROW) / 16,
  };
}

/**
 * y = alpha · op(a) · op(b) (+ beta · c) for half a, b, c and y (or f32 ones
 * as tf32), a and b read through tensor maps (3-d: inner, outer, batch).
 * Persistent: each block computes 128 × 256 tiles of y in turn. With
 * `splits` > 1 a tile of split s sums only K steps [s·kSplitSteps,
 * (s + 1)·kSplitSteps) and is stored as batch s·batches + z of y: the
 * partial sums that `encodeSplitSum` adds (`encodeWgmma` plans it).
 */
export function wgmmaModule(v: WgmmaVariant): PtxModule {
  const m = new PtxModule({ target: 'sm_90a' });
  const smem = m.dynamicShared('smem', 1024);
  const aKMajor = !v.transA;
  const bKMajor = v.transB;
  const { bk, instrK } = shapeOf(v.dtype);
  const bn = v.bn ?? WG_BN;
  const STAGE_BYTES = stageBytes(bn);
  if (v.dtype === 'tf32' && !(aKMajor && bKMajor)) {
    throw new Error('wgmmaModule: tf32 operands are K-major (transA false, transB true)');
  }
  if (v.gated && (v.dtype === 'tf32' || !aKMajor || !bKMajor || v.withC)) {
    throw new Error('wgmmaModule: a gated product reads half a and b K-major, without c');
  }
  // y's columns a tile covers: a gated tile's b rows are half gate, half up.
  const tileCols = v.gated ? bn / 2 : bn;
  m.entry(
    WG_ENTRY,
    {
      mapA: 'tensorMap',
      mapB: 'tensorMap',
      ...(v.gated ? { mapUp: 'tensorMap' as const } : {}),
      batches: 'u32',
      splits: 'u32',
      kSplitSteps: 'u32',
      ...PRODUCT_PARAMS,
    },
    (k, p) => {
      const { mDim, nDim, kDim, tilesM, tilesN } = productDims(k, p);
      const tid = k.tid();
      const batches = k.ldParam(p.batches);
      const kSplitSteps = k.ldParam(p.kSplitSteps);
      // Persistent: block x takes tiles x, x + gridDim.x, … of every batch (and split) in turn.
      const perBatch = k.mulLo('u32', k.reg('u32'), tilesM, tilesN);
      const total = k.mulLo(
        'u32',
        k.reg('u32'),
        k.mulLo('u32', k.reg('u32'), perBatch, batches),
        k.ldParam(p.splits),
      );
      const firstTile = k.ctaid();
      const gridTiles = k.nctaid('x');
      const kTiles = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, bk - 1), bk);
      // Tile t: y's batch `slot` (split · batches + z), a's and b's batch z, and its K steps.
      const tileAt = (t: R32) => {
        const slot = k.div('u32', k.reg('u32'), t, perBatch);
        const local = k.sub('u32', k.reg('u32'), t, k.mulLo('u32', k.reg('u32'), slot, perBatch));
        const split = k.div('u32', k.reg('u32'), slot, batches);
        const z = k.sub('u32', k.reg('u32'), slot, k.mulLo('u32', k.reg('u32'), split, batches));
        const kBegin = k.mulLo('u32', k.reg('u32'), split, kSplitSteps);
        const kEnd = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kBegin, kSplitSteps), kTiles);
        return { slot, z, kBegin, kEnd, ...groupedTile(k, tilesM, tilesN, WG_BM, tileCols, local) };
      };
      // Stages start at the first 1024-byte boundary of the dynamic window (the swizzle atom).
      const base = k.and(
        'b32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), k.sharedAddress(smem), 1023),
        ~1023 >>> 0,
      );
      const bars = k.add('u32', k.reg('u32'), base, WG_STAGES * STAGE_BYTES);
      const full = (s: R32) => k.madLo('u32', k.reg('u32'), s, 8, bars);
      const empty = (s: R32) =>
        k.madLo('u32', k.reg('u32'), s, 8, k.add('u32', k.reg('u32'), bars, 8 * WG_STAGES));
      const stageAt = (s: R32) => k.madLo('u32', k.reg('u32'), s, STAGE_BYTES, base);
      // Stage `it & 3` of the block's running k step `it` (counted across its tiles), and its round.
      const stageOf = (it: R32) => k.and('b32', k.reg('u32'), it, WG_STAGES - 1);
      const roundOf = (it: R32) => k.shr('u32', k.reg('u32'), it, Math.log2(WG_STAGES));

      const first = k.setp('eq', 'u32', k.reg('pred'), tid, 0);
      k.ifThen(first, () => {
        for (let s = 0; s < WG_STAGES; s++) {
          // Full: the producer's arrival and the stage's bytes; empty: one arrival per consumer.
          k.mbarrierInit(addr(bars, 8 * s), 1);
          k.mbarrierInit(addr(bars, 8 * (WG_STAGES + s)), 2);
        }
        k.fenceMbarrierInit();
      });
      k.barSync();

      const warpgroup = k.shr('u32', k.reg('u32'), tid, 7);
      const producer = k.setp('eq', 'u32', k.reg('pred'), warpgroup, 0);
      const done = k.label('done');
      const consumer = k.label('consumer');
      k.predicated(producer, () => k.bra(consumer), { negate: true });
      // ---- producer warpgroup: one thread issues every copy.
      k.setmaxnreg('dec', PRODUCER_REGS);
      const mapA = k.tensorMapAddress(p.mapA);
      const mapB = k.tensorMapAddress(p.mapB);
      const mapUp = v.gated
        ? k.tensorMapAddress((p as unknown as Record<string, Param<'tensorMap'>>).mapUp!)
        : undefined;
      k.ifThen(first, () => {
        const it = k.mov('u32', k.reg('u32'), 0);
        const tile = k.reg('u32');
        k.forRange(tile, firstTile, total, gridTiles, () => {
          const { z, kBegin, kEnd, row0, col0 } = tileAt(tile);
          const kt = k.reg('u32');
          k.forRange(kt, kBegin, kEnd, 1, () => {
            const s = stageOf(it);
            // From the second round on, the consumers must have released the stage's previous use.
            const reuse = k.setp('ge', 'u32', k.reg('pred'), it, WG_STAGES);
            k.ifThen(reuse, () => {
              const parity = k.and('b32', k.reg('u32'), k.sub('u32', k.reg('u32'), roundOf(it), 1), 1);
              k.mbarrierWait(empty(s), parity);
            });
            const fullBar = full(s);
            k.mbarrierArrive(fullBar, { expectTx: STAGE_BYTES });
            const stage = stageAt(s);
            const k0 = k.mulLo('u32', k.reg('u32'), kt, bk);
            // K-major: one box of a stage's K × the tile's rows; MN-major: a box of 64 rows × K per 64 rows.
            const copy = (kMajor: boolean, dst: R32, map: R64, first: R32, rows: number) => {
              if (kMajor) k.cpAsyncBulkTensor(dst, map, [k0, first, z], fullBar);
              else {
                for (let j = 0; j < rows / 64; j++) {
                  const at = k.add('u32', k.reg('u32'), first, 64 * j);
                  k.cpAsyncBulkTensor(addr(dst, j * PANEL), map, [at, k0, z], fullBar);
                }
              }
            };
            copy(aKMajor, stage, mapA, row0, WG_BM);
            const bStage = k.add('u32', k.reg('u32'), stage, A_BYTES);
            copy(bKMajor, bStage, mapB, col0, tileCols);
            // The up weight's rows follow the gate's: K-major rows stack as one box of bn rows would.
            if (mapUp)
              copy(bKMajor, k.add('u32', k.reg('u32'), bStage, tileCols * ROW), mapUp, col0, tileCols);
            k.add('u32', it, it, 1);
          });
        });
      });
      k.bra(done);

      // ---- consumer warpgroups: 64 rows × bn columns each.
      k.place(consumer);
      k.setmaxnreg('inc', CONSUMER_REGS);
      const cw = k.sub('u32', k.reg('u32'), warpgroup, 1);
      const inGroup = k.and('b32', k.reg('u32'), tid, 127);
      const leader = k.setp('eq', 'u32', k.reg('pred'), inGroup, 0);
      const layoutA = operandLayout(aKMajor, v.dtype);
      const layoutB = operandLayout(bKMajor, v.dtype);
      // a's rows of this consumer: the second 64 rows are 8 KiB on in either layout.
      const aOffset = k.mulLo('u32', k.reg('u32'), cw, PANEL);
      const acc = k.regs('f32', bn / 2);
      const it = k.mov('u32', k.reg('u32'), 0);
      const releasePrevious = (when: Pred) =>
        k.ifThen(when, () => k.mbarrierArrive(empty(stageOf(k.sub('u32', k.reg('u32'), it, 1)))));
      const tile = k.reg('u32');
      k.forRange(tile, firstTile, total, gridTiles, () => {
        const { slot, kBegin, kEnd, row0, col0 } = tileAt(tile);
        for (const r of acc) k.mov('f32', r, 0);
        const kt = k.reg('u32');
        k.forRange(kt, kBegin, kEnd, 1, () => {
          const s = stageOf(it);
          const parity = k.and('b32', k.reg('u32'), roundOf(it), 1);
          k.mbarrierWait(full(s), parity);
          const stage = stageAt(s);
          const descA = k.wgmmaDescriptor(
            k.reg('u64'),
            k.add('u32', k.reg('u32'), stage, aOffset),
            layoutA.fields,
          );
          const descB = k.wgmmaDescriptor(
            k.reg('u64'),
            k.add('u32', k.reg('u32'), stage, A_BYTES),
            layoutB.fields,
          );
          k.wgmmaFence();
          for (let j = 0; j < bk / instrK; j++) {
            k.wgmmaMmaAsync(bn, v.dtype, acc, descA, descB, {
              transposeA: !aKMajor,
              transposeB: !bKMajor,
            });
            if (j < bk / instrK - 1) {
              k.add('u64', descA, descA, layoutA.kStep);
              k.add('u64', descB, descB, layoutB.kStep);
            }
          }
          k.wgmmaCommitGroup();
          // The previous step's products are done: its stage goes back to the producer.
          k.wgmmaWaitGroup(1);
          releasePrevious(
            k.and('pred', k.reg('pred'), leader, k.setp('gt', 'u32', k.reg('pred'), kt, kBegin)),
          );
          k.add('u32', it, it, 1);
        });
        // The tile's last stage goes back too, before the epilogue, so the producer runs ahead into the next tile.
        k.wgmmaWaitGroup(0);
        releasePrevious(leader);
        epilogue(k, v, p, acc, { mDim, nDim, slot, row0, col0, cw, inGroup });
      });
      k.place(done);
    },
    { maxThreadsPerBlock: WG_THREADS, minBlocksPerSm: 1 },
  );
  return m;
}

interface EpilogueAt {
  readonly mDim: R32;
  readonly nDim: R32;
  /** y's (and c's) batch: split · batches + the batch. */
  readonly slot: R32;
  readonly row0: R32;
  readonly col0: R32;
  /** The consumer warpgroup (0, 1) and the thread within it. */
  readonly cw: R32;
  readonly inGroup: R32;
}

/**
 * y = alpha · acc (+ beta · c), in the half dtype or f32 (tf32, or `out`); register
 * i of thread t holds row 16·warp + lane/4 + 8·((i >> 1) & 1), column
 * 8·(i >> 2) + 2·(lane & 3) + (i & 1) of the consumer's 64 × 256
 * (wgmmaLayout.ts), so registers 2j, 2j + 1 are two adjacent columns,
 * stored as a pair where both are inside and N is even (pairStores.ts).
 * Gated, column j < bn / 2 is the gate's and j + bn / 2 the up's of the
 * same y column, in the same thread: y = silu(gate) · up, as swiglu
 * computes it.
 */
function epilogue(
  k: KernelBuilder,
  v: WgmmaVariant,
  p: {
    readonly alpha: Param<'f32'>;
    readonly beta: Param<'f32'>;
    readonly strideY: Param<'u32'>;
    readonly c: Param<'ptr'>;
    readonly y: Param<'ptr'>;
  },
  acc: readonly F32[],
  at: EpilogueAt,
): void {
  const { alpha, beta, strideY } = loadParams(k, p, 'alpha', 'beta', 'strideY');
  const out = outputOf(v);
  const bytes = out === 'f32' ? 4 : 2;
  const batchBase = (ptr: R64) =>
    k.elementAddress(ptr, k.mulLo('u32', k.reg('u32'), at.slot, strideY), bytes);
  const yBase = batchBase(k.globalPointer(p.y));
  const cBase = v.withC ? batchBase(k.globalPointer(p.c)) : undefined;
  const lane = k.and('b32', k.reg('u32'), at.inGroup, 31);
  const warp = k.shr('u32', k.reg('u32'), at.inGroup, 5);
  const rowBase = k.add(
    'u32',
    k.reg('u32'),
    k.madLo('u32', k.reg('u32'), at.cw, 64, at.row0),
    k.madLo('u32', k.reg('u32'), warp, 16, k.shr('u32', k.reg('u32'), lane, 2)),
  );
  const colBase = k.madLo('u32', k.reg('u32'), k.and('b32', k.reg('u32'), lane, 3), 2, at.col0);
  const pairsOk = pairsAligned(k, out, at.nDim, [yBase, cBase]);
  const bn = v.bn ?? WG_BN;
  const groups = (v.gated ? bn / 2 : bn) / 8;
  for (let h = 0; h < 2; h++) {
    const row = k.add('u32', k.reg('u32'), rowBase, 8 * h);
    const rowOk = k.setp('lt', 'u32', k.reg('pred'), row, at.mDim);
    const rowStart = k.mulLo('u32', k.reg('u32'), row, at.nDim);
    for (let q = 0; q < groups; q++) {
      const col = k.add('u32', k.reg('u32'), colBase, 8 * q);
      const ok0 = k.and('pred', k.reg('pred'), rowOk, k.setp('lt', 'u32', k.reg('pred'), col, at.nDim));
      const ok1 = k.and(
        'pred',
        k.reg('pred'),
        rowOk,
        k.setp('lt', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), col, 1), at.nDim),
      );
      const pairOk = k.and('pred', k.reg('pred'), ok1, pairsOk);
      const singleOk = [ok0, ok1].map((ok) =>
        k.and('pred', k.reg('pred'), ok, k.not('pred', k.reg('pred'), pairOk)),
      ) as [Pred, Pred];
      const element = k.add('u32', k.reg('u32'), rowStart, col);
      const values = [0, 1].map((e) => {
        const value = acc[4 * q + 2 * h + e]!;
        if (!v.gated) return k.mul('f32', k.reg('f32'), value, alpha);
        const up = acc[4 * (q + groups) + 2 * h + e]!;
        return k.mul('f32', k.reg('f32'), siluF32(k, value), up, { rnd: 'rn' });
      });
      storePair(k, out, yBase, cBase, element, values, beta, pairOk, singleOk);
    }
  }
}

// ---- launching -----------------------------------------------------------------

/**
 * Whether the wgmma kernel can take a product on this device: sm_90 (the
 * arch-specific sm_90a instructions), and tensor maps over a and b: 16-byte
 * aligned bases and contiguous axes of whole 16-byte rows. tf32 products
 * read a and b K-major, transposing them into scratch first where they are
 * not; other products go to the mma.sync kernel (half) or the exact f32
 * kernels (tf32).
 */
export function wgmmaApplies(
  encoder: KernelEncoder,
  call: MatmulLaunch<Operand>,
  dtype: WgmmaDType,
): boolean {
  const [major, minor] = encoder.device.computeCapability;
  // K = 0 leaves nothing to map (and y = beta · c to the other kernels).
  if (major !== 9 || minor !== 0 || call.k === 0) return false;
  if (dtype === 'tf32') {
    return (
      call.k % 4 === 0 &&
      (call.transA || call.a.ptr % 16n === 0n) &&
      (!call.transB || call.b.ptr % 16n === 0n)
    );
  }
  const contiguousA = call.transA ? call.m : call.k;
  const contiguousB = call.transB ? call.k : call.n;
  return contiguousA % 8 === 0 && contiguousB % 8 === 0 && call.a.ptr % 16n === 0n && call.b.ptr % 16n === 0n;
}

/** A 3-d tensor map (inner, outer, batch) over an operand stored [outer, inner] per batch. */
export function operandMap(
  dtype: WgmmaDType,
  address: bigint,
  inner: number,
  outer: number,
  batch: number,
  box: [number, number],
): TensorMapTiled {
  const bytes = shapeOf(dtype).bytes;
  return {
    dtype: dtype === 'tf32' ? 'f32' : dtype,
    address,
    dims: [inner, outer, batch],
    strides: [inner * bytes, inner * outer * bytes],
    box: [box[0], box[1], 1],
    swizzle: '128B',
  };
}

/**
 * The tile's N for an M × N output (times `batch`) on `sms` SMs: 128 where
 * N fits in it, or where 256-wide tiles would leave SMs idle (a 2048 × 768
 * output is 48 such tiles on 132 SMs, 96 narrow ones); else 256, whose
 * tile reads less per product.
 */
export function wgmmaTileN(m: number, n: number, batch: number, sms: number): WgmmaTileN {
  const wide = Math.ceil(m / WG_BM) * Math.ceil(n / WG_BN) * batch;
  return n <= WG_BN_NARROW || wide < sms ? WG_BN_NARROW : WG_BN;
}

/** The fewest K steps (stages) a split takes: fewer leave the pipeline mostly filling. */
export const WG_MIN_SPLIT_STEPS = 8;

/**
 * Splits of K for a product of `tiles` output tiles (batches included) and
 * `kSteps` stages of K: with fewer tiles than SMs, as many splits as keep
 * every block on the device at once, each at least WG_MIN_SPLIT_STEPS long
 * (768 × 768 × 2048, a block's weight gradient at 2,048 tokens, is 18
 * tiles: 7 splits). Returns the splits and the steps of each.
 */
export function wgmmaSplits(
  tiles: number,
  kSteps: number,
  sms: number,
  outputs: number,
): { splits: number; steps: number } {
  const wanted = Math.min(
    Math.floor(sms / tiles),
    Math.floor(kSteps / WG_MIN_SPLIT_STEPS),
    // The partial sums' byte offsets stay within 32 bits.
    Math.floor(MAX_SPLIT_ELEMENTS / outputs),
  );
  if (wanted < 2) return { splits: 1, steps: kSteps };
  const steps = Math.ceil(kSteps / wanted);
  return { splits: Math.ceil(kSteps / steps), steps };
}

/** f32 partial sums a split product may hold (byte offsets stay within 32 bits). */
const MAX_SPLIT_ELEMENTS = 2 ** 30 - 1;

/**
 * Launches the wgmma product of a call that `wgmmaApplies` accepted. tf32
 * products first transpose a stored [K, M] and b stored [K, N] into scratch,
 * so that both are read K-major. A product with fewer tiles than SMs splits
 * K (`wgmmaSplits`): f32 partial sums into scratch, added in split order by
 * `encodeSplitSum`, which applies alpha and beta · c (the same bits every run).
 */
export function encodeWgmma(encoder: KernelEncoder, call: MatmulLaunch<Operand>, dtype: WgmmaDType): void {
  const { a, b, c, y, batch, m, n, k } = call;
  const { bytes, bk } = shapeOf(dtype);
  const maxBatch = encoder.device.maxGridDim[2];
  const sms = encoder.device.multiprocessors;
  const bn = wgmmaTileN(m, n, Math.min(batch, maxBatch), sms);
  const tilesM = Math.ceil(m / WG_BM);
  const tilesN = Math.ceil(n / bn);
  for (let first = 0; first < batch; first += maxBatch) {
    const count = Math.min(maxBatch, batch - first);
    const { splits, steps } = wgmmaSplits(tilesM * tilesN * count, Math.ceil(k / bk), sms, count * m * n);
    let aPtr = elementPtr(a, first * m * k);
    let bPtr = elementPtr(b, first * k * n);
    let { transA, transB } = call;
    if (dtype === 'tf32' && transA) {
      const scratch = encoder.scratch(count * m * k * 4);
      encodeTranspose32(encoder, aPtr, scratch, [count, k, m]);
      [aPtr, transA] = [scratch, false];
    }
    if (dtype === 'tf32' && !transB) {
      const scratch = encoder.scratch(count * k * n * 4);
      encodeTranspose32(encoder, bPtr, scratch, [count, k, n]);
      [bPtr, transB] = [scratch, true];
    }
    const yPtr = elementPtr(y, first * m * n);
    const cPtr = c ? elementPtr(c, first * m * n) : undefined;
    // Split, the tiles store raw f32 sums; alpha, c and y's dtype come with the sum.
    const parts = splits > 1 ? encoder.scratch(splits * count * m * n * 4) : undefined;
    const v: WgmmaVariant = {
      dtype,
      transA,
      transB,
      withC: cPtr !== undefined && !parts,
      ...(bn === WG_BN ? {} : { bn }),
      ...(dtype !== 'tf32' && (y.dtype === 'f32' || parts) ? { out: 'f32' as const } : {}),
    };
    // M- and N-major boxes are 128 bytes of MN by one stage of K; K-major ones one stage of K by the tile.
    const mnBox = ROW / bytes;
    const mapA = transA
      ? operandMap(dtype, aPtr, m, k, count, [mnBox, bk])
      : operandMap(dtype, aPtr, k, m, count, [bk, WG_BM]);
    const mapB = transB
      ? operandMap(dtype, bPtr, k, n, count, [bk, bn])
      : operandMap(dtype, bPtr, n, k, count, [mnBox, bk]);
    encoder.launch({
      key: wgmmaKey(v),
      module: () => wgmmaModule(v),
      entry: WG_ENTRY,
      // One block an SM (its shared memory allows no second), each looping over tiles.
      grid: Math.min(tilesM * tilesN * count * splits, sms),
      block: WG_THREADS,
      sharedBytes: wgSharedBytes(bn),
      args: {
        batches: count,
        splits,
        kSplitSteps: steps,
        mapA: encoder.tensorMap(mapA),
        mapB: encoder.tensorMap(mapB),
        // Without c its pointer is y's, never read.
        c: (v.withC ? cPtr : undefined) ?? parts ?? yPtr,
        y: parts ?? yPtr,
        m,
        n,
        k,
        alpha: parts ? 1 : call.alpha,
        beta: parts ? 0 : call.beta,
        strideY: m * n,
        tilesM,
        tilesN,
      },
    });
    if (parts) {
      encodeSplitSum(encoder, {
        parts,
        splits,
        total: count * m * n,
        n,
        y: yPtr,
        c: cPtr,
        alpha: call.alpha,
        beta: call.beta,
        out: y.dtype as FloatStorage,
      });
    }
  }
}
