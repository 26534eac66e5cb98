import type { MatmulLaunch } from '@rayo/core';
import { elementPtr, type KernelEncoder, type Operand } from '../kernel.js';
import type { Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type Pred, type R16, type R32, type R64 } from '../ptx/operands.js';
import { type HalfDType, PRODUCT_PARAMS, productDims } from './common.js';
import { loadParams } from './entryParams.js';
import { encodeSplitSum } from './matmulSplitK.js';
import { pairsAligned, storePair } from './pairStores.js';
import { storageOf } from './storage.js';
import { groupedTile } from './tileOrder.js';

// The half-precision matrix product on tensor cores (sm_80 mma.sync): f16 or
// bf16 operands, f32 accumulators, the output (and c) in the operands' dtype
// or in f32 (the mixed-precision product of matmul's precision 'half').

/** Block tile: BM × BN of y per block, BK of K per pipeline stage. */
export const TC_BM = 128;
export const TC_BN = 128;
export const TC_BK = 32;
/** Shared buffers in flight: stage s + STAGES - 1 is copied while stage s is multiplied. */
export const TC_STAGES = 3;
/**
 * Stages of the small-M variant: its few rows leave the block little to
 * multiply while b streams in, so only more of b in flight keeps reading
 * it at the memory's rate (its stages are dynamic shared memory: 80 KiB,
 * two blocks an SM).
 */
const SMALL_M_STAGES = 5;
/** 8 warps, 2 along M × 4 along N, each a 64 × 32 piece of the tile. */
export const TC_THREADS = 256;
const WARPS_N = 4;
const WARP_M = 64;
const WARP_N = 32;
export const TC_ENTRY = 'matmul_mma';

/** Bytes of one operand's tile in one stage (128 × 32 halves) and of one stage (a and b). */
const OPERAND_BYTES = TC_BM * TC_BK * 2;
const STAGE_BYTES = 2 * OPERAND_BYTES;

/** The variant's pipeline stages. */
function stagesOf(v: TensorCoreVariant): number {
  return v.smallM ? SMALL_M_STAGES : TC_STAGES;
}

/** Dynamic shared bytes of a launch of the variant (its stages; 0 where they are static). */
function tensorCoreSharedBytes(v: TensorCoreVariant): number {
  return v.smallM ? SMALL_M_STAGES * STAGE_BYTES : 0;
}
/** 16-byte chunks of one operand's tile, and per thread. */
const CHUNKS = OPERAND_BYTES / 16;
const CHUNKS_PER_THREAD = CHUNKS / TC_THREADS;

export interface TensorCoreVariant {
  readonly dtype: HalfDType;
  /** a is stored [K, M]. */
  readonly transA: boolean;
  /** b is stored [N, K]. */
  readonly transB: boolean;
  /**
   * 16-byte `cp.async` copies: the contiguous axes of a and b are multiples
   * of 8 elements and both bases 16-byte aligned. Without it, tiles are
   * loaded element by element (odd shapes).
   */
  readonly async: boolean;
  /** Adds beta · c. */
  readonly withC: boolean;
  /** y and c are f32 (absent: the operands' dtype). */
  readonly out?: 'f32';
  /**
   * M is at most a warp's 64 rows (a batch of decoding rows): each warp
   * skips the products of its 16-row pieces past M, so the tile's padding
   * costs no tensor-core time and a launch is bound by reading b.
   */
  readonly smallM?: true;
  /**
   * a is stored f32 and rounded (nearest even) to `dtype` as its tiles are
   * loaded (element by element, then 16 bytes into shared memory): a
   * product under precision 'half' needs no pass rounding a into scratch
   * first, which for a decode step's few rows is a launch per product.
   */
  readonly aF32?: true;
}

export function tensorCoreKey(v: TensorCoreVariant): string {
  const layout = `${v.transA ? 't' : 'n'}${v.transB ? 't' : 'n'}`;
  return `matmul/mma${TC_BM}x${TC_BN}x${TC_BK}s${stagesOf(v)}/${v.dtype}/${layout}/${v.async ? 'async' : 'scalar'}${v.withC ? '/c' : ''}${v.out ? `/y${v.out}` : ''}${v.smallM ? '/smallm' : ''}${v.aF32 ? '/af32' : ''}`;
}

