import { InvalidArgumentError, type LinearActivation } from '@rayo/core';
import type { L2Prefetch, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { type ParamHandles, PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { GEMV_SLICE_CHOICES, type GemvSlices } from '../tuning.js';
import { activationF32 } from './activations.js';
import { loadParams } from './entryParams.js';
import {
  type FloatStorage,
  loadAsF32,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storeFromF32,
} from './storage.js';

// Streaming kernels of the matmul family: the GEMV (one row of op(a)) and
// small M (a few rows). Their cost is reading b once, so each is shaped
// around b's layout: `dot` for b stored [N, K] (a warp per output column,
// reading along K), `axpy` for b stored [K, N] (threads own adjacent columns,
// the warps of a block split K). Both take every row of op(a) at once, so b
// is read a single time whatever M is.

/** Threads per block of the streaming kernels. */
export const ROW_THREADS = 256;
const WARPS = ROW_THREADS / 32;
/** The most rows of op(a) a streaming kernel takes (accumulators per thread grow with it). */
export const MAX_ROWS = 16;
/** Shared memory of the axpy kernel's cross-warp sums, kept under the 48 KiB of static shared memory. */
export const AXPY_SHARED_BYTES = 32 * 1024;

// ---- helpers shared with the tiled kernels -------------------------------------

/** alpha · sum (+ beta · c): the epilogue of every matmul kernel. */
export function scaleAndAdd(k: KernelBuilder, sum: F32, alpha: F32, extra?: { beta: F32; c: F32 }): F32 {
  const y = k.mul('f32', k.reg('f32'), sum, alpha, { rnd: 'rn' });
  return extra ? k.fma('f32', k.reg('f32'), extra.beta, extra.c, y) : y;
}

/**
 * What `linear` adds after alpha · sum (+ beta · c): a bias per output column
 * of the spec's product, then an activation, with the pre-activation z
 * stored too when `z` is set. Absent, the kernel is a plain matmul.
 */
export interface Epilogue {
  readonly bias: boolean;
  readonly activation: LinearActivation;
  readonly z: boolean;
}

/** The key suffix of an epilogue ('' for a plain matmul). */
export function epilogueKey(e: Epilogue | undefined): string {
  if (!e) return '';
  return `/${e.bias ? 'bias' : 'nobias'}/${e.activation}${e.z ? '/z' : ''}`;
}

/** v + bias (when given), then act: the values of z and y. */
export function biasAndActivation(
  k: KernelBuilder,
  e: Epilogue | undefined,
  v: F32,
  bias: F32 | undefined,
): { z: F32; y: F32 } {
  if (!e) return { z: v, y: v };
  const z = bias ? k.add('f32', k.reg('f32'), v, bias, { rnd: 'rn' }) : v;
  return { z, y: activationF32(k, e.activation, z) };
}

/** `p = a < b` (unsigned) in a fresh predicate. */
export function below(k: KernelBuilder, a: R32, b: R32 | number): Pred {
  return k.setp('lt', 'u32', k.reg('pred'), a, b);
}

/**
 * The warp-per-column layout of the streaming kernels: warp w of block x
 * owns output column x · columns + w.
 */
export function warpColumn(k: KernelBuilder, columns: number): { tid: R32; warp: R32; lane: R32; col: R32 } {
  const tid = k.tid();
  const warp = k.shr('u32', k.reg('u32'), tid, 5);
  const lane = k.and('b32', k.reg('u32'), tid, 31);
  const col = k.madLo('u32', k.reg('u32'), k.ctaid(), columns, warp);
  return { tid, warp, lane, col };
}

/** Adds `parts` into the first, then across the warp by butterfly shuffles: every lane gets the total. */
export function warpSum(k: KernelBuilder, parts: readonly F32[]): F32 {
  const s = parts[0]!;
  for (let j = 1; j < parts.length; j++) k.add('f32', s, s, parts[j]!, { rnd: 'rn' });
  for (let offset = 16; offset >= 1; offset /= 2) {
    const other = k.shflSync('bfly', k.reg('f32'), s, offset);
    k.add('f32', s, s, other, { rnd: 'rn' });
  }
  return s;
}

/** Warps a streaming column's K may be split between: 1, 2, 4 or 8 of a block's 8. */
export type StreamSlices = GemvSlices;

/** What decides a streaming product's slices: its K and columns, and the kernel's geometry. */
export interface SliceProblem {
  readonly k: number;
  /** Elements a lane loads a step, and steps in flight. */
  readonly width: number;
  readonly unroll: number;
  readonly columns: number;
  /** Blocks the device holds at once (blocks per SM the registers allow × SMs). */
  readonly residentBlocks: number;
}

/**
 * Warps per column for a dot-layout GEMV: the most (up to 8) that leave
 * each warp at least one whole unrolled pass of K and the grid in one wave
 * of resident blocks. More warps a column put more of a short row's loads
 * in flight at once, but a second wave pays the whole latency again: on an
 * H200 the 1B decode step's fused products (one wave unsplit) slowed by
 * 12–40% split four ways, while its 2,048-column products gained 3–12% split
 * in two.
 */
export function streamSlicesFor(p: SliceProblem, wanted?: StreamSlices): StreamSlices {
  if (wanted !== undefined) return wanted;
  const passes = Math.floor(p.k / (32 * p.width * p.unroll));
  let slices: StreamSlices = 1;
  for (const s of GEMV_SLICE_CHOICES) {
    if (s <= passes && Math.ceil((p.columns * s) / WARPS) <= p.residentBlocks) slices = s;
  }
  return slices;
}

/**
 * The split-K layout of the streaming kernels: warp w of block x owns column
 * x · (8 / slices) + w / slices and slice w % slices of its K (slices 1 is
 * warpColumn's layout); `piece` is the lane's first piece of the row,
 * 32 · slice + lane, in pieces of a lane's vector.
 */
export function slicedWarpColumn(
  k: KernelBuilder,
  slices: StreamSlices,
): { tid: R32; warp: R32; lane: R32; col: R32; slice: R32; piece: R32 } {
  if (slices === 1) {
    const at = warpColumn(k, WARPS);
    return { ...at, slice: k.mov('u32', k.reg('u32'), 0), piece: at.lane };
  }
  const tid = k.tid();
  const warp = k.shr('u32', k.reg('u32'), tid, 5);
  const lane = k.and('b32', k.reg('u32'), tid, 31);
  const shift = Math.log2(slices);
  const col = k.madLo(
    'u32',
    k.reg('u32'),
    k.ctaid(),
    WARPS / slices,
    k.shr('u32', k.reg('u32'), warp, shift),
  );
  const slice = k.and('b32', k.reg('u32'), warp, slices - 1);
  return { tid, warp, lane, col, slice, piece: k.madLo('u32', k.reg('u32'), slice, 32, lane) };
}

/**
 * Adds each of `values` (warp totals: every lane holds them) across the
 * `slices` warps of a column, through shared memory, into the slice-0 warp's
 * registers, slices in order (the same sum every run). Every thread of the
 * block must call it: it holds a barrier.
 */
export function sliceSum(
  k: KernelBuilder,
  values: readonly F32[],
  at: { readonly warp: R32; readonly lane: R32; readonly slice: R32; readonly slices: StreamSlices },
): void {
  if (at.slices === 1 || values.length === 0) return;
  const base = k.sharedAddress(k.sharedArray('sliceSums', 'f32', WARPS * values.length, 4));
  const mine = k.madLo('u32', k.reg('u32'), at.warp, values.length * 4, base);
  k.ifThen(k.setp('eq', 'u32', k.reg('pred'), at.lane, 0), () => {
    values.forEach((v, i) => {
      k.stShared('f32', addr(mine, i * 4), v);
    });
  });
  k.barSync();
  k.ifThen(k.setp('eq', 'u32', k.reg('pred'), at.slice, 0), () => {
    for (let s = 1; s < at.slices; s++) {
      values.forEach((v, i) => {
        const part = k.ldShared('f32', k.reg('f32'), addr(mine, (s * values.length + i) * 4));
        k.add('f32', v, v, part, { rnd: 'rn' });
      });
    }
  });
}

/** One step of a streaming loop: its loads, then the arithmetic on them. */
export interface StreamStep<T> {
  /** Loads the operands of the counter's current position and advances the pointers one step. */
  load(): T;
  use(values: T): void;
}

/**
 * `for (; counter < end; counter += stride) step`, with `unroll` steps per
 * iteration while whole groups fit (their loads issued together, to keep
 * memory busy), then the rest one at a time.
 */
export function streamLoop<T>(
  k: KernelBuilder,
  counter: R32,
  end: R32,
  stride: number,
  unroll: number,
  step: StreamStep<T>,
): void {
  if (unroll > 1) {
    const top = k.label('stream');
    const done = k.label('stream_rest');
    k.place(top);
    const last = k.add('u32', k.reg('u32'), counter, stride * (unroll - 1));
    k.braIf(k.setp('ge', 'u32', k.reg('pred'), last, end), done);
    const values = Array.from({ length: unroll }, () => step.load());
    for (const v of values) step.use(v);
    k.add('u32', counter, counter, stride * unroll);
    k.bra(top);
    k.place(done);
  }
  k.forRange(counter, counter, end, stride, () => step.use(step.load()));
}

// ---- the kernels ---------------------------------------------------------------

export interface RowVariant {
  /** Rows of op(a): M, from 1 to MAX_ROWS. */
  readonly rows: number;
  /** a is stored [K, rows] rather than [rows, K]. */
  readonly transA: boolean;
  /**
   * `.v4` loads along b's contiguous axis, a multiple of 4 and 16-byte
   * aligned (for the dot kernel that axis is K, and untransposed a is read
   * the same way).
   */
  readonly vec: boolean;
  /** Adds beta · c. */
  readonly withC: boolean;
  /** linear's bias and activation after the sum. */
  readonly epilogue?: Epilogue;
  /** Storage of a, of b and of the outputs (y, c, bias, z); all f32 when absent. */
  readonly types?: RowTypes;
  /**
   * b's loads ask L2 for the 256 bytes around each (`.L2::256B`), a hint for
   * a stream read once. The module then targets sm_80. The planner sets it
   * for the axpy layout, where a 64 MiB GEMV ran 4% faster on an H100.
   */
  readonly l2Prefetch?: boolean;
  /** The dot kernel only: warps a column's K is split between (1 when absent), see streamSlicesFor. */
  readonly slices?: StreamSlices;
}

/** Storage of the streaming kernels' operands: the outputs share one (c, bias and z with y). */
export interface RowTypes {
  readonly a: FloatStorage;
  readonly b: FloatStorage;
  readonly out: FloatStorage;
}

const ALL_F32: RowTypes = { a: 'f32', b: 'f32', out: 'f32' };

function typesOf(v: RowVariant): RowTypes {
  return v.types ?? ALL_F32;
}

/**
 * Elements of b per vector access: 16 bytes (4 f32, 8 halves), or 8 bytes
 * of halves past 4 rows, where 8 elements of every row of a per unrolled
 * step would spill registers.
 */
export function streamWidth(b: FloatStorage, rows: number): number {
  return b === 'f32' || rows > 4 ? 4 : 8;
}

export interface AxpyVariant extends RowVariant {
  /** Output columns per block: a power of two, at least `vec ? 4 : 1` and at most `32 · (vec ? 4 : 1)`. */
  readonly columns: number;
  /**
   * Each step takes 4 consecutive k: 4 rows of b and a `.v4` of each row of
   * a (untransposed, K a multiple of 4, 16-byte aligned), a quarter of the
   * loads of a.
   */
  readonly quadK: boolean;
}

/**
 * Both kernels take the same parameters. Batches are blockIdx.z; `rowStride`
 * and `colStride` place y(m, n) (and c) at m · rowStride + n · colStride, so
 * the launcher can run y = op(a)·op(b) as yᵀ = op(b)ᵀ·op(a)ᵀ when N is the
 * small side.
 */
const ROW_PARAMS = {
  a: 'ptr',
  b: 'ptr',
  c: 'ptr',
  y: 'ptr',
  n: 'u32',
  k: 'u32',
  alpha: 'f32',
  beta: 'f32',
  strideA: 'u32',
  strideB: 'u32',
  strideY: 'u32',
  rowStride: 'u32',
  colStride: 'u32',
  bias: 'ptr',
  z: 'ptr',
  /** Element of bias of y(m, n): m · biasRow + n · biasCol (swapped, the bias runs along the rows). */
  biasRow: 'u32',
  biasCol: 'u32',
} as const;

function rowsName(v: RowVariant): string {
  const t = typesOf(v);
  const sliced = (v.slices ?? 1) > 1 ? `/s${v.slices}` : '';
  return `m${v.rows}/${v.transA ? 't' : 'n'}/${v.vec ? 'v4' : 'scalar'}${v.withC ? '/c' : ''}${epilogueKey(v.epilogue)}${v.l2Prefetch ? '/l2pf' : ''}${sliced}${storageKey([t.a, t.b, t.out])}`;
}

export function dotKey(v: RowVariant): string {
  return `matmul/dot/${rowsName(v)}`;
}

export function axpyKey(v: AxpyVariant): string {
  return `matmul/axpy/cols${v.columns}${v.quadK ? '/k4' : ''}/${rowsName(v)}`;
}

export const DOT_ENTRY = 'matmul_dot';
export const AXPY_ENTRY = 'matmul_axpy';

/** Output columns per block of the dot kernel: one per warp. */
export const DOT_COLUMNS = WARPS;

/** Output columns per block of a dot variant: one per `slices` warps. */
export function dotColumns(v: Pick<RowVariant, 'slices'>): number {
  return WARPS / (v.slices ?? 1);
}

/** Loop steps per iteration, for loads in flight: fewer when each step already loads many rows of a. */
export function unrollFor(rows: number): number {
  return rows <= 2 ? 4 : rows <= 8 ? 2 : 1;
}

/**
 * Bytes in flight come from warps times loads per warp. The GEMV's dot
 * grid (N / 8 blocks) is resident at once with 4 blocks per SM; the axpy
 * grid has about 2 per SM, whose threads may keep 8 steps' loads in flight.
 */
const DOT_OPTIONS = (rows: number) => ({
  maxThreadsPerBlock: ROW_THREADS,
  minBlocksPerSm: dotBlocksPerSm(rows),
});

/** Blocks per SM the dot kernel's registers are planned for. */
export function dotBlocksPerSm(rows: number): number {
  return rows <= 2 ? 4 : 2;
}
const AXPY_OPTIONS = { maxThreadsPerBlock: ROW_THREADS, minBlocksPerSm: 2 };

function checkRows(v: RowVariant): void {
  if (!Number.isInteger(v.rows) || v.rows < 1 || v.rows > MAX_ROWS) {
    throw new InvalidArgumentError('a streaming matmul kernel takes at most MAX_ROWS rows', {
      operation: 'matmul',
      argument: 'rows',
      expected: `an integer from 1 to ${MAX_ROWS}`,
      actual: String(v.rows),
    });
  }
}

/** `.L2::256B` needs sm_80; the other streaming modules keep the default target. */
function moduleOptions(v: RowVariant): { target?: string } {
  return v.l2Prefetch ? { target: 'sm_80' } : {};
}

function bPrefetch(v: RowVariant): L2Prefetch | undefined {
  return v.l2Prefetch ? 256 : undefined;
}

/** The batch's base address of an operand: `ptr + z · stride` elements of `bytes` each. */
export function batchBase(k: KernelBuilder, ptr: R64, z: R32, stride: R32, bytes = 4): R64 {
  return k.elementAddress(ptr, k.mulLo('u32', k.reg('u32'), z, stride), bytes);
}

/** Where and how the streaming kernels store a result. */
interface RowOutput {
  y: R64;
  c: R64;
  alpha: F32;
  beta: F32;
  rowStride: R32;
  colStride: R32;
  batchOffset: R32;
  withC: boolean;
  bias: R64;
  z: R64;
  biasRow: R32;
  biasCol: R32;
  epilogue: Epilogue | undefined;
  type: FloatStorage;
}

function rowOutput(k: KernelBuilder, p: ParamHandles<typeof ROW_PARAMS>, z: R32, v: RowVariant): RowOutput {
  return {
    y: k.globalPointer(p.y),
    c: k.globalPointer(p.c),
    alpha: k.ldParam(p.alpha),
    beta: k.ldParam(p.beta),
    rowStride: k.ldParam(p.rowStride),
    colStride: k.ldParam(p.colStride),
    batchOffset: k.mulLo('u32', k.reg('u32'), z, k.ldParam(p.strideY)),
    withC: v.withC,
    bias: k.globalPointer(p.bias),
    z: k.globalPointer(p.z),
    biasRow: k.ldParam(p.biasRow),
    biasCol: k.ldParam(p.biasCol),
    epilogue: v.epilogue,
    type: typesOf(v).out,
  };
}

/** Stores alpha · sum (+ beta · c), then the epilogue's bias and activation, at y(m, col) of batch z. */
function storeResult(k: KernelBuilder, p: RowOutput, m: R32 | number, col: R32, sum: F32): void {
  const index = k.madLo('u32', k.reg('u32'), col, p.colStride, p.batchOffset);
  if (typeof m === 'number') {
    if (m !== 0) k.madLo('u32', index, p.rowStride, m, index);
  } else {
    k.madLo('u32', index, p.rowStride, m, index);
  }
  const bytes = STORAGE_BYTES[p.type];
  const extra = p.withC
    ? { beta: p.beta, c: loadOneAsF32(k, p.type, k.elementAddress(p.c, index, bytes)) }
    : undefined;
  const e = p.epilogue;
  let bias: F32 | undefined;
  if (e?.bias) {
    const at = k.mulLo('u32', k.reg('u32'), col, p.biasCol);
    if (typeof m === 'number') {
      if (m !== 0) k.madLo('u32', at, p.biasRow, m, at);
    } else {
      k.madLo('u32', at, p.biasRow, m, at);
    }
    bias = loadOneAsF32(k, p.type, k.elementAddress(p.bias, at, bytes));
  }
  const { z, y } = biasAndActivation(k, e, scaleAndAdd(k, sum, p.alpha, extra), bias);
  if (e?.z) storeFromF32(k, p.type, k.elementAddress(p.z, index, bytes), z);
  storeFromF32(k, p.type, k.elementAddress(p.y, index, bytes), y);
}

/**
 * b stored [N, K]: warp w of block x computes column n = x · 8 + w for every
 * row. Lane l reads b[n, k..k+W) for k = W·l, W·l + 32W, ... (W = 4 with
 * `.v4`), and the same k of each row of a, then the warp sums its lanes with
 * shuffles and lane m writes row m.
 */
export function dotModule(v: RowVariant): PtxModule {
  checkRows(v);
  const types = typesOf(v);
  const w = v.vec ? streamWidth(types.b, v.rows) : 1;
  const bytesA = STORAGE_BYTES[types.a];
  const bytesB = STORAGE_BYTES[types.b];
  const m = new PtxModule(moduleOptions(v));
  m.entry(
    DOT_ENTRY,
    ROW_PARAMS,
    (k, p) => {
      const { n, k: kDim } = loadParams(k, p, 'n', 'k');
      const slices = v.slices ?? 1;
      const at = slicedWarpColumn(k, slices);
      const { lane, slice } = at;
      // The body for column `col`; `inside` (split K only) says whether it is a real column.
      const body = (col: R32, inside: Pred | undefined) => {
        const z = k.ctaid('z');
        const a = batchBase(k, k.globalPointer(p.a), z, k.ldParam(p.strideA), bytesA);
        const b = batchBase(k, k.globalPointer(p.b), z, k.ldParam(p.strideB), bytesB);
        // Lane l of slice s starts at k = (32s + l) · w and steps by 32 · slices · w.
        const kIdx = k.mulLo('u32', k.reg('u32'), at.piece, w);
        const bPtr = k.elementAddress(b, k.madLo('u32', k.reg('u32'), col, kDim, kIdx), bytesB);
        // transA: a(m, k) = a[k · rows + m], one pointer; else one pointer per row.
        const aPtrs: R64[] = v.transA
          ? [k.elementAddress(a, k.mulLo('u32', k.reg('u32'), kIdx, v.rows), bytesA)]
          : Array.from({ length: v.rows }, (_, r) =>
              k.elementAddress(a, k.madLo('u32', k.reg('u32'), kDim, r, kIdx), bytesA),
            );
        // A partial sum per vector element keeps the FMA chains short; past 4 rows they are long enough.
        const lanes = v.rows <= 4 ? w : 1;
        const acc = Array.from({ length: v.rows }, () => k.regs('f32', lanes));
        for (const row of acc) for (const r of row) k.mov('f32', r, 0);
        const stride = 32 * w * slices;
        streamLoop(k, kIdx, kDim, stride, unrollFor(v.rows), {
          load: () => {
            const bv = k.regs('f32', w);
            const prefetch = bPrefetch(v);
            loadAsF32(k, types.b, bv, bPtr, prefetch === undefined ? {} : { prefetch });
            k.add('u64', bPtr, bPtr, stride * bytesB);
            const av = Array.from({ length: v.rows }, (_, r) => {
              const regs = k.regs('f32', w);
              if (v.transA) {
                regs.forEach((reg, j) => {
                  loadAsF32(k, types.a, [reg], addr(aPtrs[0]!, (j * v.rows + r) * bytesA));
                });
              } else {
                loadAsF32(k, types.a, regs, aPtrs[r]!);
              }
              return regs;
            });
            for (const ptr of aPtrs) k.add('u64', ptr, ptr, stride * bytesA * (v.transA ? v.rows : 1));
            return { av, bv };
          },
          use: ({ av, bv }) => {
            for (let r = 0; r < v.rows; r++) {
              for (let j = 0; j < w; j++) {
                const sum = acc[r]![j % lanes]!;
                k.fma('f32', sum, av[r]![j]!, bv[j]!, sum);
              }
            }
          },
        });
        const sums = acc.map((row) => warpSum(k, row));
        sliceSum(k, sums, { ...at, slices });
        const stores = inside
          ? k.and('pred', k.reg('pred'), inside, k.setp('eq', 'u32', k.reg('pred'), slice, 0))
          : undefined;
        const out = rowOutput(k, p, z, v);
        // Every lane holds every sum; lane r stores row r, so the stores go out in parallel.
        sums.forEach((s, r) => {
          const mine = k.setp('eq', 'u32', k.reg('pred'), lane, r);
          k.ifThen(stores ? k.and('pred', mine, mine, stores) : mine, () => storeResult(k, out, r, col, s));
        });
      };
      if (slices === 1) {
        // Whole warps leave together, so the shuffles below always see 32 lanes.
        k.guard(at.col, n, () => body(at.col, undefined));
      } else {
        // Split K sums across warps at a barrier, so no warp leaves: a column past N reads column N − 1 and stores nothing.
        const inside = k.setp('lt', 'u32', k.reg('pred'), at.col, n);
        body(k.min('u32', k.reg('u32'), at.col, k.sub('u32', k.reg('u32'), n, 1)), inside);
      }
    },
    DOT_OPTIONS(v.rows),
  );
  return m;
}

/** The shape of an axpy block: lanes per row of b, rows of b a warp (and the block) reads at once. */
export function axpyGeometry(v: AxpyVariant): { lanesPerRow: number; rowsPerWarp: number; slots: number } {
  const w = v.vec ? streamWidth(typesOf(v).b, v.rows) : 1;
  const lanesPerRow = v.columns / w;
  if (!Number.isInteger(lanesPerRow) || lanesPerRow < 1 || lanesPerRow > 32 || 32 % lanesPerRow !== 0) {
    throw new InvalidArgumentError('an axpy block row must be a power-of-two part of a warp', {
      operation: 'matmul',
      argument: 'columns',
      expected: `${w}, ${2 * w}, ${4 * w}, … or ${32 * w} columns`,
      actual: String(v.columns),
    });
  }
  const rowsPerWarp = 32 / lanesPerRow;
  return { lanesPerRow, rowsPerWarp, slots: WARPS * rowsPerWarp };
}

/** Shared bytes of the axpy kernel's cross-warp sums. */
export function axpySharedBytes(v: AxpyVariant): number {
  return WARPS * v.rows * v.columns * 4;
}

/**
 * b stored [K, N]: block x computes columns [x · columns, (x + 1) · columns)
 * for every row. Each thread owns W adjacent columns (W = 4 with `.v4`) and
 * one row slot of 1 (or, with quadK, 4) k; the block's slots step through K
 * together. Lanes of a warp
 * that share columns are summed with shuffles, the warps through shared
 * memory, and the first rows · columns threads write y.
 */
export function axpyModule(v: AxpyVariant): PtxModule {
  checkRows(v);
  const types = typesOf(v);
  const w = v.vec ? streamWidth(types.b, v.rows) : 1;
  const bytesA = STORAGE_BYTES[types.a];
  const bytesB = STORAGE_BYTES[types.b];
  const { lanesPerRow, rowsPerWarp, slots } = axpyGeometry(v);
  if (axpySharedBytes(v) > AXPY_SHARED_BYTES) {
    throw new InvalidArgumentError('the axpy cross-warp sums do not fit in shared memory', {
      operation: 'matmul',
      argument: 'columns',
      expected: `at most ${AXPY_SHARED_BYTES} bytes`,
      actual: `${axpySharedBytes(v)} bytes for ${v.rows} rows × ${v.columns} columns`,
    });
  }
  if (v.quadK && v.transA) {
    throw new InvalidArgumentError('4 k per step read a along K, which a transposed a is not', {
      operation: 'matmul',
      argument: 'quadK',
      expected: 'quadK only with an untransposed a',
      actual: 'quadK with transA',
    });
  }
  const depth = v.quadK ? 4 : 1;
  // Steps in flight: about 8 rows of b per thread for one or two rows of a.
  const unroll = v.quadK ? (v.rows <= 2 ? 2 : 1) : v.rows === 1 ? 8 : unrollFor(v.rows);
  const m = new PtxModule(moduleOptions(v));
  m.entry(
    AXPY_ENTRY,
    ROW_PARAMS,
    (k, p) => {
      const { n, k: kDim } = loadParams(k, p, 'n', 'k');
      const red = k.sharedArray('partial', 'f32', WARPS * v.rows * v.columns, 16);
      const tid = k.tid();
      const warp = k.shr('u32', k.reg('u32'), tid, 5);
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const slot = k.madLo(
        'u32',
        k.reg('u32'),
        warp,
        rowsPerWarp,
        k.div('u32', k.reg('u32'), lane, lanesPerRow),
      );
      const colLane = k.rem('u32', k.reg('u32'), lane, lanesPerRow);
      const firstCol = k.mulLo('u32', k.reg('u32'), k.ctaid(), v.columns);
      const col = k.madLo('u32', k.reg('u32'), colLane, w, firstCol);
      // With `.v4`, N is a multiple of 4: a vector is all inside or all outside.
      const colOk = below(k, col, n);
      const z = k.ctaid('z');
      const a = batchBase(k, k.globalPointer(p.a), z, k.ldParam(p.strideA), bytesA);
      const b = batchBase(k, k.globalPointer(p.b), z, k.ldParam(p.strideB), bytesB);
      // Slot s starts at k = s · depth and steps by slots · depth.
      const kIdx = k.mulLo('u32', k.reg('u32'), slot, depth);
      const stride = slots * depth;
      const bPtr = k.elementAddress(b, k.madLo('u32', k.reg('u32'), kIdx, n, col), bytesB);
      const rowBytes = k.mulWide('u32', k.reg('u64'), n, bytesB);
      const bStep = k.mulWide('u32', k.reg('u64'), n, stride * bytesB);
      const aPtrs: R64[] = v.transA
        ? [k.elementAddress(a, k.mulLo('u32', k.reg('u32'), kIdx, v.rows), bytesA)]
        : Array.from({ length: v.rows }, (_, r) =>
            k.elementAddress(a, k.madLo('u32', k.reg('u32'), kDim, r, kIdx), bytesA),
          );
      const acc = Array.from({ length: v.rows }, () => Array.from({ length: w }, () => k.reg('f32')));
      for (const row of acc) for (const r of row) k.mov('f32', r, 0);
      streamLoop(k, kIdx, kDim, stride, unroll, {
        load: () => {
          // bv[j]: row k + j of b at the thread's columns.
          let row = bPtr;
          const bv = Array.from({ length: depth }, (_, j) => {
            if (j > 0) row = k.add('u64', k.reg('u64'), row, rowBytes);
            const regs = k.regs('f32', w);
            const prefetch = bPrefetch(v);
            loadAsF32(
              k,
              types.b,
              regs,
              row,
              prefetch === undefined ? { ok: colOk } : { ok: colOk, prefetch },
            );
            return regs;
          });
          k.add('u64', bPtr, bPtr, bStep);
          // av[r][j]: a(r, k + j).
          const av = Array.from({ length: v.rows }, (_, r) => {
            const regs = k.regs('f32', depth);
            loadAsF32(k, types.a, regs, v.transA ? addr(aPtrs[0]!, r * bytesA) : aPtrs[r]!);
            return regs;
          });
          for (const ptr of aPtrs) k.add('u64', ptr, ptr, stride * bytesA * (v.transA ? v.rows : 1));
          return { av, bv };
        },
        use: ({ av, bv }) => {
          for (let r = 0; r < v.rows; r++) {
            for (let d = 0; d < depth; d++) {
              for (let j = 0; j < w; j++) k.fma('f32', acc[r]![j]!, av[r]![d]!, bv[d]![j]!, acc[r]![j]!);
            }
          }
        },
      });
      // Lanes lanesPerRow apart hold the same columns: fold them into the first row slot of the warp.
      for (let offset = lanesPerRow; offset < 32; offset *= 2) {
        for (const row of acc) {
          for (const r of row) k.add('f32', r, r, k.shflSync('bfly', k.reg('f32'), r, offset), { rnd: 'rn' });
        }
      }
      const base = k.sharedAddress(red);
      k.ifThen(below(k, lane, lanesPerRow), () => {
        // partial[warp][row][column], column = colLane · W + j.
        const at = k.madLo('u32', k.reg('u32'), warp, v.rows * v.columns * 4, base);
        k.madLo('u32', at, colLane, w * 4, at);
        acc.forEach((row, r) => {
          for (let j = 0; j < w; j += 4) {
            const to = addr(at, (r * v.columns + j) * 4);
            if (w >= 4) k.stShared('f32', to, row.slice(j, j + 4) as unknown as Vec4<F32>);
            else k.stShared('f32', to, row[0]!);
          }
        });
      });
      k.barSync();
      const out = rowOutput(k, p, z, v);
      const outputs = v.rows * v.columns;
      for (let first = 0; first < outputs; first += ROW_THREADS) {
        const t = k.add('u32', k.reg('u32'), tid, first);
        const finish = () => {
          const r = k.div('u32', k.reg('u32'), t, v.columns);
          const c = k.rem('u32', k.reg('u32'), t, v.columns);
          const outCol = k.add('u32', k.reg('u32'), firstCol, c);
          k.guard(outCol, n, () => {
            const from = k.madLo('u32', k.reg('u32'), t, 4, base);
            const sum = k.ldShared('f32', k.reg('f32'), from);
            for (let wi = 1; wi < WARPS; wi++) {
              const part = k.ldShared('f32', k.reg('f32'), addr(from, wi * outputs * 4));
              k.add('f32', sum, sum, part, { rnd: 'rn' });
            }
            storeResult(k, out, r, outCol, sum);
          });
        };
        if (first + ROW_THREADS <= outputs) finish();
        else k.guard(t, outputs, finish);
      }
    },
    AXPY_OPTIONS,
  );
  return m;
}
