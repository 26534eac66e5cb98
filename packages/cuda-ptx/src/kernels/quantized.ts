import {
  DEFAULT_QGEMV_VARIANT,
  FLOAT,
  InvalidArgumentError,
  isQgemvFormat,
  type QuantFormat,
  type QuantLayout,
  quantizedMatmul,
  quantLayout,
} from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type KernelEncoder, type Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { checkElementCount } from './common.js';
import { below, warpColumn, warpSum } from './gemv.js';
import { encodeQuantizedGemv } from './quantizedGemv.js';
import {
  type FloatStorage,
  loadAsF32,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// quantizedMatmul: y = x · dequant(W)ᵀ (+ beta · c) with W [N, K] stored as
// int8 or 4-bit codes (core's quant/layout.ts has the bits). Decoding reads
// the codes once, so the small-M kernel is shaped around them: warp w of a
// block owns output column n, its lanes read the row's 16-byte words (16
// int8 or 32 nibbles each) with `.v4` loads through the non-coherent cache,
// the block stages the matching x in shared memory, each lane turns its
// codes into exact f32s in registers (the code ORed into the mantissa of
// 2^23, then 2^23 + zero subtracted: no int-to-float convert), and the
// warp sums its lanes with shuffles. Group-scaled formats sum each 16-byte
// word before its group scale multiplies it (q8g16's words are one group,
// q8g32's two words one); q8 scales the row's sum once; q4g32a also sums
// the word's x and subtracts offset · Σx. More rows of x
// go to a tiled kernel that dequantizes a 64-column × 32-k tile of W into
// shared memory per step and computes a 64 × 64 tile of y from it.

/** Threads per block of both kernels. */
const THREADS = 256;
const WARPS = THREADS / 32;
/** The most rows of x the streaming kernel takes; more go to the tiled kernel. */
export const QUANT_DOT_MAX_ROWS = 4;
export const QUANT_DOT_ENTRY = 'quantized_dot';
export const QUANT_TILE_ENTRY = 'quantized_tile';

/** 2^23 as f32 bits: a code c ORed into its mantissa reads as 2^23 + c. */
const MAGIC_BITS = 0x4b000000;
const MAGIC = 2 ** 23;

export interface QuantVariant {
  readonly format: QuantFormat;
  /** Zero points per group (q4 only). */
  readonly zeros: boolean;
  /** Adds beta · c. */
  readonly withC: boolean;
  /** Storage of x, c and y, and of the scales. */
  readonly types: { readonly act: FloatStorage; readonly scale: FloatStorage };
}

export interface QuantDotVariant extends QuantVariant {
  /** Rows of x per block, 1 to QUANT_DOT_MAX_ROWS. */
  readonly rows: number;
  /** x read in `.v4`-sized pieces: K a multiple of 32 and x 16-byte aligned; else element by element. */
  readonly vecX: boolean;
}

function variantName(v: QuantVariant): string {
  return `${v.format}${v.zeros ? '/zeros' : ''}${v.withC ? '/c' : ''}${storageKey([v.types.act, v.types.scale])}`;
}

export function quantDotKey(v: QuantDotVariant): string {
  return `quantized/dot/m${v.rows}/${v.vecX ? 'v4' : 'scalar'}/${variantName(v)}`;
}

export function quantTileKey(v: QuantVariant): string {
  return `quantized/tile64x64x32/${variantName(v)}`;
}

/** Both kernels take the same parameters. */
const PARAMS = {
  x: 'ptr',
  packed: 'ptr',
  scales: 'ptr',
  zeros: 'ptr',
  c: 'ptr',
  y: 'ptr',
  offsets: 'ptr',
  m: 'u32',
  n: 'u32',
  k: 'u32',
  beta: 'f32',
} as const;

function layoutOf(format: QuantFormat): QuantLayout {
  // Word counts depend on K (a kernel parameter); bits and group size do not.
  return quantLayout(format, 1);
}

/** The row's u32 words, scale groups and zero words for K in a register (see quantLayout). */
function rowGeometry(k: KernelBuilder, layout: QuantLayout, kDim: R32) {
  // Rows are whole 32-weight blocks (and whole q4 groups).
  const unit = layout.bits === 8 ? 32 : layout.groupSize;
  const units = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, unit - 1), unit);
  const rowWords = k.mulLo('u32', k.reg('u32'), units, unit / layout.perWord);
  const groups = layout.scalePerRow
    ? undefined
    : layout.bits === 4
      ? units
      : k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, layout.groupSize - 1), layout.groupSize);
  const zeroWords =
    groups && layout.zeroPoints
      ? k.shr('u32', k.reg('u32'), k.add('u32', k.reg('u32'), groups, 7), 3)
      : undefined;
  return { rowWords, groups, zeroWords };
}

