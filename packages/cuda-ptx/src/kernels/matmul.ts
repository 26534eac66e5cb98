import {
  batchedMatmul,
  batchedMatmulLaunch,
  FLOAT,
  type MatmulDims,
  type MatmulLaunch,
  type MatmulTile,
  matmul,
  matmulLaunch,
} from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import {
  type AnyCudaKernel,
  elementPtr,
  type KernelEncoder,
  launchedKernel,
  type Operand,
} from '../kernel.js';
import { checkElementCount, MAX_ELEMENTS } from './common.js';
import {
  AXPY_ENTRY,
  AXPY_SHARED_BYTES,
  type AxpyVariant,
  axpyKey,
  axpyModule,
  DOT_ENTRY,
  dotBlocksPerSm,
  dotColumns,
  dotKey,
  dotModule,
  type Epilogue,
  MAX_ROWS,
  ROW_THREADS,
  type RowTypes,
  type RowVariant,
  type StreamSlices,
  streamSlicesFor,
  streamWidth,
  unrollFor,
} from './gemv.js';
import { encodeSmallM, halfOperands } from './matmulHalf.js';
import { encodeSplitSum } from './matmulSplitK.js';
import { encodeTensorCore, tensorCoreDtype } from './matmulTensorCore.js';
import {
  TILE_ENTRY,
  TILE_LARGE,
  TILE_MID,
  TILE_THREADS,
  type TileVariant,
  tileKey,
  tileModule,
} from './matmulTile.js';
import { encodeWgmma, wgmmaApplies } from './matmulWgmma.js';
import { storageOf } from './storage.js';

// Matrix products: each problem goes to the streaming kernels (GEMV and small
// M, in gemv.ts) or to the tiled kernel, which splits K across blocks where
// the output alone gives too few of them.

// ---- choosing a kernel -----------------------------------------------------------

/** One matrix product of a batch, in the spec's terms. */
export interface MatmulProblem extends MatmulDims {
  readonly withC: boolean;
  /** The dot GEMV's warps a column (the `gemvSlices` switch); absent, streamSlicesFor's choice. */
  readonly slices?: StreamSlices;
  /** linear's bias and activation. */
  readonly epilogue?: Epilogue;
  /** Storage of a, b and the outputs (c and bias with them); all f32 when absent. */
  readonly types?: RowTypes;
  /** Whether each operand's address is 16-byte aligned (`.v4` access needs it; bias and z count only when present). */
  readonly aligned: {
    readonly a: boolean;
    readonly b: boolean;
    readonly y: boolean;
    readonly c: boolean;
    readonly bias?: boolean;
    readonly z?: boolean;
  };
}

/** A streaming launch: y = op(a)·op(b), or yᵀ = op(b)ᵀ·op(a)ᵀ when `swapped` (rows are then N, columns M). */
interface RowsPlan {
  readonly swapped: boolean;
  /** Output columns of the streaming problem. */
  readonly columns: number;
  readonly blocks: number;
}

export type MatmulPlan =
  | {
      readonly kind: 'tile';
      readonly variant: TileVariant;
      readonly tilesM: number;
      readonly tilesN: number;
      /** Blocks along K, each summing kPerSplit of it into scratch for `splitSumModule` (1: no split). */
      readonly splits: number;
      readonly kPerSplit: number;
    }
  | (RowsPlan & { readonly kind: 'dot'; readonly variant: RowVariant })
  | (RowsPlan & { readonly kind: 'axpy'; readonly variant: AxpyVariant });

/**
 * The kernel for a problem. The streaming kernels take the GEMV and small
 * M (or small N, as the transposed product), reading b once; the rest
 * goes to tiles: the large one, with K split where its tiles alone would
 * leave SMs idle, or the mid-size one where no split fills the device.
 */