/**
 * An operand's tile in shared memory. K-inner operands (a, b transposed) are
 * stored as 128 rows of 32 k (64 bytes), the others as 32 k-rows of 128
 * elements (256 bytes). The 16-byte chunks of a row are XORed with bits of
 * the row index so that the 8 rows an ldmatrix matrix reads hit 8 distinct
 * bank groups: (row >> 1) & 3 for 64-byte rows (two rows per 128-byte line),
 * row & 7 for 256-byte rows.
 */
interface SharedTile {
  readonly kInner: boolean;
  /** Byte offset of the tile within a stage. */
  readonly offset: number;
}

const ROW_BYTES = (t: SharedTile) => (t.kInner ? TC_BK * 2 : TC_BM * 2);

/** The swizzled byte offset (within a stage) of chunk `chunk` of row `row`. */
function swizzled(k: KernelBuilder, t: SharedTile, row: R32, chunk: R32): R32 {
  const bits = t.kInner
    ? k.and('b32', k.reg('u32'), k.shr('u32', k.reg('u32'), row, 1), 3)
    : k.and('b32', k.reg('u32'), row, 7);
  const c = k.xor('b32', k.reg('u32'), chunk, bits);
  const at = k.madLo('u32', k.reg('u32'), row, ROW_BYTES(t), k.shl('b32', k.reg('u32'), c, 4));
  return t.offset === 0 ? at : k.add('u32', at, at, t.offset);
}

/** How one operand moves from global memory into its shared tile. */
interface GlobalOperand {
  readonly tile: SharedTile;
  /** The batch's base address. */
  readonly base: R64;
  /** Elements per stored row (K when k-inner, else M or N). */
  readonly ld: R32;
  /** M (a) or N (b). */
  readonly bound: R32;
  /** The tile's first row (a) or column (b). */
  readonly first: R32;
  /** The block's first k (its split's). */
  readonly k0: R32;
  /** Stored f32, rounded to `half` on the way to shared memory. */
  readonly f32?: { readonly half: HalfDType };
}

/** One thread's 16-byte chunk of an operand's tile: where it comes from and goes. */
interface Chunk {
  /** Global address at k-step 0 (may point past the matrix: only read where valid). */
  readonly ptr: R64;
  /** Shared offset within a stage. */
  readonly shared: R32;
  /** The chunk's k (k-inner: first k; else the k-row), relative to the step's first k. */
  readonly kAt: R32;
  /** Elements of the chunk inside M/N (k-outer), or whether the row is inside (k-inner). */
  readonly mnCount: R32;
  readonly mnInside: Pred;
}

function chunksOf(k: KernelBuilder, op: GlobalOperand, tid: R32): Chunk[] {
  const chunks: Chunk[] = [];
  for (let i = 0; i < CHUNKS_PER_THREAD; i++) {
    const s = k.add('u32', k.reg('u32'), tid, i * TC_THREADS);
    // Consecutive threads take consecutive chunks of a stored row: coalesced reads.
    const perRow = ROW_BYTES(op.tile) / 16;
    const row = k.shr('u32', k.reg('u32'), s, Math.log2(perRow));
    const chunk = k.and('b32', k.reg('u32'), s, perRow - 1);
    const shared = swizzled(k, op.tile, row, chunk);
    const elem = k.shl('b32', k.reg('u32'), chunk, 3);
    // (mn, k) of the chunk's first element within the tile.
    const [mn, kAt] = op.tile.kInner ? [row, elem] : [elem, row];
    const mnIndex = k.add('u32', k.reg('u32'), op.first, mn);
    const kIndex = k.add('u32', k.reg('u32'), kAt, op.k0);
    const element = op.tile.kInner
      ? k.madLo('u32', k.reg('u32'), mnIndex, op.ld, kIndex)
      : k.madLo('u32', k.reg('u32'), kIndex, op.ld, mnIndex);
    const ptr = k.elementAddress(op.base, element, op.f32 ? 4 : 2);
    const mnInside = k.setp('lt', 'u32', k.reg('pred'), mnIndex, op.bound);
    // Elements from mnIndex up to the edge, at most 8 (0 when outside).
    const left = k.sub('u32', k.reg('u32'), op.bound, mnIndex);
    const mnCount = k.selp('u32', k.reg('u32'), k.min('u32', k.reg('u32'), left, 8), 0, mnInside);
    chunks.push({ ptr, shared, kAt, mnCount, mnInside });
  }
  return chunks;
}