/**
 * The scale group of the 8-aligned run of weights that starts at weight `at`
 * of a row: at / groupSize, clamped to the last group (a q8g16 row's padding
 * half-block lies past it; x is 0 there).
 */
function groupAt(k: KernelBuilder, layout: QuantLayout, at: R32, groups: R32): R32 {
  const g = k.shr('u32', k.reg('u32'), at, Math.log2(layout.groupSize));
  if (layout.bits === 4) return g;
  return k.min('u32', g, g, k.sub('u32', k.reg('u32'), groups, 1));
}

/**
 * The codes of `word` less `bias` (2^23 + the zero point) as exact f32: 4
 * signed bytes (q8, bias 2^23 + 128 after flipping each byte's sign bit) or
 * 8 nibbles (q4), the lowest first.
 */
function codesOf(k: KernelBuilder, layout: QuantLayout, word: R32, bias: F32 | number): F32[] {
  const mask = layout.bits === 8 ? 0xff : 0xf;
  return Array.from({ length: layout.perWord }, (_, j) => {
    const shifted = j === 0 ? word : k.shr('b32', k.reg('u32'), word, j * layout.bits);
    let bits = k.and('b32', k.reg('u32'), shifted, mask);
    if (layout.bits === 8) bits = k.xor('b32', k.reg('u32'), bits, 0x80);
    k.or('b32', bits, bits, MAGIC_BITS);
    const value = k.mov('b32', k.reg('f32'), bits);
    return k.sub('f32', value, value, bias, { rnd: 'rn' });
  });
}

/** The zero point of group `g` of a row whose zero words start at `zeroRow`, as 2^23 + zero. */
function zeroBias(k: KernelBuilder, zeros: R64, zeroRow: R32, g: R32): F32 {
  const at = k.add('u32', k.reg('u32'), zeroRow, k.shr('u32', k.reg('u32'), g, 3));
  const word = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(zeros, at, 4), { nc: true });
  const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), g, 7), 2);
  const nibble = k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), word, shift), 0xf);
  const bias = k.cvt('f32', 'u32', k.reg('f32'), nibble, { rnd: 'rn' });
  return k.add('f32', bias, bias, MAGIC, { rnd: 'rn' });
}

/** The bias of codes without zero points: 2^23 (+ 128 for q8's flipped sign bit, + 8 for q4's centre, + 0 for q4g32a). */
function fixedBias(layout: QuantLayout): number {
  return MAGIC + (layout.bits === 8 ? 128 : layout.offset);
}

function checkRows(rows: number): void {
  if (!Number.isInteger(rows) || rows < 1 || rows > QUANT_DOT_MAX_ROWS) {
    throw new InvalidArgumentError('the quantized streaming kernel takes at most QUANT_DOT_MAX_ROWS rows', {
      operation: quantizedMatmul.name,
      argument: 'rows',
      expected: `an integer from 1 to ${QUANT_DOT_MAX_ROWS}`,
      actual: String(rows),
    });
  }
}

function checkZeros(v: QuantVariant): void {
  if (v.zeros && !layoutOf(v.format).zeroPoints) {
    throw new InvalidArgumentError(`${v.format} has no zero points`, {
      operation: quantizedMatmul.name,
      argument: 'zeros',
      expected: 'zero points with q4g32 and q4g128 only',
      actual: v.format,
    });
  }
}

