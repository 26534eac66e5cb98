import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { blockInverseRms } from './foldedNorm.js';
import { below } from './gemv.js';
import { type FloatStorage, halfToF32, loadAsF32, STORAGE_BYTES } from './storage.js';

// x as the int8 GEMVs read it (quantizedGemvInt8.ts): each block copies the
// rows of x it needs into shared memory (cp.async, every copy in flight at
// once) and quantizes them there per block of 32 elements, d = max|x| · f32(1/127)
// and q = round(x / d), as llama.cpp's q8_1 does. The blocks of a row lie
// one after another, 32 bytes each, and 4-bit formats keep the even elements
// of each 8 in one word and the odd ones in the next, as a code word's low
// and high nibbles lie; beside them each block's d and its −zero·Σq (codes
// centred on zero: 8, or 16 for 5-bit ones) or d·Σq (codes with offsets).

const THREADS = 256;
const WARPS = THREADS / 32;
/** Elements of x per int8 block (one scale each). */
export const X_BLOCK = 32;
/** Shared bytes per block of x and row: 32 codes, d, and −zero·Σq or d·Σq. */
const X_BLOCK_BYTES = X_BLOCK + 8;

/** Dynamic shared bytes for `rows` rows of x of length `k`: the int8 blocks, and x itself where staged. */
export function qgemvInt8SharedBytes(
  rows: number,
  k: number,
  staged: { actBytes: number } | undefined,
): number {
  return rows * Math.ceil(k / X_BLOCK) * X_BLOCK_BYTES + (staged ? rows * k * staged.actBytes : 0);
}

/** Where a block's int8 x lies in shared memory: row r's block b at xBase + r·xRowBytes + 32b, its d and z at 4·(r·xBlocks + b) from dBase and zBase. */
export interface Int8X {
  readonly xBase: R32;
  readonly xRowBytes: R32;
  readonly xBlocks: R32;
  readonly dBase: R32;
  readonly zBase: R32;
  /** With a folded norm: each row's 1 / sqrt(mean(x²) + eps), which scales its sums. */
  readonly invRms: readonly F32[] | undefined;
}

/**
 * An rmsNorm folded into the product (core's foldedNorm.ts): x · weight is
 * quantized instead of x, and each row's sums are scaled by its inverse RMS.
 */
export interface FoldedNorm {
  /** The norm's weight [K], stored as x is. */
  readonly weight: R64;
  readonly eps: F32;
}

/**
 * Fills the dynamic shared memory at `shared` with x's rows row0 … +R as
 * int8 blocks (staged first where `staged`: x itself lies at the start,
 * R·K·actBytes bytes, the blocks after it) and waits for the block's threads.
 */
export function int8X(
  k: KernelBuilder,
  o: {
    readonly shared: R32;
    readonly staged: boolean;
    readonly x: R64;
    readonly act: FloatStorage;
    readonly rows: number;
    readonly row0: R32;
    readonly lastM: R32;
    readonly kDim: R32;
    readonly tid: R32;
    readonly q4: boolean;
    /** The value codes are centred on (8, 16), or 0: their blocks keep −zero·Σq. */
    readonly zero: number;
    readonly offsetted: boolean;
    readonly norm?: FoldedNorm;
  },
): Int8X {
  const actBytes = STORAGE_BYTES[o.act];
  const xBlocks = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), o.kDim, X_BLOCK - 1), X_BLOCK);
  const xBase = o.staged ? k.madLo('u32', k.reg('u32'), o.kDim, o.rows * actBytes, o.shared) : o.shared;
  const xRowBytes = k.mulLo('u32', k.reg('u32'), xBlocks, X_BLOCK);
  const dBase = k.madLo('u32', k.reg('u32'), xRowBytes, o.rows, xBase);
  const zBase = k.madLo('u32', k.reg('u32'), xBlocks, o.rows * 4, dBase);
  const squares = quantizeX(k, {
    ...o,
    actBytes,
    stage: o.staged ? o.shared : undefined,
    xBlocks,
    shared: { codes: xBase, d: dBase, z: zBase },
  });
  k.barSync();
  const invRms = squares
    ? blockInverseRms(k, squares, { tid: o.tid, kDim: o.kDim, eps: o.norm!.eps, warps: WARPS })
    : undefined;
  return { xBase, xRowBytes, xBlocks, dBase, zBase, invRms };
}

/**
 * x's rows row0 … +R (rows past M read row M − 1) as int8 blocks of 32 in
 * shared memory: `codes` holds each row's blocks (32 bytes each; 4-bit
 * formats keep the even elements of each 8 in one word and the odd ones in
 * the next), `d` each block's max|x| / 127 and `z` its −zero·Σq (centred
 * codes) or d·Σq (offsets). Thread t takes quarter t mod 4 (8 elements) of a
 * block; the four lanes of a block meet through shuffles.
 */