/**
 * Copies one step's tile of an operand into the stage at shared byte
 * address `stage`: chunks past the matrix's edges are zero-filled (by the
 * copy's source size, or by a plain store where nothing at all is inside,
 * so that no address outside the matrix is ever formed into a copy).
 */
function copyStep(
  k: KernelBuilder,
  op: GlobalOperand,
  chunks: readonly Chunk[],
  stage: R32,
  k0: R32,
  kDim: R32,
  async: boolean,
  stepBytes: R64 | number,
  zero: R32,
): () => void {
  const stores: (() => void)[] = [];
  for (const c of chunks) {
    const kIndex = k.add('u32', k.reg('u32'), k0, c.kAt);
    const kLeft = k.sub('u32', k.reg('u32'), kDim, k.min('u32', k.reg('u32'), kIndex, kDim));
    // Elements of the chunk inside the matrix along its contiguous axis, and whether any are.
    const count = op.tile.kInner
      ? k.selp('u32', k.reg('u32'), k.min('u32', k.reg('u32'), kLeft, 8), 0, c.mnInside)
      : k.selp('u32', k.reg('u32'), c.mnCount, 0, k.setp('lt', 'u32', k.reg('pred'), kIndex, kDim));
    const any = k.setp('ne', 'u32', k.reg('pred'), count, 0);
    const dst = k.add('u32', k.reg('u32'), stage, c.shared);
    if (op.f32) {
      const floats: F32[] = [];
      for (let j = 0; j < 8; j++) {
        const f = k.mov('f32', k.reg('f32'), 0);
        const ok = k.setp('lt', 'u32', k.reg('pred'), j, count);
        k.predicated(ok, () => k.ldGlobal('f32', f, addr(c.ptr, 4 * j)));
        floats.push(f);
      }
      const half = op.f32.half;
      // Stored when the caller says: the loads then overlap the stage's products.
      stores.push(() => {
        const words = [0, 1, 2, 3].map((w) =>
          k.cvtPack(half, k.reg('u32'), floats[2 * w]!, floats[2 * w + 1]!),
        );
        k.stShared('b32', dst, words as unknown as Vec4<R32>);
      });
    } else if (async) {
      const bytes = k.shl('b32', k.reg('u32'), count, 1);
      k.predicated(any, () => k.cpAsync('cg', dst, c.ptr, 16, { srcBytes: bytes }));
      k.predicated(any, () => k.stShared('b32', dst, [zero, zero, zero, zero]), { negate: true });
    } else {
      const halves: R16[] = [];
      for (let j = 0; j < 8; j++) {
        const h = k.mov('b16', k.reg('b16'), 0);
        const ok = k.setp('lt', 'u32', k.reg('pred'), j, count);
        k.predicated(ok, () => k.ldGlobal('b16', h, addr(c.ptr, 2 * j)));
        halves.push(h);
      }
      const words = [0, 1, 2, 3].map((w) => k.packHalves(k.reg('u32'), halves[2 * w]!, halves[2 * w + 1]!));
      k.stShared('b32', dst, words as unknown as Vec4<R32>);
    }
    k.add('u64', c.ptr, c.ptr, stepBytes);
  }
  return () => {
    for (const store of stores) store();
  };
}

/**
 * The lane's ldmatrix row address (offset within a stage) for matrix
 * `lane >> 3` of an x4 load covering rows `mn0` … `mn0 + 15` and k `k0` …
 * `k0 + 15` (mn counted from the warp's first, `warpMn`); matrix i takes the mn half `mnHalf(i)` and the k half `kHalf(i)`.
 */