/** Stores y(row, col) = sum (+ beta · c). */
function storeOutput(
  k: KernelBuilder,
  v: QuantVariant,
  out: { y: R64; c: R64; beta: F32; n: R32 },
  row: R32,
  col: R32,
  sum: F32,
): void {
  const bytes = STORAGE_BYTES[v.types.act];
  const index = k.madLo('u32', k.reg('u32'), row, out.n, col);
  let value = sum;
  if (v.withC) {
    const c = loadOneAsF32(k, v.types.act, k.elementAddress(out.c, index, bytes));
    value = k.fma('f32', k.reg('f32'), out.beta, c, sum);
  }
  storeFromF32(k, v.types.act, k.elementAddress(out.y, index, bytes), value);
}

/**
 * Warp w of block x owns column n = x · 8 + w for every row of x (up to
 * QUANT_DOT_MAX_ROWS). The block walks K in tiles of 32 code words per
 * row: lane l reads word l of the tile (its codes, scale and zero point),
 * the block stages the tile's x in shared memory (coalesced, widened to f32,
 * 0 past K), and lane l reads its word's 32 (q4) or 16 (q8) x values from
 * there. In global memory those lie 64 or 128 bytes apart from lane to lane,
 * which would cost a cache line per lane and load; in shared memory each
 * lane's 16-byte units are XOR-swizzled so that a `.v4` read of 8 lanes
 * touches 8 different bank groups. The warp's shuffles give every lane
 * every row's sum, and lane r stores row r.
 */