function quantizeX(
  k: KernelBuilder,
  o: {
    readonly x: R64;
    readonly act: FloatStorage;
    readonly actBytes: number;
    /** Where x is staged, if it is. */
    readonly stage: R32 | undefined;
    readonly rows: number;
    readonly row0: R32;
    readonly lastM: R32;
    readonly kDim: R32;
    readonly xBlocks: R32;
    readonly tid: R32;
    readonly shared: { readonly codes: R32; readonly d: R32; readonly z: R32 };
    readonly q4: boolean;
    /** The value codes are centred on (8, 16), or 0: their blocks keep −zero·Σq. */
    readonly zero: number;
    readonly offsetted: boolean;
    readonly norm?: FoldedNorm;
  },
): F32[] | undefined {
  if (o.stage) stageX(k, { ...o, stage: o.stage });
  // With a norm: this thread's sums of x² per row (of the raw x), and x · weight quantized.
  const squares = o.norm ? Array.from({ length: o.rows }, () => k.mov('f32', k.reg('f32'), 0)) : undefined;
  const lastK = o.norm ? k.sub('u32', k.reg('u32'), o.kDim, 1) : undefined;
  const quarters = k.mulLo('u32', k.reg('u32'), o.xBlocks, 4 * o.rows);
  // Every lane runs every round (the shuffles need the whole warp); those past the end neither read nor write.
  const rounds = k.mulLo(
    'u32',
    k.reg('u32'),
    k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), quarters, THREADS - 1), THREADS),
    THREADS,
  );
  const perRow = k.mulLo('u32', k.reg('u32'), o.xBlocks, 4);
  const q = k.reg('u32');
  k.forRange(q, 0, rounds, THREADS, () => {
    const item = k.add('u32', k.reg('u32'), q, o.tid);
    const inside = below(k, item, quarters);
    const r = k.div('u32', k.reg('u32'), item, perRow);
    const rem = k.sub('u32', k.reg('u32'), item, k.mulLo('u32', k.reg('u32'), r, perRow));
    const first = k.shl('b32', k.reg('u32'), rem, 3);
    const values = k.regs('f32', 8);
    if (o.stage) {
      // Quarter `item` of the staged rows starts at element 8·item (K is a multiple of 32).
      for (const v of values) k.mov('f32', v, 0);
      const at = k.madLo('u32', k.reg('u32'), item, 8 * o.actBytes, o.stage);
      k.predicated(inside, () => loadSharedAsF32(k, o.act, values, at));
    } else {
      const row = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), o.row0, r), o.lastM);
      const at = k.elementAddress(o.x, k.madLo('u32', k.reg('u32'), row, o.kDim, first), o.actBytes);
      values.forEach((value, j) => {
        const ok = k.and(
          'pred',
          k.reg('pred'),
          inside,
          below(k, k.add('u32', k.reg('u32'), first, j), o.kDim),
        );
        loadAsF32(k, o.act, [value], addr(at, j * o.actBytes), { ok });
      });
    }
    if (o.norm) {
      // Values past K or past the rows are 0: they add nothing, whatever weight they meet.
      const square = k.mov('f32', k.reg('f32'), 0);
      for (const v of values) k.fma('f32', square, v, v, square);
      squares!.forEach((sum, rr) => {
        const mine = k.setp('eq', 'u32', k.reg('pred'), r, rr);
        k.add('f32', sum, sum, k.selp('f32', k.reg('f32'), square, 0, mine), { rnd: 'rn' });
      });
      values.forEach((v, j) => {
        const at = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), first, j), lastK!);
        const g = k.reg('f32');
        loadAsF32(k, o.act, [g], k.elementAddress(o.norm!.weight, at, o.actBytes));
        k.mul('f32', v, v, g, { rnd: 'rn' });
      });
    }
    quantizeQuarter(k, o, { item, inside, r, rem, values });
  });
  return squares;
}

/**
 * x's rows row0 … +R (rows past M copy row M − 1) into shared memory at
 * `stage`, 16 bytes a copy: every copy is issued before any is awaited.
 */
function stageX(
  k: KernelBuilder,
  o: {
    readonly x: R64;
    readonly actBytes: number;
    readonly rows: number;
    readonly row0: R32;
    readonly lastM: R32;
    readonly kDim: R32;
    readonly tid: R32;
    readonly stage: R32;
  },
): void {
  const perRow = k.shr('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), o.kDim, o.actBytes), 4);
  const pieces = k.mulLo('u32', k.reg('u32'), perRow, o.rows);
  const piece = k.reg('u32');
  k.forRange(piece, o.tid, pieces, THREADS, () => {
    const r = k.div('u32', k.reg('u32'), piece, perRow);
    const inRow = k.sub('u32', k.reg('u32'), piece, k.mulLo('u32', k.reg('u32'), r, perRow));
    const row = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), o.row0, r), o.lastM);
    const src = k.elementAddress(o.x, k.madLo('u32', k.reg('u32'), row, perRow, inRow), 16);
    k.cpAsync('cg', k.madLo('u32', k.reg('u32'), piece, 16, o.stage), src, 16);
  });
  k.cpAsyncWaitAll();
  k.barSync();
}