function ldmatrixOffset(
  k: KernelBuilder,
  t: SharedTile,
  lane: R32,
  warpMn: R32,
  mn0: number,
  k0: number,
  mnHalf: (i: R32) => R32,
  kHalf: (i: R32) => R32,
): R32 {
  const i = k.shr('u32', k.reg('u32'), lane, 3);
  const j = k.and('b32', k.reg('u32'), lane, 7);
  const mnBlock = k.madLo('u32', k.reg('u32'), mnHalf(i), 8, k.add('u32', k.reg('u32'), warpMn, mn0));
  const kBlock = k.madLo('u32', k.reg('u32'), kHalf(i), 8, k0);
  // K-inner tiles: the lane's row is an mn, its chunk a k; else the reverse.
  if (t.kInner) {
    const row = k.add('u32', k.reg('u32'), mnBlock, j);
    return swizzled(k, t, row, k.shr('u32', k.reg('u32'), kBlock, 3));
  }
  const row = k.add('u32', k.reg('u32'), kBlock, j);
  return swizzled(k, t, row, k.shr('u32', k.reg('u32'), mnBlock, 3));
}

/**
 * y = alpha · op(a) · op(b) (+ beta · c) for half a, b, c and y. Block
 * (tile, split, batch) computes a 128 × 128 tile of y over K from split ·
 * kPerSplit (a whole number of BK steps), kPerSplit of it, into y +
 * split · splitStride (one split: all of K into y; more: raw partial sums
 * for `splitSumModule`, alpha 1 and no c); each warp a 64 × 32 part
 * as 4 × 4 m16n8k16 products per 16 of K, its fragments loaded by ldmatrix
 * (`.trans` for operands stored k-outer) from swizzled shared tiles that a
 * cp.async pipeline of `TC_STAGES` stages (`SMALL_M_STAGES` for small M) fills.
 */