export function quantDotModule(v: QuantDotVariant): PtxModule {
  checkRows(v.rows);
  checkZeros(v);
  const layout = layoutOf(v.format);
  const { act, scale } = v.types;
  const actBytes = STORAGE_BYTES[act];
  const scaleBytes = STORAGE_BYTES[scale];
  /** Weights per 16-byte code word, 16-byte units of x per word, x elements per tile. */
  const perChunk = 4 * layout.perWord;
  const units = perChunk / 4;
  const tileElems = 32 * perChunk;
  /** Lanes of one 8-lane phase of a `.v4` shared read that share a chunk's 8-unit bank cycle. */
  const lanesPerCycle = 8 / units;
  const m = new PtxModule();
  m.entry(
    QUANT_DOT_ENTRY,
    PARAMS,
    (k, p) => {
      const n = k.ldParam(p.n);
      const kDim = k.ldParam(p.k);
      const rowsTotal = k.ldParam(p.m);
      const xTile = k.sharedArray('xTile', 'f32', v.rows * tileElems, 16);
      const base = k.sharedAddress(xTile);
      const { tid, lane, col } = warpColumn(k, WARPS);
      const { rowWords, groups, zeroWords } = rowGeometry(k, layout, kDim);
      const chunks = k.shr('u32', k.reg('u32'), rowWords, 2);
      // Columns past N read the last row of W (never stored): every warp takes part in the barriers.
      const wRow = k.min('u32', k.reg('u32'), col, k.sub('u32', k.reg('u32'), n, 1));
      const lastRow = k.sub('u32', k.reg('u32'), rowsTotal, 1);
      const x = k.globalPointer(p.x);
      const xRows: R64[] = Array.from({ length: v.rows }, (_, r) => {
        const row = k.min('u32', k.reg('u32'), k.mov('u32', k.reg('u32'), r), lastRow);
        return k.elementAddress(x, k.mulLo('u32', k.reg('u32'), row, kDim), actBytes);
      });
      const wPtr = k.elementAddress(
        k.globalPointer(p.packed),
        k.madLo('u32', k.reg('u32'), wRow, rowWords, k.shl('b32', k.reg('u32'), lane, 2)),
        4,
      );
      const scales = k.globalPointer(p.scales);
      const zeros = k.globalPointer(p.zeros);
      const offsets = k.globalPointer(p.offsets);
      const scaleRow = groups ? k.mulLo('u32', k.reg('u32'), wRow, groups) : wRow;
      const zeroRow = zeroWords ? k.mulLo('u32', k.reg('u32'), wRow, zeroWords) : undefined;
      // Where lane l finds unit j of its word: l · units + (j XOR swizzle), swizzle = (l / lanesPerCycle) mod units.
      const swizzle = k.and(
        'b32',
        k.reg('u32'),
        k.shr('u32', k.reg('u32'), lane, Math.log2(lanesPerCycle)),
        units - 1,
      );
      const laneBase = k.madLo('u32', k.reg('u32'), lane, units * 16, base);
      const unitAt = Array.from({ length: units }, (_, j) =>
        k.madLo('u32', k.reg('u32'), k.xor('b32', k.reg('u32'), swizzle, j), 16, laneBase),
      );
      // Staging: thread t widens x elements 4t … 4t + 3 of the tile (q8 tiles take half the threads).
      const stager = k.shl('b32', k.reg('u32'), tid, 2);
      const stageUnit = tid;
      const stageLane = k.shr('u32', k.reg('u32'), stageUnit, Math.log2(units));
      const stageSwizzle = k.and(
        'b32',
        k.reg('u32'),
        k.shr('u32', k.reg('u32'), stageLane, Math.log2(lanesPerCycle)),
        units - 1,
      );
      const stageAt = k.madLo(
        'u32',
        k.reg('u32'),
        k.or(
          'b32',
          k.reg('u32'),
          k.and('b32', k.reg('u32'), stageUnit, ~(units - 1) >>> 0),
          k.xor('b32', k.reg('u32'), k.and('b32', k.reg('u32'), stageUnit, units - 1), stageSwizzle),
        ),
        16,
        base,
      );
      const stages = below(k, stager, tileElems);
      const acc = k.regs('f32', v.rows);
      for (const a of acc) k.mov('f32', a, 0);
      // A tile's code word, scale and zero point are loaded one tile ahead, so
      // that they are in flight while the tile before is staged and summed.
      // negOffset: q4g32a's −offset of the word's group.
      type TileCodes = { words: R32[]; s: F32; bias: F32; negOffset: F32 };
      const tileCodes = (): TileCodes => ({
        words: k.regs('u32', 4),
        s: k.reg('f32'),
        bias: k.reg('f32'),
        negOffset: k.reg('f32'),
      });
      const loadTile = (c: R32, into: TileCodes) => {
        for (const w of into.words) k.mov('b32', w, 0);
        k.predicated(below(k, c, chunks), () => {
          k.ldGlobal('b32', into.words as unknown as Vec4<R32>, wPtr, { nc: true });
        });
        k.add('u64', wPtr, wPtr, 32 * 16);
        if (layout.scalePerRow) return;
        // The group of the word's first weight (c · perChunk); past the row, the last word's.
        const last = k.min('u32', k.reg('u32'), c, k.sub('u32', k.reg('u32'), chunks, 1));
        const g = groupAt(k, layout, k.mulLo('u32', k.reg('u32'), last, perChunk), groups!);
        const at = k.add('u32', k.reg('u32'), scaleRow, g);
        k.mov('f32', into.s, loadOneAsF32(k, scale, k.elementAddress(scales, at, scaleBytes)));
        if (v.zeros) k.mov('f32', into.bias, zeroBias(k, zeros, zeroRow!, g));
        if (layout.offsets) {
          const offset = loadOneAsF32(k, scale, k.elementAddress(offsets, at, scaleBytes));
          k.neg('f32', into.negOffset, offset);
        }
      };
      const current = tileCodes();
      loadTile(lane, current);
      const first = k.reg('u32');
      k.forRange(first, 0, chunks, 32, () => {
        const next = tileCodes();
        loadTile(k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), first, 32), lane), next);
        const { words } = current;
        const s = layout.scalePerRow ? undefined : current.s;
        const bias: F32 | number = v.zeros ? current.bias : fixedBias(layout);
        k.barSync(); // the previous tile's x has been read
        k.ifThen(stages, () => {
          const kk = k.madLo('u32', k.reg('u32'), first, perChunk, stager);
          xRows.forEach((xRow, r) => {
            const xs = k.regs('f32', 4);
            const at = k.elementAddress(xRow, kk, actBytes);
            if (v.vecX) loadAsF32(k, act, xs, at, { ok: below(k, kk, kDim) });
            else {
              xs.forEach((reg, j) => {
                const inside = below(k, k.add('u32', k.reg('u32'), kk, j), kDim);
                loadAsF32(k, act, [reg], addr(at, j * actBytes), { ok: inside });
              });
            }
            k.stShared('f32', addr(stageAt, r * tileElems * 4), xs as unknown as Vec4<F32>);
          });
        });
        k.barSync();
        const sums = layout.scalePerRow ? acc : acc.map(() => k.mov('f32', k.reg('f32'), 0));
        // q4g32a: Σx of the word, which its offset multiplies.
        const xSums = layout.offsets ? acc.map(() => k.mov('f32', k.reg('f32'), 0)) : undefined;
        words.forEach((word, i) => {
          const codes = codesOf(k, layout, word, bias);
          for (let r = 0; r < v.rows; r++) {
            // Word i of the chunk covers units i · perWord / 4 … of the lane's x.
            for (let q = 0; q < layout.perWord / 4; q++) {
              const xs = k.regs('f32', 4);
              const unit = (i * layout.perWord) / 4 + q;
              k.ldShared('f32', xs as unknown as Vec4<F32>, addr(unitAt[unit]!, r * tileElems * 4));
              for (let j = 0; j < 4; j++) k.fma('f32', sums[r]!, codes[q * 4 + j]!, xs[j]!, sums[r]!);
              if (xSums)
                for (let j = 0; j < 4; j++) k.add('f32', xSums[r]!, xSums[r]!, xs[j]!, { rnd: 'rn' });
            }
          }
        });
        if (s) {
          const scaleOf = s;
          sums.forEach((sum, r) => {
            k.fma('f32', acc[r]!, sum, scaleOf, acc[r]!);
          });
        }
        xSums?.forEach((xSum, r) => {
          k.fma('f32', acc[r]!, xSum, current.negOffset, acc[r]!);
        });
        current.words.forEach((w, i) => {
          k.mov('b32', w, next.words[i]!);
        });
        if (!layout.scalePerRow) k.mov('f32', current.s, next.s);
        if (v.zeros) k.mov('f32', current.bias, next.bias);
        if (layout.offsets) k.mov('f32', current.negOffset, next.negOffset);
      });
      for (const a of acc) warpSum(k, [a]);
      const rowScale = layout.scalePerRow
        ? loadOneAsF32(k, scale, k.elementAddress(scales, wRow, scaleBytes))
        : undefined;
      const out = { y: k.globalPointer(p.y), c: k.globalPointer(p.c), beta: k.ldParam(p.beta), n };
      // Lane r stores row r, so the stores go out in parallel.
      acc.forEach((a, r) => {
        const row = k.mov('u32', k.reg('u32'), r);
        const mine = k.and(
          'pred',
          k.reg('pred'),
          k.and('pred', k.reg('pred'), k.setp('eq', 'u32', k.reg('pred'), lane, r), below(k, row, rowsTotal)),
          below(k, col, n),
        );
        k.ifThen(mine, () => {
          const sum = rowScale ? k.mul('f32', k.reg('f32'), a, rowScale, { rnd: 'rn' }) : a;
          storeOutput(k, v, out, row, col, sum);
        });
      });
    },
    { maxThreadsPerBlock: THREADS, minBlocksPerSm: v.rows === 1 ? 4 : v.rows === 2 ? 2 : 1 },
  );
  return m;
}

