import { InvalidArgumentError, type MatmulTile } from '@rayo/core';
import type { Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { PRODUCT_PARAMS, productDims } from './common.js';
import { loadParams } from './entryParams.js';
import {
  batchBase,
  below,
  biasAndActivation,
  type Epilogue,
  epilogueKey,
  type RowTypes,
  scaleAndAdd,
} from './gemv.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES, storageKey, storesOf } from './storage.js';
import { groupedTile } from './tileOrder.js';

// The tiled matrix product: each block computes a tile of y from
// double-buffered shared tiles of a and b, each thread a register micro-tile.

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
  /** Storage of a, b and the outputs (c, bias, z with y); all f32 when absent. Halves are widened on their way to shared memory. */
  readonly types?: RowTypes;
}

export function tileKey(v: TileVariant): string {
  const { bm, bn, bk, tm, tn } = v.tile;
  const layout = `${v.transA ? 't' : 'n'}${v.transB ? 't' : 'n'}`;
  const c = v.withC ? '/c' : '';
  const types = v.types ? storageKey([v.types.a, v.types.b, v.types.out]) : '';
  return `matmul/tile${bm}x${bn}x${bk}_${tm}x${tn}/${layout}/${v.vec ? 'v4' : 'scalar'}${c}${epilogueKey(v.epilogue)}${types}`;
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
      operation: 'matmul',
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
  readonly type: FloatStorage;
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
  const bytes = STORAGE_BYTES[op.type];
  const leadBytes = op.kInner
    ? k.mulWide('u32', k.reg('u64'), p.lead, bytes)
    : k.mulWide('u32', k.reg('u64'), k.mulLo('u32', k.reg('u32'), p.lead, op.ld), bytes);
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
    const ptr = k.sub('u64', k.reg('u64'), k.elementAddress(op.base, element, bytes), leadBytes);
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
      loadAsF32(k, op.type, slice.regs, ptr, { ok: k.and('pred', k.reg('pred'), inK(0), inside[0]!) });
      continue;
    }
    for (let j = 0; j < 4; j++) {
      const ok = op.kInner
        ? k.and('pred', k.reg('pred'), inK(j), inside[0]!)
        : k.and('pred', k.reg('pred'), inK(0), inside[j]!);
      loadAsF32(k, op.type, [slice.regs[j]!], addr(ptr, j * bytes), { ok });
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
function loadSlices(
  k: KernelBuilder,
  type: FloatStorage,
  slices: readonly Slice[],
  more: Pred,
  vec: boolean,
) {
  for (const s of slices) {
    const ok = s.inside.map((inside) => k.and('pred', k.reg('pred'), inside, more));
    if (type !== 'f32') {
      // Halves go through word registers and a conversion, which loadAsF32 does (zeroing what it skips).
      if (vec) loadAsF32(k, type, s.regs, s.ptr, { ok: ok[0]! });
      else {
        s.regs.forEach((r, j) => {
          loadAsF32(k, type, [r], addr(s.ptr, j * 2), { ok: ok[ok.length === 1 ? 0 : j]! });
        });
      }
      continue;
    }
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
  const types = v.types ?? { a: 'f32', b: 'f32', out: 'f32' };
  const outBytes = STORAGE_BYTES[types.out];
  const m = new PtxModule();
  m.entry(
    TILE_ENTRY,
    {
      a: 'ptr',
      b: 'ptr',
      strideA: 'u32',
      strideB: 'u32',
      kPerSplit: 'u32',
      splitStride: 'u32',
      bias: 'ptr',
      z: 'ptr',
      ...PRODUCT_PARAMS,
    },
    (k, p) => {
      const { mDim, nDim, kDim, tilesM, tilesN } = productDims(k, p);
      const tiles = k.sharedArray('tiles', 'f32', (2 * bufferBytes) / 4, 16);
      const sharedBase = k.sharedAddress(tiles);
      const tid = k.tid();

      const { row0, col0 } = groupedTile(k, tilesM, tilesN, t.bm, t.bn);

      const z = k.ctaid('z');
      // Split K: block y takes [y · kPerSplit, y · kPerSplit + kLength) of K.
      const split = k.ctaid('y');
      const kPerSplit = k.ldParam(p.kPerSplit);
      const kBegin = k.mulLo('u32', k.reg('u32'), split, kPerSplit);
      const kLength = k.min('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), kDim, kBegin), kPerSplit);
      /** The operand's base moved to k = kBegin. */
      const splitBase = (base: R64, kInner: boolean, ld: R32, type: FloatStorage) =>
        k.elementAddress(
          base,
          kInner ? kBegin : k.mulLo('u32', k.reg('u32'), kBegin, ld),
          STORAGE_BYTES[type],
        );
      const opA: TileOperand = {
        base: splitBase(
          batchBase(k, k.globalPointer(p.a), z, k.ldParam(p.strideA), STORAGE_BYTES[types.a]),
          !v.transA,
          v.transA ? mDim : kDim,
          types.a,
        ),
        type: types.a,
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
          batchBase(k, k.globalPointer(p.b), z, k.ldParam(p.strideB), STORAGE_BYTES[types.b]),
          v.transB,
          v.transB ? kDim : nDim,
          types.b,
        ),
        type: types.b,
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
      const stepOf = (op: TileOperand): R64 | number => {
        const bytes = STORAGE_BYTES[op.type];
        return op.kInner ? t.bk * bytes : k.mulWide('u32', k.reg('u64'), op.ld, t.bk * bytes);
      };
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
        loadSlices(k, types.a, slicesA, more, v.vec);
        loadSlices(k, types.b, slicesB, more, v.vec);
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
      const { alpha, beta } = loadParams(k, p, 'alpha', 'beta');
      // Splits write their partial sums to consecutive blocks of y (scratch memory then).
      const yBase = k.elementAddress(
        batchBase(k, k.globalPointer(p.y), z, k.ldParam(p.strideY), outBytes),
        k.mulLo('u32', k.reg('u32'), split, k.ldParam(p.splitStride)),
        outBytes,
      );
      const cBase = v.withC
        ? batchBase(k, k.globalPointer(p.c), z, k.ldParam(p.strideY), outBytes)
        : undefined;
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
        const biasCols = k.elementAddress(k.globalPointer(p.bias), colFirst, outBytes);
        for (let q = 0; q < quadsN; q++) {
          biasRegs.push(
            groups.map((js, g) => {
              const regs = k.regs('f32', js.length);
              loadAsF32(k, types.out, regs, addr(biasCols, (q * quadStrideN + js[0]!) * outBytes), {
                ok: colOk[q]![g]!,
              });
              return regs;
            }),
          );
        }
      }
      const zBase = e?.z ? batchBase(k, k.globalPointer(p.z), z, k.ldParam(p.strideY), outBytes) : undefined;
      const rowFirst = k.madLo('u32', k.reg('u32'), ty, 4, row0);
      for (let i = 0; i < t.tm; i++) {
        const row = k.add('u32', k.reg('u32'), rowFirst, (i >> 2) * quadStrideM + (i & 3));
        const rowOk = below(k, row, mDim);
        const element = k.madLo('u32', k.reg('u32'), row, nDim, colFirst);
        const yRow = k.elementAddress(yBase, element, outBytes);
        const cRow = cBase ? k.elementAddress(cBase, element, outBytes) : undefined;
        const zRow = zBase ? k.elementAddress(zBase, element, outBytes) : undefined;
        for (let q = 0; q < quadsN; q++) {
          const values = acc[i]!.slice(q * 4, q * 4 + 4);
          const offset = q * quadStrideN * outBytes;
          groups.forEach((js, g) => {
            const ok = k.and('pred', k.reg('pred'), rowOk, colOk[q]![g]!);
            const at = offset + js[0]! * outBytes;
            const c = k.regs('f32', js.length);
            if (cRow) loadAsF32(k, types.out, c, addr(cRow, at), { ok });
            const out = js.map((j, x) =>
              biasAndActivation(
                k,
                e,
                scaleAndAdd(k, values[j]!, alpha, cRow ? { beta, c: c[x]! } : undefined),
                biasRegs[q]?.[g]?.[x],
              ),
            );
            const storeZ = zRow
              ? storesOf(
                  k,
                  types.out,
                  out.map((o) => o.z),
                )
              : undefined;
            const storeY = storesOf(
              k,
              types.out,
              out.map((o) => o.y),
            );
            k.predicated(ok, () => {
              if (zRow) storeZ?.(addr(zRow, at));
              storeY(addr(yRow, at));
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