export function planMatmul(
  p: MatmulProblem,
  device: Pick<DeviceProperties, 'multiprocessors'> & Partial<Pick<DeviceProperties, 'computeCapability'>>,
): MatmulPlan {
  const small = Math.min(p.m, p.n);
  if (small <= MAX_ROWS) {
    // b stored [K, N] streams its .v4 rows with L2 prefetches of 256 bytes where the device has them
    // (sm_80+): 4% faster for 1×4096×4096 on an H100. The dot layout showed no gain and keeps plain loads.
    const prefetch = (vec: boolean) =>
      vec && (device.computeCapability?.[0] ?? 0) >= 8 ? { l2Prefetch: true } : {};
    // Transposing the product turns op(a) into the rows side: op(b)ᵀ, stored [N, K] when b was not transposed.
    const swapped = p.n < p.m;
    const rows = swapped ? p.n : p.m;
    const columns = swapped ? p.m : p.n;
    const transA = (swapped ? !p.transB : p.transA) && rows > 1;
    const bKInner = swapped ? !p.transA : p.transB;
    const alignedA = swapped ? p.aligned.b : p.aligned.a;
    const alignedB = swapped ? p.aligned.a : p.aligned.b;
    const t = p.types;
    // Swapped, the streaming kernel's a is the spec's b and its b the spec's a.
    const rowTypes =
      t && (t.a !== 'f32' || t.b !== 'f32' || t.out !== 'f32')
        ? { types: swapped ? { a: t.b, b: t.a, out: t.out } : t }
        : {};
    const width = streamWidth(rowTypes.types?.b ?? 'f32', rows);
    if (bKInner) {
      // a is read as vectors along K too, unless it is transposed (then element by element).
      const vec = p.k % width === 0 && alignedB && (transA || alignedA);
      const shape = { rows, transA, vec, withC: p.withC, epilogue: p.epilogue, ...rowTypes };
      // Split K by default for one row against half weights (the decode step's products), where it was measured.
      const halfB = (rowTypes.types?.b ?? 'f32') !== 'f32';
      const slices =
        p.slices !== undefined || (rows === 1 && halfB)
          ? streamSlicesFor(
              {
                k: p.k,
                width: vec ? width : 1,
                unroll: unrollFor(rows),
                columns: columns * p.batch,
                residentBlocks: dotBlocksPerSm(rows) * device.multiprocessors,
              },
              p.slices,
            )
          : 1;
      const variant: RowVariant = slices > 1 ? { ...shape, slices } : shape;
      return { kind: 'dot', variant, swapped, columns, blocks: Math.ceil(columns / dotColumns(variant)) };
    }
    const vec = columns % width === 0 && alignedB;
    const cols = axpyColumns(rows, columns, vec ? width : 1, p.batch, device.multiprocessors);
    const quadK = !transA && p.k % 4 === 0 && alignedA;
    const variant = {
      rows,
      transA,
      vec,
      withC: p.withC,
      epilogue: p.epilogue,
      columns: cols,
      quadK,
      ...prefetch(vec),
      ...rowTypes,
    };
    return { kind: 'axpy', variant, swapped, columns, blocks: Math.ceil(columns / cols) };
  }
  const sms = device.multiprocessors;
  const tilesOf = (t: MatmulTile) => Math.ceil(p.m / t.bm) * Math.ceil(p.n / t.bn) * p.batch;
  const large = tilesOf(TILE_LARGE);
  if (large >= LARGE_FILLS * sms) return tilePlan(p, TILE_LARGE);
  // Fewer large tiles than that: K split to about LARGE_BLOCKS_PER_SM blocks
  // per SM, where that fills the device; else the mid tile's four times the blocks.
  // (Not where a large tile would be mostly padding, e.g. 64 rows: the mid tile wastes less.)
  const filled = (p.m * p.n * p.batch) / (large * TILE_LARGE.bm * TILE_LARGE.bn);
  const splits = largeSplits(large, p, sms);
  if (large * splits >= sms && filled >= 0.75) return tilePlan(p, TILE_LARGE, splits);
  return tilePlan(p, TILE_MID, splitK(tilesOf(TILE_MID), p, TILE_MID, sms).splits);
}