// ---- tiled: more rows -----------------------------------------------------------

const TILE_M = 64;
const TILE_N = 64;
const TILE_K = 32;
/** Shared rows padded by 4 floats: `.v4` reads stay aligned and transposing stores spread over banks. */
const PITCH_M = TILE_M + 4;
const PITCH_N = TILE_N + 4;

/**
 * Block (x, y) computes y[64y … +64, 64x … +64], thread t a 4 × 4 micro-tile
 * (rows 4 · (t / 16), columns 4 · (t % 16)). Each 32-k step stages x as
 * xs[k][m] (thread t: row t / 4, k 8 · (t % 4) … +8) and W dequantized as
 * ws[k][n] (thread t: column t / 4, its quarter of the column's 32 codes),
 * then every thread takes 32 steps of 4 + 4 shared values and 16 FMAs.
 */
export function quantTileModule(v: QuantVariant): PtxModule {
  checkZeros(v);
  const layout = layoutOf(v.format);
  const { act, scale } = v.types;
  const actBytes = STORAGE_BYTES[act];
  const scaleBytes = STORAGE_BYTES[scale];
  /** u32 words of one column's 32 codes each thread takes: 1 nibble word or 2 byte words. */
  const wordsPerThread = layout.bits === 8 ? 2 : 1;
  const m = new PtxModule();
  m.entry(
    QUANT_TILE_ENTRY,
    PARAMS,
    (k, p) => {
      const mDim = k.ldParam(p.m);
      const n = k.ldParam(p.n);
      const kDim = k.ldParam(p.k);
      const xs = k.sharedArray('xs', 'f32', TILE_K * PITCH_M, 16);
      const ws = k.sharedArray('ws', 'f32', TILE_K * PITCH_N, 16);
      const xBase = k.sharedAddress(xs);
      const wBase = k.sharedAddress(ws);
      const tid = k.tid();
      const row0 = k.mulLo('u32', k.reg('u32'), k.ctaid('y'), TILE_M);
      const col0 = k.mulLo('u32', k.reg('u32'), k.ctaid(), TILE_N);
      const { rowWords, groups, zeroWords } = rowGeometry(k, layout, kDim);
      const quarter = k.and('b32', k.reg('u32'), tid, 3);

      // Staging x: row t / 4 of the tile, k 8 · (t % 4) … +8 of the step; rows past M read as 0.
      const xRow = k.add('u32', k.reg('u32'), row0, k.shr('u32', k.reg('u32'), tid, 2));
      const xRowOk = below(k, xRow, mDim);
      const xPtr = k.elementAddress(
        k.globalPointer(p.x),
        k.madLo('u32', k.reg('u32'), xRow, kDim, k.shl('b32', k.reg('u32'), quarter, 3)),
        actBytes,
      );
      const xAt = k.madLo(
        'u32',
        k.reg('u32'),
        k.shl('b32', k.reg('u32'), quarter, 3),
        PITCH_M * 4,
        k.madLo('u32', k.reg('u32'), k.shr('u32', k.reg('u32'), tid, 2), 4, xBase),
      );
      const xK = k.shl('b32', k.reg('u32'), quarter, 3);

      // Staging W: column t / 4 (clamped to N − 1: read, never stored), its codes
      // 8 · (t % 4) … +8 (q4: word t % 4 of the step's 16 bytes; q8: words 2 · (t % 4) and +1).
      const wCol = k.min(
        'u32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), col0, k.shr('u32', k.reg('u32'), tid, 2)),
        k.sub('u32', k.reg('u32'), n, 1),
      );
      const wPtr = k.elementAddress(
        k.globalPointer(p.packed),
        k.madLo('u32', k.reg('u32'), wCol, rowWords, k.mulLo('u32', k.reg('u32'), quarter, wordsPerThread)),
        4,
      );
      const wAt = k.madLo(
        'u32',
        k.reg('u32'),
        k.shl('b32', k.reg('u32'), quarter, 3),
        PITCH_N * 4,
        k.madLo('u32', k.reg('u32'), k.shr('u32', k.reg('u32'), tid, 2), 4, wBase),
      );
      const scales = k.globalPointer(p.scales);
      const zeros = k.globalPointer(p.zeros);
      const offsets = k.globalPointer(p.offsets);
      const scaleRow = groups ? k.mulLo('u32', k.reg('u32'), wCol, groups) : wCol;
      const zeroRow = zeroWords ? k.mulLo('u32', k.reg('u32'), wCol, zeroWords) : undefined;
      const rowScale = layout.scalePerRow
        ? loadOneAsF32(k, scale, k.elementAddress(scales, wCol, scaleBytes))
        : undefined;

      const ty = k.shr('u32', k.reg('u32'), tid, 4);
      const tx = k.and('b32', k.reg('u32'), tid, 15);
      const readX = k.madLo('u32', k.reg('u32'), ty, 16, xBase);
      const readW = k.madLo('u32', k.reg('u32'), tx, 16, wBase);
      const acc = Array.from({ length: 4 }, () => k.regs('f32', 4));
      for (const row of acc) for (const r of row) k.mov('f32', r, 0);

      const kStep = k.reg('u32');
      k.forRange(kStep, 0, kDim, TILE_K, () => {
        // x: 8 consecutive k of one row, 0 past K and past M.
        const xv = k.regs('f32', 8);
        xv.forEach((reg, j) => {
          const kk = k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kStep, xK), j);
          const ok: Pred = k.and('pred', k.reg('pred'), xRowOk, below(k, kk, kDim));
          loadAsF32(k, act, [reg], addr(xPtr, j * actBytes), { ok });
          k.stShared('f32', addr(xAt, j * PITCH_M * 4), reg);
        });
        k.add('u64', xPtr, xPtr, TILE_K * actBytes);
        // W: this thread's codes, dequantized with their group's scale (and zero point).
        const words = k.regs('u32', wordsPerThread);
        if (wordsPerThread === 2) k.ldGlobal('b32', words as unknown as Vec2<R32>, wPtr, { nc: true });
        else k.ldGlobal('b32', words[0]!, wPtr, { nc: true });
        k.add('u64', wPtr, wPtr, (TILE_K / layout.perWord) * 4);
        let s: F32;
        let bias: F32 | number = fixedBias(layout);
        let offset: F32 | undefined;
        if (rowScale) s = rowScale;
        else {
          // The group of this thread's 8 codes (a q8g16 step holds two groups).
          const g = groupAt(k, layout, k.add('u32', k.reg('u32'), kStep, xK), groups!);
          const at = k.add('u32', k.reg('u32'), scaleRow, g);
          s = loadOneAsF32(k, scale, k.elementAddress(scales, at, scaleBytes));
          if (v.zeros) bias = zeroBias(k, zeros, zeroRow!, g);
          if (layout.offsets) offset = loadOneAsF32(k, scale, k.elementAddress(offsets, at, scaleBytes));
        }
        const codes = words.flatMap((word) => codesOf(k, layout, word, bias));
        codes.forEach((code, j) => {
          // ggml's value: f32(q · scale) (− offset, rounded again, for q4g32a).
          const w = k.mul('f32', k.reg('f32'), code, s, { rnd: 'rn' });
          if (offset) k.sub('f32', w, w, offset, { rnd: 'rn' });
          k.stShared('f32', addr(wAt, j * PITCH_N * 4), w);
        });
        k.barSync();
        for (let kk = 0; kk < TILE_K; kk++) {
          const a = k.regs('f32', 4);
          const b = k.regs('f32', 4);
          k.ldShared('f32', a as unknown as Vec4<F32>, addr(readX, kk * PITCH_M * 4));
          k.ldShared('f32', b as unknown as Vec4<F32>, addr(readW, kk * PITCH_N * 4));
          for (let i = 0; i < 4; i++) {
            for (let j = 0; j < 4; j++) k.fma('f32', acc[i]![j]!, a[i]!, b[j]!, acc[i]![j]!);
          }
        }
        k.barSync();
      });

      const out = { y: k.globalPointer(p.y), c: k.globalPointer(p.c), beta: k.ldParam(p.beta), n };
      const outRow0 = k.madLo('u32', k.reg('u32'), ty, 4, row0);
      const outCol0 = k.madLo('u32', k.reg('u32'), tx, 4, col0);
      acc.forEach((values, i) => {
        const row = k.add('u32', k.reg('u32'), outRow0, i);
        values.forEach((value, j) => {
          const col = k.add('u32', k.reg('u32'), outCol0, j);
          const inside = k.and('pred', k.reg('pred'), below(k, row, mDim), below(k, col, n));
          k.ifThen(inside, () => storeOutput(k, v, out, row, col, value));
        });
      });
    },
    { maxThreadsPerBlock: THREADS, minBlocksPerSm: 2 },
  );
  return m;
}

