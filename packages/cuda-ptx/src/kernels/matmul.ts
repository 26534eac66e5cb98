import {
  batchedMatmul,
  InvalidArgumentError,
  type MatmulDims,
  type MatmulLaunch,
  type MatmulTile,
  matmul,
} from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import { type AnyCudaKernel, cudaKernel, elementPtr, type KernelEncoder, type Operand } from '../kernel.js';
import type { Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { BLOCK, checkElementCount, gridFor, MAX_ELEMENTS } from './common.js';
import {
  AXPY_ENTRY,
  AXPY_SHARED_BYTES,
  type AxpyVariant,
  axpyKey,
  axpyModule,
  batchBase,
  below,
  biasAndActivation,
  DOT_COLUMNS,
  DOT_ENTRY,
  dotKey,
  dotModule,
  type Epilogue,
  epilogueKey,
  loadOrZero,
  MAX_ROWS,
  ROW_THREADS,
  type RowVariant,
  scaleAndAdd,
} from './gemv.js';

// ---- the tiled kernel ------------------------------------------------------------

/** The large-problem tile: 64 accumulators per thread, one `.v4` load of a and of b per thread and step. */
export const TILE_LARGE: MatmulTile = { bm: 128, bn: 128, bk: 8, tm: 8, tn: 8 };
/** Four times the blocks of TILE_LARGE, for problems that would not fill the device with it. */
export const TILE_MID: MatmulTile = { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 };

export const TILE_THREADS = 256;
/**
 * Shared rows are padded by 4 floats: `.v4` reads stay 16-byte aligned, and
 * the transposing stores of a K-contiguous operand (rows r and r + 1 of a
 * warp's loads write k and k + 4) land in different banks.
 */
const PAD = 4;
/** Tile rows per group in the block order: consecutive blocks share rows of a and columns of b in L2. */
export const GROUP_ROWS = 8;
export const TILE_ENTRY = 'matmul_tile';

export interface TileVariant {
  readonly tile: MatmulTile;
  /** a is stored [K, M]. */
  readonly transA: boolean;
  /** b is stored [N, K]. */
  readonly transB: boolean;
  /**
   * `.v4` global loads and stores: the contiguous axis of a, b and y is a
   * multiple of 4 and each operand is 16-byte aligned. Without it every
   * element is loaded and stored on its own.
   */
  readonly vec: boolean;
  /** Adds beta · c. */
  readonly withC: boolean;
  /** linear's bias and activation after alpha · acc (+ beta · c); with `vec`, bias and z are 16-byte aligned. */
  readonly epilogue?: Epilogue;
}

export function tileKey(v: TileVariant): string {
  const { bm, bn, bk, tm, tn } = v.tile;
  const layout = `${v.transA ? 't' : 'n'}${v.transB ? 't' : 'n'}`;
  const c = v.withC ? '/c' : '';
  return `matmul/tile${bm}x${bn}x${bk}_${tm}x${tn}/${layout}/${v.vec ? 'v4' : 'scalar'}${c}${epilogueKey(v.epilogue)}`;
}

/** Bytes of one of the two shared buffers: a's and b's k-major tiles. */
export function tileBufferBytes(t: MatmulTile): number {
  return t.bk * (t.bm + PAD + t.bn + PAD) * 4;
}

function checkTile(t: MatmulTile): void {
  const ok =
    (t.tm === 4 || t.tm === 8) &&
    (t.tn === 4 || t.tn === 8) &&
    (t.bm / t.tm) * (t.bn / t.tn) === TILE_THREADS &&
    [t.bm, t.bn, t.bk].every((d) => Number.isInteger(d) && d % 4 === 0) &&
    (t.bk & (t.bk - 1)) === 0 &&
    ((t.bm * t.bk) / 4) % TILE_THREADS === 0 &&
    ((t.bn * t.bk) / 4) % TILE_THREADS === 0;
  if (!ok) {
    throw new InvalidArgumentError('unsupported matmul tile', {
      kernel: 'matmul',
      argument: 'tile',
      expected: `${TILE_THREADS} threads of 4×4, 4×8, 8×4 or 8×8, bk a power of two, whole .v4 slices per thread`,
      actual: JSON.stringify(t),
    });
  }
}

/** How one operand's tile moves from global to shared memory. */
interface TileOperand {
  /** The batch's base address. */
  readonly base: R64;
  /** K is the stored rows' contiguous axis (a untransposed, b transposed): stores to shared transpose. */
  readonly kInner: boolean;
  /** The tile's extent along M (a) or N (b). */
  readonly span: number;
  /** Floats per k-row of the shared tile. */
  readonly pitch: number;
  /** Byte offset of the tile within a shared buffer. */
  readonly offset: number;
  /** Elements per stored row. */
  readonly ld: R32;
  /** M (a) or N (b). */
  readonly bound: R32;
  /** The tile's first row (a) or column (b). */
  readonly first: R32;
}

/** Per-thread state of one `.v4` slice of an operand's tile. */
interface Slice {
  /** Global address of the slice in the current step. */
  readonly ptr: R64;
  /** Whether the slice's M/N elements are inside the matrix: one predicate, or one per element. */
  readonly inside: readonly Pred[];
  /** Shared byte address of the slice within buffer 0. */
  readonly shared: R32;
  readonly regs: F32[];
}

/**
 * The slices of an operand's tile this thread moves (slice s = tid + 256 · i
 * of the tile's runs of 4 contiguous elements, so consecutive threads read
 * consecutive memory), and loads its part of the first step.
 *
 * K is walked from k = -lead, lead = (-K) mod bk, so that the ragged step is
 * the first one: its k < 0 elements are zero, and every later step lies
 * wholly inside K and needs no K guard.
 */
function firstSlices(
  k: KernelBuilder,
  t: MatmulTile,
  op: TileOperand,
  p: { tid: R32; sharedBase: R32; lead: R32; anyK: Pred; vec: boolean },
): Slice[] {
  const perRow = (op.kInner ? t.bk : op.span) / 4;
  const count = (t.bk * op.span) / 4 / TILE_THREADS;
  const leadBytes = op.kInner
    ? k.mulWide('u32', k.reg('u64'), p.lead, 4)
    : k.mulWide('u32', k.reg('u64'), k.mulLo('u32', k.reg('u32'), p.lead, op.ld), 4);
  const slices: Slice[] = [];
  for (let i = 0; i < count; i++) {
    const s = k.add('u32', k.reg('u32'), p.tid, i * TILE_THREADS);
    const outer = k.div('u32', k.reg('u32'), s, perRow);
    const inner = k.mulLo('u32', k.reg('u32'), k.rem('u32', k.reg('u32'), s, perRow), 4);
    // (row, k) of the tile: kInner stores rows along M/N with k contiguous.
    const [mn, kOffset] = op.kInner ? [outer, inner] : [inner, outer];
    const index = k.add('u32', k.reg('u32'), op.first, mn);
    const element = op.kInner
      ? k.madLo('u32', k.reg('u32'), index, op.ld, kOffset)
      : k.madLo('u32', k.reg('u32'), kOffset, op.ld, index);
    // 64-bit, so that stepping back by the lead wraps around and comes back.
    const ptr = k.sub('u64', k.reg('u64'), k.elementAddress(op.base, element, 4), leadBytes);
    // Without `.v4` a slice running along M/N may cross the matrix's edge.
    const inside =
      op.kInner || p.vec
        ? [below(k, index, op.bound)]
        : [0, 1, 2, 3].map((j) => below(k, k.add('u32', k.reg('u32'), index, j), op.bound));
    // Shared [k][mn] with `pitch` floats per k.
    const cell = k.madLo('u32', k.reg('u32'), kOffset, op.pitch, mn);
    const shared = k.madLo('u32', k.reg('u32'), cell, 4, p.sharedBase);
    if (op.offset !== 0) k.add('u32', shared, shared, op.offset);
    const slice = { ptr, inside, shared, regs: k.regs('f32', 4) };
    slices.push(slice);
    // The first step: zeros before k = 0 (and everywhere when K = 0, or outside the matrix).
    const inK = (j: number) => {
      const kj = j === 0 ? kOffset : k.add('u32', k.reg('u32'), kOffset, j);
      return k.and('pred', k.reg('pred'), k.setp('ge', 'u32', k.reg('pred'), kj, p.lead), p.anyK);
    };
    if (p.vec) {
      loadOrZero(k, slice.regs, ptr, k.and('pred', k.reg('pred'), inK(0), inside[0]!));
      continue;
    }
    for (let j = 0; j < 4; j++) {
      const ok = op.kInner
        ? k.and('pred', k.reg('pred'), inK(j), inside[0]!)
        : k.and('pred', k.reg('pred'), inK(0), inside[j]!);
      loadOrZero(k, [slice.regs[j]!], addr(ptr, j * 4), ok);
    }
  }
  return slices;
}

/**
 * Loads the slices of a step inside K, where `more` (there is a next step)
 * holds. Elements outside the matrix's M/N are not read; their registers
 * keep stale values, which reach only accumulators of rows or columns that
 * are never stored. Predicated rather than branched over, so that the loads
 * and the arithmetic after them are one block for the scheduler.
 */
function loadSlices(k: KernelBuilder, slices: readonly Slice[], more: Pred, vec: boolean) {
  for (const s of slices) {
    const ok = s.inside.map((inside) => k.and('pred', k.reg('pred'), inside, more));
    if (vec) {
      k.predicated(ok[0]!, () => k.ldGlobal('f32', s.regs as unknown as Vec4<F32>, s.ptr, { nc: true }));
      continue;
    }
    s.regs.forEach((r, j) => {
      k.predicated(ok[ok.length === 1 ? 0 : j]!, () =>
        k.ldGlobal('f32', r, addr(s.ptr, j * 4), { nc: true }),
      );
    });
  }
}

/** Stores the slices' registers into the shared buffer at byte offset `buffer`. */
function storeSlices(k: KernelBuilder, op: TileOperand, slices: readonly Slice[], buffer: number) {
  for (const s of slices) {
    if (op.kInner) {
      s.regs.forEach((r, j) => {
        k.stShared('f32', addr(s.shared, buffer + j * op.pitch * 4), r);
      });
    } else {
      k.stShared('f32', addr(s.shared, buffer), s.regs as unknown as Vec4<F32>);
    }
  }
}

/**
 * C = alpha · op(A) · op(B) (+ beta · C) over tiles: block (tile, batch)
 * computes a bm × bn tile of C, thread (tx, ty) a tm × tn sub-tile made of
 * 4 × 4 quads spaced bm/2 (bn/2) apart, so that its reads of the k-major
 * shared tiles are `.v4` and conflict-free. The K loop is double buffered:
 * the next step's global loads are in flight while the current step is
 * multiplied out of shared memory, one barrier per step.
 */
export function tileModule(v: TileVariant): PtxModule {
  const t = v.tile;
  checkTile(t);
  const bufferBytes = tileBufferBytes(t);
  const m = new PtxModule();
  m.entry(
    TILE_ENTRY,
    {
      a: 'ptr',
      b: 'ptr',
      c: 'ptr',
      y: 'ptr',
      m: 'u32',
      n: 'u32',
      k: 'u32',
      alpha: 'f32',
      beta: 'f32',
      strideA: 'u32',
      strideB: 'u32',
      strideY: 'u32',
      tilesM: 'u32',
      tilesN: 'u32',
      kPerSplit: 'u32',
      splitStride: 'u32',
      bias: 'ptr',
      z: 'ptr',
    },
    (k, p) => {
      const mDim = k.ldParam(p.m);
      const nDim = k.ldParam(p.n);
      const kDim = k.ldParam(p.k);
      const tilesM = k.ldParam(p.tilesM);
      const tilesN = k.ldParam(p.tilesN);
      const tiles = k.sharedArray('tiles', 'f32', (2 * bufferBytes) / 4, 16);
      const sharedBase = k.sharedAddress(tiles);
      const tid = k.tid();

      // Grouped block order: GROUP_ROWS tile rows are walked column by column.
      const block = k.ctaid();
      const groupSize = k.mulLo('u32', k.reg('u32'), tilesN, GROUP_ROWS);
      const group = k.div('u32', k.reg('u32'), block, groupSize);
      const firstRow = k.mulLo('u32', k.reg('u32'), group, GROUP_ROWS);
      const rowsInGroup = k.min(
        'u32',
        k.reg('u32'),
        k.sub('u32', k.reg('u32'), tilesM, firstRow),
        GROUP_ROWS,
      );
      const inGroup = k.sub('u32', k.reg('u32'), block, k.mulLo('u32', k.reg('u32'), group, groupSize));
      const tileRow = k.add('u32', k.reg('u32'), firstRow, k.rem('u32', k.reg('u32'), inGroup, rowsInGroup));
      const tileCol = k.div('u32', k.reg('u32'), inGroup, rowsInGroup);
      const row0 = k.mulLo('u32', k.reg('u32'), tileRow, t.bm);
      const col0 = k.mulLo('u32', k.reg('u32'), tileCol, t.bn);

      const z = k.ctaid('z');
      // Split K: block y takes [y · kPerSplit, y · kPerSplit + kLength) of K.
      const split = k.ctaid('y');
      const kPerSplit = k.ldParam(p.kPerSplit);
      const kBegin = k.mulLo('u32', k.reg('u32'), split, kPerSplit);
      const kLength = k.min('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), kDim, kBegin), kPerSplit);
      /** The operand's base moved to k = kBegin. */
      const splitBase = (base: R64, kInner: boolean, ld: R32) =>
        k.elementAddress(base, kInner ? kBegin : k.mulLo('u32', k.reg('u32'), kBegin, ld), 4);
      const opA: TileOperand = {
        base: splitBase(
          batchBase(k, k.globalPointer(p.a), z, k.ldParam(p.strideA)),
          !v.transA,
          v.transA ? mDim : kDim,
        ),
        kInner: !v.transA,
        span: t.bm,
        pitch: t.bm + PAD,
        offset: 0,
        ld: v.transA ? mDim : kDim,
        bound: mDim,
        first: row0,
      };
      const opB: TileOperand = {
        base: splitBase(
          batchBase(k, k.globalPointer(p.b), z, k.ldParam(p.strideB)),
          v.transB,
          v.transB ? kDim : nDim,
        ),
        kInner: v.transB,
        span: t.bn,
        pitch: t.bn + PAD,
        offset: t.bk * (t.bm + PAD) * 4,
        ld: v.transB ? kDim : nDim,
        bound: nDim,
        first: col0,
      };
      const lead = k.and('b32', k.reg('u32'), k.sub('u32', k.reg('u32'), 0, kLength), t.bk - 1);
      const kPadded = k.add('u32', k.reg('u32'), kLength, lead);
      const anyK = k.setp('ne', 'u32', k.reg('pred'), kLength, 0);
      const first = { tid, sharedBase, lead, anyK, vec: v.vec };
      const slicesA = firstSlices(k, t, opA, first);
      const slicesB = firstSlices(k, t, opB, first);
      // Bytes the slice pointers move per step: bk elements along K.
      const stepOf = (op: TileOperand): R64 | number =>
        op.kInner ? t.bk * 4 : k.mulWide('u32', k.reg('u64'), op.ld, t.bk * 4);
      const stepA = stepOf(opA);
      const stepB = stepOf(opB);

      // The thread's sub-tile: quads at rows ty·4 + q·(bm/2), columns tx·4 + q·(bn/2).
      const threadsN = t.bn / t.tn;
      const tx = k.rem('u32', k.reg('u32'), tid, threadsN);
      const ty = k.div('u32', k.reg('u32'), tid, threadsN);
      const quadsM = t.tm / 4;
      const quadsN = t.tn / 4;
      const quadStrideM = t.bm / quadsM;
      const quadStrideN = t.bn / quadsN;
      const readA = k.madLo('u32', k.reg('u32'), ty, 16, sharedBase);
      const readB = k.madLo('u32', k.reg('u32'), tx, 16, sharedBase);
      k.add('u32', readB, readB, opB.offset);
      const acc = Array.from({ length: t.tm }, () => k.regs('f32', t.tn));
      for (const row of acc) for (const r of row) k.mov('f32', r, 0);

      storeSlices(k, opA, slicesA, 0);
      storeSlices(k, opB, slicesB, 0);
      k.barSync();

      /** Multiplies the tile of step `kAt` out of buffer `read` while the next step's tile goes to the other. */
      const step = (kAt: R32, read: number) => {
        // The next step's loads go out before this step's arithmetic.
        // (Past the last step the pointers run beyond the matrices, never to be read.)
        const more = below(k, k.add('u32', k.reg('u32'), kAt, t.bk), kPadded);
        for (const s of slicesA) k.add('u64', s.ptr, s.ptr, stepA);
        for (const s of slicesB) k.add('u64', s.ptr, s.ptr, stepB);
        loadSlices(k, slicesA, more, v.vec);
        loadSlices(k, slicesB, more, v.vec);
        for (let kk = 0; kk < t.bk; kk++) {
          const a = readQuads(k, readA, read + kk * opA.pitch * 4, quadsM, quadStrideM);
          const b = readQuads(k, readB, read + kk * opB.pitch * 4, quadsN, quadStrideN);
          for (let i = 0; i < t.tm; i++) {
            for (let j = 0; j < t.tn; j++) k.fma('f32', acc[i]![j]!, a[i]!, b[j]!, acc[i]![j]!);
          }
        }
        // The other buffer was last read before the previous barrier: free to fill.
        // (After the last step this stores stale registers that nothing reads.)
        storeSlices(k, opA, slicesA, bufferBytes - read);
        storeSlices(k, opB, slicesB, bufferBytes - read);
        k.barSync();
      };
      const kBase = k.mov('u32', k.reg('u32'), 0);
      // Two steps per iteration, one per buffer, so that every shared address is a register plus a constant.
      k.forRange(kBase, kBase, kPadded, 2 * t.bk, (loop) => {
        step(kBase, 0);
        const kOdd = k.add('u32', k.reg('u32'), kBase, t.bk);
        k.braIf(k.setp('ge', 'u32', k.reg('pred'), kOdd, kPadded), loop.exit);
        step(kOdd, bufferBytes);
      });

      // Epilogue: y = alpha · acc (+ beta · c), then linear's bias and activation, guarded at the edges.
      const alpha = k.ldParam(p.alpha);
      const beta = k.ldParam(p.beta);
      // Splits write their partial sums to consecutive blocks of y (scratch memory then).
      const yBase = k.elementAddress(
        batchBase(k, k.globalPointer(p.y), z, k.ldParam(p.strideY)),
        k.mulLo('u32', k.reg('u32'), split, k.ldParam(p.splitStride)),
        4,
      );
      const cBase = v.withC ? batchBase(k, k.globalPointer(p.c), z, k.ldParam(p.strideY)) : undefined;
      const colFirst = k.madLo('u32', k.reg('u32'), tx, 4, col0);
      const colOk: Pred[][] = [];
      for (let q = 0; q < quadsN; q++) {
        const c = k.add('u32', k.reg('u32'), colFirst, q * quadStrideN);
        colOk.push(
          v.vec
            ? [below(k, c, nDim)]
            : [0, 1, 2, 3].map((j) => below(k, k.add('u32', k.reg('u32'), c, j), nDim)),
        );
      }
      const e = v.epilogue;
      const groups = v.vec ? [[0, 1, 2, 3]] : [[0], [1], [2], [3]];
      // The bias of the thread's columns, the same for each of its rows: loaded once.
      const biasRegs: F32[][][] = [];
      if (e?.bias) {
        const biasCols = k.elementAddress(k.globalPointer(p.bias), colFirst, 4);
        for (let q = 0; q < quadsN; q++) {
          biasRegs.push(
            groups.map((js, g) => {
              const regs = k.regs('f32', js.length);
              loadOrZero(k, regs, addr(biasCols, (q * quadStrideN + js[0]!) * 4), colOk[q]![g]!);
              return regs;
            }),
          );
        }
      }
      const zBase = e?.z ? batchBase(k, k.globalPointer(p.z), z, k.ldParam(p.strideY)) : undefined;
      const rowFirst = k.madLo('u32', k.reg('u32'), ty, 4, row0);
      for (let i = 0; i < t.tm; i++) {
        const row = k.add('u32', k.reg('u32'), rowFirst, (i >> 2) * quadStrideM + (i & 3));
        const rowOk = below(k, row, mDim);
        const element = k.madLo('u32', k.reg('u32'), row, nDim, colFirst);
        const yRow = k.elementAddress(yBase, element, 4);
        const cRow = cBase ? k.elementAddress(cBase, element, 4) : undefined;
        const zRow = zBase ? k.elementAddress(zBase, element, 4) : undefined;
        for (let q = 0; q < quadsN; q++) {
          const values = acc[i]!.slice(q * 4, q * 4 + 4);
          const offset = q * quadStrideN * 4;
          groups.forEach((js, g) => {
            const ok = k.and('pred', k.reg('pred'), rowOk, colOk[q]![g]!);
            const at = offset + js[0]! * 4;
            const c = k.regs('f32', js.length);
            if (cRow) loadOrZero(k, c, addr(cRow, at), ok);
            const out = js.map((j, x) =>
              biasAndActivation(
                k,
                e,
                scaleAndAdd(k, values[j]!, alpha, cRow ? { beta, c: c[x]! } : undefined),
                biasRegs[q]?.[g]?.[x],
              ),
            );
            const store = (row: R64, regs: F32[]) => {
              if (regs.length === 4) k.stGlobal('f32', addr(row, at), regs as unknown as Vec4<F32>);
              else k.stGlobal('f32', addr(row, at), regs[0]!);
            };
            k.predicated(ok, () => {
              if (zRow)
                store(
                  zRow,
                  out.map((o) => o.z),
                );
              store(
                yRow,
                out.map((o) => o.y),
              );
            });
          });
        }
      }
    },
    { maxThreadsPerBlock: TILE_THREADS, minBlocksPerSm: 2 },
  );
  return m;
}

/** The thread's 4 · quads values of one k-row of a shared tile: `.v4` reads `quadStride` floats apart. */
function readQuads(k: KernelBuilder, at: R32, offset: number, quads: number, quadStride: number): F32[] {
  const values: F32[] = [];
  for (let q = 0; q < quads; q++) {
    const regs = k.regs('f32', 4);
    k.ldShared('f32', regs, addr(at, offset + q * quadStride * 4));
    values.push(...regs);
  }
  return values;
}

// ---- summing the splits of K -------------------------------------------------------

export const SPLIT_SUM_ENTRY = 'matmul_split_sum';

export function splitSumKey(withC: boolean, epilogue?: Epilogue): string {
  return `matmul/split_sum${withC ? '/c' : ''}${epilogueKey(epilogue)}`;
}

/**
 * y[i] = alpha · Σ_s parts[s · total + i] (+ beta · c[i]): the split-K
 * tiles' partial sums, added in split order (the same result every run),
 * then linear's bias (of column i mod n) and activation.
 */
export function splitSumModule(withC: boolean, epilogue?: Epilogue): PtxModule {
  const m = new PtxModule();
  m.entry(
    SPLIT_SUM_ENTRY,
    {
      parts: 'ptr',
      c: 'ptr',
      y: 'ptr',
      total: 'u32',
      splits: 'u32',
      alpha: 'f32',
      beta: 'f32',
      bias: 'ptr',
      z: 'ptr',
      n: 'u32',
    },
    (k, p) => {
      const parts = k.globalPointer(p.parts);
      const c = k.globalPointer(p.c);
      const y = k.globalPointer(p.y);
      const total = k.ldParam(p.total);
      const splits = k.ldParam(p.splits);
      const alpha = k.ldParam(p.alpha);
      const beta = k.ldParam(p.beta);
      k.gridStrideLoop(total, (i) => {
        const sum = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(parts, i, 4), { nc: true });
        const at = k.mov('u32', k.reg('u32'), i);
        const s = k.reg('u32');
        k.forRange(s, 1, splits, 1, () => {
          k.add('u32', at, at, total);
          const part = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(parts, at, 4), { nc: true });
          k.add('f32', sum, sum, part, { rnd: 'rn' });
        });
        const extra = withC
          ? { beta, c: k.ldGlobal('f32', k.reg('f32'), k.elementAddress(c, i, 4), { nc: true }) }
          : undefined;
        let bias: F32 | undefined;
        if (epilogue?.bias) {
          const col = k.rem('u32', k.reg('u32'), i, k.ldParam(p.n));
          bias = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(k.globalPointer(p.bias), col, 4), {
            nc: true,
          });
        }
        const out = biasAndActivation(k, epilogue, scaleAndAdd(k, sum, alpha, extra), bias);
        if (epilogue?.z) k.stGlobal('f32', k.elementAddress(k.globalPointer(p.z), i, 4), out.z);
        k.stGlobal('f32', k.elementAddress(y, i, 4), out.y);
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

// ---- choosing a kernel -----------------------------------------------------------

/** One matrix product of a batch, in the spec's terms. */
export interface MatmulProblem extends MatmulDims {
  readonly withC: boolean;
  /** linear's bias and activation. */
  readonly epilogue?: Epilogue;
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
 * goes to tiles, the mid-size tile where the large one would leave SMs idle.
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
    if (bKInner) {
      // a is read as .v4 along K too, unless it is transposed (then element by element).
      const vec = p.k % 4 === 0 && alignedB && (transA || alignedA);
      const variant = { rows, transA, vec, withC: p.withC, epilogue: p.epilogue };
      return { kind: 'dot', variant, swapped, columns, blocks: Math.ceil(columns / DOT_COLUMNS) };
    }
    const vec = columns % 4 === 0 && alignedB;
    const cols = axpyColumns(rows, columns, vec, p.batch, device.multiprocessors);
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
    };
    return { kind: 'axpy', variant, swapped, columns, blocks: Math.ceil(columns / cols) };
  }
  const contiguousA = p.transA ? p.m : p.k;
  const contiguousB = p.transB ? p.k : p.n;
  const tilesOf = (t: MatmulTile) => Math.ceil(p.m / t.bm) * Math.ceil(p.n / t.bn);
  const tile = tilesOf(TILE_LARGE) * p.batch >= device.multiprocessors ? TILE_LARGE : TILE_MID;
  const tilesM = Math.ceil(p.m / tile.bm);
  const tilesN = Math.ceil(p.n / tile.bn);
  const { splits, kPerSplit } = splitK(tilesM * tilesN * p.batch, p, tile, device.multiprocessors);
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
  return {
    kind: 'tile',
    variant: { tile, transA: p.transA, transB: p.transB, vec, withC, ...(epilogue ? { epilogue } : {}) },
    tilesM,
    tilesN,
    splits,
    kPerSplit,
  };
}

/** The least K a split takes: below it the extra pass over the partial sums costs more than it gains. */
export const MIN_SPLIT_K = 256;

/**
 * Splits of K that bring a grid of `blocks` tiles to about two blocks per
 * SM, each split a whole number of tile steps and at least MIN_SPLIT_K long.
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
export function axpyColumns(rows: number, columns: number, vec: boolean, batch: number, sms: number): number {
  const w = vec ? 4 : 1;
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
    const plan = planMatmul(
      {
        batch: count,
        m,
        n,
        k,
        transA: call.transA,
        transB: call.transB,
        withC: c !== undefined,
        ...(epilogue ? { epilogue } : {}),
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
        const withC = ptrs.c !== undefined;
        encoder.launch({
          key: splitSumKey(withC, epilogue),
          module: () => splitSumModule(withC, epilogue),
          entry: SPLIT_SUM_ENTRY,
          grid: gridFor(encoder.device, total),
          block: BLOCK,
          args: {
            parts,
            c: common.c,
            y: ptrs.y,
            total,
            splits: plan.splits,
            alpha: call.alpha,
            beta: call.beta,
            bias: common.bias,
            z: common.z,
            n,
          },
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

export const MATMUL_KERNELS: readonly AnyCudaKernel[] = [
  cudaKernel(matmul, (encoder, { inputs, outputs, attrs }) => {
    const [a, b, c] = inputs;
    const y = outputs[0]!;
    const [m, n] = y.shape as [number, number];
    const k = attrs.transA ? a!.shape[0]! : a!.shape[1]!;
    encodeMatmul(encoder, { kernel: matmul.name, a: a!, b: b!, c, y, batch: 1, m, n, k, ...attrs });
  }),
  cudaKernel(batchedMatmul, (encoder, { inputs, outputs, attrs }) => {
    const [a, b] = inputs;
    const y = outputs[0]!;
    const [batch, m, n] = y.shape as [number, number, number];
    const k = attrs.transA ? a!.shape[1]! : a!.shape[2]!;
    encodeMatmul(encoder, {
      kernel: batchedMatmul.name,
      a: a!,
      b: b!,
      c: undefined,
      y,
      batch,
      m,
      n,
      k,
      beta: 0,
      ...attrs,
    });
  }),
];