/**
 * The large tile's grid at its best holds about three blocks per SM: on an
 * H100 (132 SMs), 768×768×2048 ran in 68 µs split six ways against 130 µs
 * on the mid tile, 2048×768×2048 in 158 µs split four ways against 206 µs,
 * and 2048×768×50304 in 3.24 ms split twelve ways against 5.02 ms, while
 * 2048×2048×768 (256 tiles) runs best unsplit (`gemm-sweep`).
 */
const LARGE_BLOCKS_PER_SM = 2.9;
/** Large tiles per SM from which no split pays. */
const LARGE_FILLS = 1.5;
/** The least K a split of the large tile takes (16 of its steps). */
export const LARGE_MIN_SPLIT_K = 128;

/** Splits of K for `tiles` large tiles: about LARGE_BLOCKS_PER_SM blocks per SM, each split LARGE_MIN_SPLIT_K or more. */
function largeSplits(tiles: number, p: MatmulProblem, sms: number): number {
  const wanted = Math.min(
    Math.round((LARGE_BLOCKS_PER_SM * sms) / tiles),
    Math.floor(p.k / LARGE_MIN_SPLIT_K),
  );
  if (wanted < 2) return 1;
  const kPerSplit = Math.ceil(p.k / wanted / TILE_LARGE.bk) * TILE_LARGE.bk;
  const splits = Math.ceil(p.k / kPerSplit);
  // The partial sums are indexed with 32 bits.
  return splits * p.batch * p.m * p.n > MAX_ELEMENTS ? 1 : splits;
}

/** The tiled kernel's plan for `p` with `tile` and K cut into (about) `splits` pieces of whole tile steps. */
export function tilePlan(
  p: MatmulProblem,
  tile: MatmulTile,
  splits = 1,
): Extract<MatmulPlan, { kind: 'tile' }> {
  const contiguousA = p.transA ? p.m : p.k;
  const contiguousB = p.transB ? p.k : p.n;
  const tilesM = Math.ceil(p.m / tile.bm);
  const tilesN = Math.ceil(p.n / tile.bn);
  const kPerSplit = splits > 1 ? Math.ceil(p.k / splits / tile.bk) * tile.bk : p.k;
  splits = splits > 1 ? Math.ceil(p.k / kPerSplit) : 1;
  // Splits write raw sums; alpha, c and the epilogue come in the reduction.
  const withC = p.withC && splits === 1;
  const epilogue = splits === 1 ? p.epilogue : undefined;
  const vec =
    contiguousA % 4 === 0 &&
    contiguousB % 4 === 0 &&
    p.n % 4 === 0 &&
    p.aligned.a &&
    p.aligned.b &&
    p.aligned.y &&
    (!withC || p.aligned.c) &&
    (!epilogue?.bias || p.aligned.bias !== false) &&
    (!epilogue?.z || p.aligned.z !== false);
  // Split, the tiles write f32 partial sums; the sum kernel stores the outputs' dtype.
  const t = p.types;
  const tileTypes =
    t && (t.a !== 'f32' || t.b !== 'f32' || (t.out !== 'f32' && splits === 1))
      ? { types: { ...t, out: splits === 1 ? t.out : 'f32' } }
      : {};
  return {
    kind: 'tile',
    variant: {
      tile,
      transA: p.transA,
      transB: p.transB,
      vec,
      withC,
      ...(epilogue ? { epilogue } : {}),
      ...tileTypes,
    },
    tilesM,
    tilesN,
    splits,
    kPerSplit,
  };
}

/** The least K a split of the mid tile takes: below it the extra pass over the partial sums costs more than it gains. */
export const MIN_SPLIT_K = 256;

/**
 * Splits of K that bring a grid of `blocks` mid tiles to about two blocks
 * per SM, each split a whole number of tile steps and at least MIN_SPLIT_K long.
 */
function splitK(
  blocks: number,
  p: MatmulProblem,
  tile: MatmulTile,
  sms: number,
): { splits: number; kPerSplit: number } {
  const none = { splits: 1, kPerSplit: p.k };
  if (blocks >= sms || p.k < 2 * MIN_SPLIT_K) return none;
  const wanted = Math.min(Math.ceil((2 * sms) / blocks), Math.floor(p.k / MIN_SPLIT_K));
  const kPerSplit = Math.ceil(p.k / wanted / tile.bk) * tile.bk;
  const splits = Math.ceil(p.k / kPerSplit);
  // The partial sums are indexed with 32 bits.
  if (splits * p.batch * p.m * p.n > MAX_ELEMENTS) return none;
  return { splits, kPerSplit };
}