const aligned16 = (ptr: bigint) => ptr % 16n === 0n;

function encodeQuantized(
  encoder: KernelEncoder,
  inputs: readonly (Operand | undefined)[],
  y: Operand,
  attrs: { format: QuantFormat; beta: number },
): void {
  const [x, packed, scales, zeros, c, offsets] = inputs;
  const [m, kDim] = x!.shape as [number, number];
  const n = y.shape[1]!;
  if (m === 0 || n === 0) return;
  checkElementCount(quantizedMatmul.name, 'x', x!.size);
  checkElementCount(quantizedMatmul.name, 'packed', packed!.size * 8);
  checkElementCount(quantizedMatmul.name, 'y', y.size);
  const variant: QuantVariant = {
    format: attrs.format,
    zeros: zeros !== undefined,
    withC: c !== undefined,
    types: { act: storageOf(x!), scale: storageOf(scales!) },
  };
  const args = {
    x: x!,
    packed: packed!,
    scales: scales!,
    // Unused without them; any valid address.
    zeros: zeros ?? packed!,
    c: c ?? y,
    y,
    offsets: offsets ?? scales!,
    m,
    n,
    k: kDim,
    beta: attrs.beta,
  };
  // Small M: quantizedGemv.ts's kernel for 4-bit weights, this file's for
  // int8 (on an H100, 1×4096×4096: q4g32 8.8 against 8.5 µs, but the decode
  // shapes 1×2048×5632 6.5 against 8.2 µs and 1×5632×2048 7.3 against 9.4;
  // q8 14.8 against 10.8), unless the qgemvVariant option picks one ('a': this file's).
  const gemv = encoder.tuning.qgemvVariant ?? (attrs.format === 'q8' ? 'a' : DEFAULT_QGEMV_VARIANT);
  if (m <= QUANT_DOT_MAX_ROWS && gemv !== 'a' && isQgemvFormat(attrs.format)) {
    const weight = { packed: packed!, scales: scales!, zeros };
    encodeQuantizedGemv(encoder, gemv, { x: x!, weights: [weight], c, y }, attrs);
    return;
  }
  if (m <= QUANT_DOT_MAX_ROWS) {
    const dot: QuantDotVariant = {
      ...variant,
      rows: m,
      vecX: kDim % 32 === 0 && aligned16(x!.ptr),
    };
    encoder.launch({
      key: quantDotKey(dot),
      module: () => quantDotModule(dot),
      entry: QUANT_DOT_ENTRY,
      grid: [Math.ceil(n / WARPS), 1, 1],
      block: THREADS,
      args,
    });
    return;
  }
  encoder.launch({
    key: quantTileKey(variant),
    module: () => quantTileModule(variant),
    entry: QUANT_TILE_ENTRY,
    grid: [Math.ceil(n / TILE_N), Math.ceil(m / TILE_M), 1],
    block: THREADS,
    args,
  });
}

export const QUANTIZED_KERNELS: readonly AnyCudaKernel[] = [
  cudaKernel(
    quantizedMatmul,
    (encoder, { inputs, outputs, attrs }) => {
      encodeQuantized(encoder, inputs, outputs[0]!, attrs);
    },
    // x, c and y in f32, f16 or bf16; scales in any of them (widened as loaded, summed in f32).
    { dtypes: FLOAT },
  ),
];