export function tensorCoreModule(v: TensorCoreVariant): PtxModule {
  const m = new PtxModule({ target: 'sm_80' });
  const stages = stagesOf(v);
  // Up to 48 KiB static; the small-M variant's deeper pipeline needs dynamic shared memory.
  const dynamic = v.smallM ? m.dynamicShared('stages', 128) : undefined;
  m.entry(
    TC_ENTRY,
    {
      a: 'ptr',
      b: 'ptr',
      strideA: 'u32',
      strideB: 'u32',
      kPerSplit: 'u32',
      splitStride: 'u32',
      ...PRODUCT_PARAMS,
    },
    (k, p) => {
      const { mDim, nDim, kDim, tilesM, tilesN } = productDims(k, p);
      const split = k.ctaid('y');
      const kPerSplit = k.ldParam(p.kPerSplit);
      const kFirst = k.mulLo('u32', k.reg('u32'), split, kPerSplit);
      const kEnd = k.min('u32', k.reg('u32'), kDim, k.add('u32', k.reg('u32'), kFirst, kPerSplit));
      const smem = dynamic ?? k.shared('stages', stages * STAGE_BYTES, 128);
      const smemBase = k.sharedAddress(smem);
      const tid = k.tid();
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const warp = k.shr('u32', k.reg('u32'), tid, 5);
      const zero = k.mov('u32', k.reg('u32'), 0);

      const { row0, col0 } = groupedTile(k, tilesM, tilesN, TC_BM, TC_BN);

      const z = k.ctaid('z');
      const batchBase = (ptr: R64, stride: R32, bytes = 2) =>
        k.elementAddress(ptr, k.mulLo('u32', k.reg('u32'), z, stride), bytes);
      const tileA: SharedTile = { kInner: !v.transA, offset: 0 };
      const tileB: SharedTile = { kInner: v.transB, offset: OPERAND_BYTES };
      // An operand of batch z whose mn axis ends at `bound`: rows are k long where k is inner, else mn.
      const operand = (
        tile: SharedTile,
        ptr: Param<'ptr'>,
        stride: Param<'u32'>,
        bound: R32,
        first: R32,
        f32 = false,
      ): GlobalOperand => ({
        tile,
        base: batchBase(k.globalPointer(ptr), k.ldParam(stride), f32 ? 4 : 2),
        ld: tile.kInner ? kDim : bound,
        bound,
        first,
        k0: kFirst,
        ...(f32 ? { f32: { half: v.dtype } } : {}),
      });
      const opA = operand(tileA, p.a, p.strideA, mDim, row0, v.aF32);
      const opB = operand(tileB, p.b, p.strideB, nDim, col0);
      const chunksA = chunksOf(k, opA, tid);
      const chunksB = chunksOf(k, opB, tid);
      // Bytes a chunk's source moves per step of BK along K.
      const stepOf = (op: GlobalOperand): R64 | number => {
        const bytes = op.f32 ? 4 : 2;
        return op.tile.kInner ? TC_BK * bytes : k.mulWide('u32', k.reg('u64'), op.ld, TC_BK * bytes);
      };
      const stepA = stepOf(opA);
      const stepB = stepOf(opB);
      // Returns the shared stores of an f32 a's rounded chunks, for after the stage's products.
      const copy = (stage: R32, k0: R32): (() => void) => {
        // Bounded by the split's end: the pipeline's copies past it read nothing.
        const storeA = copyStep(k, opA, chunksA, stage, k0, kEnd, v.async, stepA, zero);
        copyStep(k, opB, chunksB, stage, k0, kEnd, v.async, stepB, zero);
        k.cpAsyncCommitGroup();
        return storeA;
      };

      // The warp's fragments' ldmatrix addresses (within a stage) for each 16 of M or N and each 16 of K.
      const warpM = k.shr('u32', k.reg('u32'), warp, 2);
      const warpN = k.and('b32', k.reg('u32'), warp, WARPS_N - 1);
      const lowBit = (i: R32) => k.and('b32', k.reg('u32'), i, 1);
      const highBit = (i: R32) => k.shr('u32', k.reg('u32'), i, 1);
      // A x4: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15): a0 … a3 of the mma.
      // B x4: (n 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): b0, b1 of two n8 products.
      const warpRowsA = k.mulLo('u32', k.reg('u32'), warpM, WARP_M);
      const warpColsB = k.mulLo('u32', k.reg('u32'), warpN, WARP_N);
      const offsetsA: R32[][] = [];
      const offsetsB: R32[][] = [];
      for (let kk = 0; kk < TC_BK; kk += 16) {
        offsetsA.push(
          [0, 1, 2, 3].map((t) => ldmatrixOffset(k, tileA, lane, warpRowsA, t * 16, kk, lowBit, highBit)),
        );
        offsetsB.push(
          [0, 1].map((t) => ldmatrixOffset(k, tileB, lane, warpColsB, t * 16, kk, highBit, lowBit)),
        );
      }

      const acc = Array.from({ length: 4 }, () => Array.from({ length: 4 }, () => k.regs('f32', 4)));
      // smallM: rows of y from the warp's first (negative past M); a 16-row piece runs where some are left.
      const rowsLeft = v.smallM
        ? k.sub('s32', k.reg('s32'), mDim, k.add('u32', k.reg('u32'), row0, warpRowsA))
        : undefined;
      for (const row of acc) for (const r of row) for (const x of r) k.mov('f32', x, 0);

      // Prologue: stages 0 … STAGES - 2.
      const kLength = k.sub('u32', k.reg('u32'), kEnd, kFirst);
      const kTiles = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kLength, TC_BK - 1), TC_BK);
      for (let s = 0; s < stages - 1; s++) {
        copy(
          k.add('u32', k.reg('u32'), smemBase, s * STAGE_BYTES),
          k.add('u32', k.reg('u32'), kFirst, s * TC_BK),
        )();
      }
      const readStage = k.mov('u32', k.reg('u32'), smemBase);
      const writeStage = k.add('u32', k.reg('u32'), smemBase, (stages - 1) * STAGE_BYTES);
      const kNext = k.add('u32', k.reg('u32'), kFirst, (stages - 1) * TC_BK);
      const end = k.add('u32', k.reg('u32'), smemBase, stages * STAGE_BYTES);
      const kt = k.reg('u32');
      k.forRange(kt, 0, kTiles, 1, () => {
        // The step's own group is complete; the barrier also frees the stage read last iteration.
        k.cpAsyncWaitGroup(stages - 2);
        k.barSync();
        const storeA = copy(writeStage, kNext);
        k.add('u32', kNext, kNext, TC_BK);
        for (let kk = 0; kk < TC_BK / 16; kk++) {
          const loadA = (i: number) =>
            k.ldmatrix(4, k.regs('u32', 4), k.add('u32', k.reg('u32'), readStage, offsetsA[kk]![i]!), {
              trans: !tileA.kInner,
            });
          const fb = offsetsB[kk]!.map((o) =>
            k.ldmatrix(4, k.regs('u32', 4), k.add('u32', k.reg('u32'), readStage, o), {
              trans: !tileB.kInner,
            }),
          );
          const products = (i: number, fa: Vec4<R32>) => {
            for (let j = 0; j < 4; j++) {
              const b = fb[j >> 1]!;
              const pair = j & 1 ? ([b[2], b[3]] as const) : ([b[0], b[1]] as const);
              k.mmaSync('m16n8k16', v.dtype, acc[i]![j]!, fa, pair, acc[i]![j]!);
            }
          };
          if (rowsLeft) {
            // The same for the whole warp: the skipped products are of rows past M only.
            for (let i = 0; i < 4; i++) {
              const inside = k.setp('gt', 's32', k.reg('pred'), rowsLeft, i * 16);
              k.ifThen(inside, () => products(i, loadA(i)));
            }
          } else {
            const fa = [0, 1, 2, 3].map(loadA);
            for (let i = 0; i < 4; i++) products(i, fa[i]!);
          }
        }
        // The write stage is read stages − 1 steps on, after the barrier at the top of that step.
        storeA();
        for (const s of [readStage, writeStage]) {
          k.add('u32', s, s, STAGE_BYTES);
          const wrap = k.setp('ge', 'u32', k.reg('pred'), s, end);
          k.predicated(wrap, () => k.sub('u32', s, s, stages * STAGE_BYTES));
        }
      });
      // No copy may still be writing shared memory when the block exits.
      k.cpAsyncWaitAll();

      // Epilogue: y = alpha · acc (+ beta · c), halves rounded to nearest even, two elements per store where aligned.
      const { alpha, beta, strideY } = loadParams(k, p, 'alpha', 'beta', 'strideY');
      const out = v.out ?? v.dtype;
      const outBytes = out === 'f32' ? 4 : 2;
      // A split's partial sums go to its own slice of y (splitStride 0 where K is whole).
      const splitBase = k.elementAddress(
        k.globalPointer(p.y),
        k.mulLo('u32', k.reg('u32'), split, k.ldParam(p.splitStride)),
        outBytes,
      );
      const yBase = batchBase(splitBase, strideY, outBytes);
      const cBase = v.withC ? batchBase(k.globalPointer(p.c), strideY, outBytes) : undefined;
      const groupId = k.shr('u32', k.reg('u32'), lane, 2);
      const inGroupCol = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), lane, 3), 1);
      const rowBase = k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, warpRowsA), groupId);
      const colBase = k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), col0, warpColsB), inGroupCol);
      const pairsOk = pairsAligned(k, out, nDim, [yBase, cBase]);
      for (let j = 0; j < 4; j++) {
        const col = k.add('u32', k.reg('u32'), colBase, j * 8);
        const col1 = k.add('u32', k.reg('u32'), col, 1);
        const ok0 = k.setp('lt', 'u32', k.reg('pred'), col, nDim);
        const ok1 = k.setp('lt', 'u32', k.reg('pred'), col1, nDim);
        // A pair store needs both columns inside and an aligned address (pairsAligned).
        const pairCols = k.and('pred', k.reg('pred'), ok1, pairsOk);
        for (let i = 0; i < 4; i++) {
          for (let h = 0; h < 2; h++) {
            const row = k.add('u32', k.reg('u32'), rowBase, i * 16 + h * 8);
            const rowOk = k.setp('lt', 'u32', k.reg('pred'), row, mDim);
            const element = k.madLo('u32', k.reg('u32'), row, nDim, col);
            const pairOk = k.and('pred', k.reg('pred'), rowOk, pairCols);
            const singleOk = [ok0, ok1].map((ok) => {
              const s = k.and('pred', k.reg('pred'), rowOk, ok);
              return k.and('pred', s, s, k.not('pred', k.reg('pred'), pairCols));
            }) as [Pred, Pred];
            const values = [0, 1].map((e) => {
              const x = acc[i]![j]![2 * h + e]!;
              return k.mul('f32', k.reg('f32'), x, alpha);
            });
            storePair(k, out, yBase, cBase, element, values, beta, pairOk, singleOk);
          }
        }
      }
    },
    // Two blocks an SM (at most 128 registers a thread, no spills) hide the latency one block leaves bare.
    { maxThreadsPerBlock: TC_THREADS, minBlocksPerSm: 2 },
  );
  return m;
}