/**
 * Columns per axpy block: the widest that still gives every SM a block (a
 * warp's row of b stays at least 32 bytes), within the shared memory budget.
 */
export function axpyColumns(rows: number, columns: number, w: number, batch: number, sms: number): number {
  const fits = (c: number) => c * rows * 8 * 4 <= AXPY_SHARED_BYTES;
  let best = 8;
  for (let c = 32 * w; c >= 8; c /= 2) {
    if (!fits(c)) continue;
    best = c;
    if (Math.ceil(columns / c) * batch >= sms) break;
  }
  return best;
}

// ---- launching -----------------------------------------------------------------

export interface MatmulCall extends MatmulLaunch<Operand> {
  readonly kernel: string;
  /** Another plan than `planMatmul`'s (tools that time the candidates); the default is planMatmul. */
  readonly choosePlan?: (problem: MatmulProblem, device: KernelEncoder['device']) => MatmulPlan;
}

/** `.v4` accesses need 16-byte alignment. */
const aligned16 = (ptr: bigint) => ptr % 16n === 0n;

/** Launches the plan of one matrix product (and, for linear, its epilogue). */
export function encodeMatmul(encoder: KernelEncoder, call: MatmulCall): void {
  const { a, b, c, y, batch, m, n, k, bias, z } = call;
  if (y.size === 0) return;
  checkElementCount(call.kernel, 'a', a.size);
  checkElementCount(call.kernel, 'b', b.size);
  checkElementCount(call.kernel, 'y', y.size);
  if (c) checkElementCount(call.kernel, 'c', c.size);
  // Decoding batches against half weights: tensor cores, K split to fill the device.
  if (encodeSmallM(encoder, call)) return;
  // Other all-half products run on tensor cores, except the GEMV and
  // small-M shapes: the streaming kernels read b once, where a 128×128 tile
  // would mostly compute zero rows.
  // precision 'tf32' on sm_90: f32 operands on the warpgroup-MMA kernel as
  // tf32; elsewhere (and for shapes it cannot take) the exact f32 kernels,
  // more precise than asked.
  if (
    call.precision === 'tf32' &&
    Math.min(m, n) > MAX_ROWS &&
    call.activation === undefined &&
    [a, b, c, y].every((o) => o === undefined || o.dtype === 'f32') &&
    wgmmaApplies(encoder, call, 'tf32')
  ) {
    encodeWgmma(encoder, call, 'tf32');
    return;
  }
  // precision 'half' (sm_80+): f32 operands rounded into half scratch, then
  // the tensor-core product below with f32 accumulators stored as f32 y.
  const product =
    call.precision === 'half' &&
    Math.min(m, n) > MAX_ROWS &&
    call.activation === undefined &&
    encoder.device.computeCapability[0] >= 8
      ? halfOperands(encoder, call)
      : call;
  // On sm_90 the warpgroup-MMA kernel takes them where tensor maps can
  // describe a and b; mma.sync takes the rest and sm_80–89.
  const half = Math.min(m, n) > MAX_ROWS ? tensorCoreDtype(product) : undefined;
  if (half) {
    if (wgmmaApplies(encoder, product, half)) encodeWgmma(encoder, product, half);
    else encodeTensorCore(encoder, product, half);
    return;
  }
  const epilogue: Epilogue | undefined =
    call.activation === undefined
      ? undefined
      : { bias: bias !== undefined, activation: call.activation, z: z !== undefined };
  // Unused pointer parameters point at y, never read or written.
  const biasPtr = bias?.ptr ?? y.ptr;
  const maxBatch = encoder.device.maxGridDim[2];
  // Batches beyond the grid's z limit go in several launches.
  for (let first = 0; first < batch; first += maxBatch) {
    const count = Math.min(maxBatch, batch - first);
    const at = (op: Operand, per: number) => elementPtr(op, first * per);
    const ptrs = {
      a: at(a, m * k),
      b: at(b, k * n),
      y: at(y, m * n),
      c: c ? at(c, m * n) : undefined,
      z: z ? at(z, m * n) : undefined,
    };
    const plan = (call.choosePlan ?? planMatmul)(
      {
        batch: count,
        m,
        n,
        k,
        transA: call.transA,
        transB: call.transB,
        withC: c !== undefined,
        ...(epilogue ? { epilogue } : {}),
        types: { a: storageOf(a), b: storageOf(b), out: storageOf(y) },
        ...(encoder.tuning.gemvSlices === undefined ? {} : { slices: encoder.tuning.gemvSlices }),
        aligned: {
          a: aligned16(ptrs.a),
          b: aligned16(ptrs.b),
          y: aligned16(ptrs.y),
          c: ptrs.c === undefined || aligned16(ptrs.c),
          bias: aligned16(biasPtr),
          z: ptrs.z === undefined || aligned16(ptrs.z),
        },
      },
      encoder.device,
    );
    const common = {
      c: ptrs.c ?? ptrs.y,
      y: ptrs.y,
      k,
      alpha: call.alpha,
      beta: call.beta,
      strideY: m * n,
      bias: biasPtr,
      z: ptrs.z ?? ptrs.y,
    };
    if (plan.kind === 'tile') {
      const v = plan.variant;
      const total = count * m * n;
      const splitting = plan.splits > 1;
      const parts = splitting ? encoder.scratch(plan.splits * total * 4) : ptrs.y;
      encoder.launch({
        key: tileKey(v),
        module: () => tileModule(v),
        entry: TILE_ENTRY,
        grid: [plan.tilesM * plan.tilesN, plan.splits, count],
        block: TILE_THREADS,
        args: {
          ...common,
          a: ptrs.a,
          b: ptrs.b,
          y: parts,
          m,
          n,
          alpha: splitting ? 1 : call.alpha,
          strideA: m * k,
          strideB: k * n,
          tilesM: plan.tilesM,
          tilesN: plan.tilesN,
          kPerSplit: plan.kPerSplit,
          splitStride: total,
        },
      });
      if (splitting) {
        encodeSplitSum(encoder, {
          parts,
          splits: plan.splits,
          total,
          n,
          y: ptrs.y,
          c: ptrs.c,
          alpha: call.alpha,
          beta: call.beta,
          out: storageOf(y),
          epilogue,
          bias: common.bias,
          z: common.z,
        });
      }
      continue;
    }
    const kernel =
      plan.kind === 'dot'
        ? { key: dotKey(plan.variant), module: () => dotModule(plan.variant), entry: DOT_ENTRY }
        : { key: axpyKey(plan.variant), module: () => axpyModule(plan.variant), entry: AXPY_ENTRY };
    const swapped = plan.swapped;
    encoder.launch({
      ...kernel,
      grid: [plan.blocks, 1, count],
      block: ROW_THREADS,
      args: {
        ...common,
        a: swapped ? ptrs.b : ptrs.a,
        b: swapped ? ptrs.a : ptrs.b,
        n: plan.columns,
        strideA: swapped ? k * n : m * k,
        strideB: swapped ? m * k : k * n,
        rowStride: swapped ? 1 : n,
        colStride: swapped ? n : 1,
        // The bias runs along the spec's columns: the streaming rows when swapped.
        biasRow: swapped ? 1 : 0,
        biasCol: swapped ? 0 : 1,
      },
    });
  }
}

/** The matrix products read f32, f16 and bf16 (widened as loaded, summed in f32) and store their outputs' dtype. */
export const HALF_STORAGE = { dtypes: FLOAT };

export const MATMUL_KERNELS: readonly AnyCudaKernel[] = [
  launchedKernel(matmul, matmulLaunch, encodeMatmul, HALF_STORAGE),
  launchedKernel(batchedMatmul, batchedMatmulLaunch, encodeMatmul, HALF_STORAGE),
];