/** Eight consecutive elements of `type` at shared address `at` (16-byte aligned), as f32. */
function loadSharedAsF32(k: KernelBuilder, type: FloatStorage, values: readonly F32[], at: R32): void {
  if (type === 'f32') {
    k.ldShared('f32', values.slice(0, 4) as unknown as Vec4<F32>, at);
    k.ldShared('f32', values.slice(4, 8) as unknown as Vec4<F32>, addr(at, 16));
    return;
  }
  const words = k.regs('u32', 4);
  k.ldShared('b32', words as unknown as Vec4<R32>, at);
  words.forEach((word, i) => {
    k.mov('f32', values[2 * i]!, halfToF32(k, type, word, false));
    k.mov('f32', values[2 * i + 1]!, halfToF32(k, type, word, true));
  });
}

/** One thread's quarter of a block of x: its 8 codes stored, and the block's d and z by its first quarter. */
function quantizeQuarter(
  k: KernelBuilder,
  o: {
    readonly xBlocks: R32;
    readonly shared: { readonly codes: R32; readonly d: R32; readonly z: R32 };
    readonly q4: boolean;
    /** The value codes are centred on (8, 16), or 0: their blocks keep −zero·Σq. */
    readonly zero: number;
    readonly offsetted: boolean;
  },
  { item, inside, r, rem, values }: { item: R32; inside: Pred; r: R32; rem: R32; values: readonly F32[] },
): void {
  const amax = k.mov('f32', k.reg('f32'), 0);
  for (const value of values) k.max('f32', amax, amax, k.abs('f32', k.reg('f32'), value), { nan: true });
  for (const offset of [1, 2])
    k.max('f32', amax, amax, k.shflSync('bfly', k.reg('f32'), amax, offset), { nan: true });
  // d = max · f32(1/127): one division a block (the inverse's), not two.
  const d = k.mul('f32', k.reg('f32'), amax, Math.fround(1 / 127), { rnd: 'rn' });
  // 127 / max, or 0 for a block of zeros (its codes are then 0).
  const inverse = k.div('f32', k.reg('f32'), 127, amax, 'rn');
  const zero = k.setp('eq', 'f32', k.reg('pred'), amax, 0);
  k.selp('f32', inverse, 0, inverse, zero);
  const codes = values.map((value) =>
    k.cvt('s32', 'f32', k.reg('u32'), k.mul('f32', k.reg('f32'), value, inverse, { rnd: 'rn' }), {
      rnd: 'rni',
    }),
  );
  // Four codes in one word's bytes, first in the lowest.
  const pack = (a: R32, b: R32, c: R32, e: R32) =>
    k.prmt(k.reg('u32'), k.prmt(k.reg('u32'), a, b, 0x0040), k.prmt(k.reg('u32'), c, e, 0x0040), 0x5410);
  const [c0, c1, c2, c3, c4, c5, c6, c7] = codes as [R32, R32, R32, R32, R32, R32, R32, R32];
  const words = o.q4
    ? [pack(c0, c2, c4, c6), pack(c1, c3, c5, c7)]
    : [pack(c0, c1, c2, c3), pack(c4, c5, c6, c7)];
  // Block b = rem / 4 of row r: its codes at (r·blocks + b)·32 + quarter·8, its d and z at (r·blocks + b)·4.
  const entry = k.add(
    'u32',
    k.reg('u32'),
    k.mulLo('u32', k.reg('u32'), r, o.xBlocks),
    k.shr('u32', k.reg('u32'), rem, 2),
  );
  k.predicated(inside, () =>
    k.stShared('b32', k.madLo('u32', k.reg('u32'), item, 8, o.shared.codes), words as unknown as Vec2<R32>),
  );
  // Σq over the block: −zero·Σq for centred codes, Σ x̃ = d·Σq for offsets.
  let z: R32 | F32 | undefined;
  if (o.zero > 0 || o.offsetted) {
    const sum = k.mov('b32', k.reg('u32'), 0);
    for (const code of codes) k.add('s32', sum, sum, code);
    for (const offset of [1, 2]) k.add('s32', sum, sum, k.shflSync('bfly', k.reg('u32'), sum, offset));
    z =
      o.zero > 0
        ? k.mulLo('s32', k.reg('u32'), sum, -o.zero)
        : k.mul('f32', k.reg('f32'), k.cvt('f32', 's32', k.reg('f32'), sum, { rnd: 'rn' }), d, { rnd: 'rn' });
  }
  const lead = k.and(
    'pred',
    k.reg('pred'),
    inside,
    k.setp('eq', 'u32', k.reg('pred'), k.and('b32', k.reg('u32'), rem, 3), 0),
  );
  k.predicated(lead, () => {
    const at4 = k.mulLo('u32', k.reg('u32'), entry, 4);
    k.stShared('f32', k.add('u32', k.reg('u32'), at4, o.shared.d), d);
    if (z) k.stShared('b32', k.add('u32', k.reg('u32'), at4, o.shared.z), z);
  });
}