// ---- launching -----------------------------------------------------------------

/**
 * Whether the tensor-core kernel takes a product: a and b in one half dtype,
 * c and y in that dtype or both f32 (f32 accumulators stored as they are),
 * without linear's epilogue; returns the operands' dtype. Every shape
 * qualifies: edge tiles are zero-filled, odd strides take the element-wise loads.
 */
export function tensorCoreDtype(call: MatmulLaunch<Operand>): HalfDType | undefined {
  const t = call.a.dtype;
  if ((t !== 'f16' && t !== 'bf16') || call.b.dtype !== t) return undefined;
  const out = call.y.dtype;
  if (out !== t && out !== 'f32') return undefined;
  if (call.c && call.c.dtype !== out) return undefined;
  return call.activation === undefined ? t : undefined;
}

/** How a launch of the tensor-core product is cut: K in `splits` pieces of `kPerSplit`, and whether M is small. */
export interface TensorCoreShape {
  readonly smallM?: boolean;
  readonly splits: number;
  readonly kPerSplit: number;
}

/** Launches the tensor-core product of `tensorCoreDtype`'s calls (K split, the partial sums then added, as `shape` says). */
export function encodeTensorCore(
  encoder: KernelEncoder,
  call: MatmulLaunch<Operand>,
  dtype: HalfDType,
  shape: TensorCoreShape = { splits: 1, kPerSplit: call.k },
): void {
  const { a, b, c, y, batch, m, n, k } = call;
  const tilesM = Math.ceil(m / TC_BM);
  const tilesN = Math.ceil(n / TC_BN);
  const splitting = shape.splits > 1;
  const maxBatch = encoder.device.maxGridDim[2];
  for (let first = 0; first < batch; first += maxBatch) {
    const count = Math.min(maxBatch, batch - first);
    const ptrs = {
      a: elementPtr(a, first * m * k),
      b: elementPtr(b, first * k * n),
      y: elementPtr(y, first * m * n),
      c: c ? elementPtr(c, first * m * n) : undefined,
    };
    const total = count * m * n;
    // Split, each piece of K writes f32 partial sums; the sum kernel applies alpha and c and stores y's dtype.
    const parts = splitting ? encoder.scratch(shape.splits * total * 4) : ptrs.y;
    // An f32 a is loaded element by element whatever its layout: only b's copies need 16 bytes.
    const aF32 = a.dtype === 'f32';
    const async =
      (aF32 || ((call.transA ? m : k) % 8 === 0 && ptrs.a % 16n === 0n)) &&
      (call.transB ? k : n) % 8 === 0 &&
      ptrs.b % 16n === 0n;
    const v: TensorCoreVariant = {
      dtype,
      transA: call.transA,
      transB: call.transB,
      async,
      withC: ptrs.c !== undefined && !splitting,
      ...(y.dtype === 'f32' || splitting ? { out: 'f32' as const } : {}),
      ...(shape.smallM ? { smallM: true as const } : {}),
      ...(aF32 ? { aF32: true as const } : {}),
    };
    encoder.launch({
      key: tensorCoreKey(v),
      module: () => tensorCoreModule(v),
      entry: TC_ENTRY,
      grid: [tilesM * tilesN, shape.splits, count],
      block: TC_THREADS,
      sharedBytes: tensorCoreSharedBytes(v),
      args: {
        a: ptrs.a,
        b: ptrs.b,
        c: ptrs.c ?? ptrs.y,
        y: parts,
        m,
        n,
        k,
        alpha: splitting ? 1 : call.alpha,
        beta: call.beta,
        strideA: m * k,
        strideB: k * n,
        strideY: m * n,
        tilesM,
        tilesN,
        kPerSplit: shape.kPerSplit,
        splitStride: total,
      },
    });
    if (splitting) {
      encodeSplitSum(encoder, {
        parts,
        splits: shape.splits,
        total,
        n,
        y: ptrs.y,
        c: ptrs.c,
        alpha: call.alpha,
        beta: call.beta,
        out: storageOf(y),
      });
    }
  }
}
