import {
  InvalidArgumentError,
  Q4K_SUB_SCALE_WORDS,
  Q5K_SUPER_WORDS,
  Q6K_SCALE_WORDS,
  Q6K_SUPER_WORDS,
  type QuantFormat,
  type QuantLayout,
  quantizedMatmul,
  quantLayout,
} from '@rayo/core';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32, R32, R64 } from '../ptx/operands.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES, storageKey, storeFromF32 } from './storage.js';

// What both quantizedMatmul kernels share (quantized.ts has their design):
// the variant and its keys, the parameters, and codes turned into exact f32s.

/** Threads per block of both kernels. */
export const THREADS = 256;
export const WARPS = THREADS / 32;
/** The most rows of x the streaming kernel takes; more go to the tiled kernel. */
export const QUANT_DOT_MAX_ROWS = 4;
export const QUANT_DOT_ENTRY = 'quantized_dot';
export const QUANT_TILE_ENTRY = 'quantized_tile';

/** 2^23 as f32 bits: a code c ORed into its mantissa reads as 2^23 + c. */
export const MAGIC_BITS = 0x4b000000;
export const MAGIC = 2 ** 23;

export interface QuantVariant {
  readonly format: QuantFormat;
  /** Zero points per group (q4g32 and q4g128 only; q4k's sub-block scales come with its format). */
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
  /**
   * An rmsNorm folded in (NORM_PARAMS): x · normWeight staged instead of x,
   * its stagers summing x², each row's sums scaled by its inverse RMS.
   */
  readonly norm?: boolean;
}

function variantName(v: QuantVariant): string {
  return `${v.format}${v.zeros ? '/zeros' : ''}${v.withC ? '/c' : ''}${storageKey([v.types.act, v.types.scale])}`;
}

export function quantDotKey(v: QuantDotVariant): string {
  return `quantized/dot/m${v.rows}/${v.vecX ? 'v4' : 'scalar'}${v.norm ? '/norm' : ''}/${variantName(v)}`;
}

export function quantTileKey(v: QuantVariant): string {
  return `quantized/tile64x64x32/${variantName(v)}`;
}

/** Both kernels take the same parameters. */
export const PARAMS = {
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

/** PARAMS and a folded norm's weight (stored as x) and eps. */
export const NORM_PARAMS = { ...PARAMS, normWeight: 'ptr', eps: 'f32' } as const;

export function layoutOf(format: QuantFormat): QuantLayout {
  // Word counts depend on K (a kernel parameter); bits and group size do not.
  return quantLayout(format, 1);
}

/** The row's u32 words, scale groups and zero words (q4k, q5k, q6k: sub-block scale words) for K in a register (see quantLayout). */
export function rowGeometry(k: KernelBuilder, layout: QuantLayout, kDim: R32) {
  // Rows are whole 32-weight blocks (and whole q4 groups, whole q6k and q5k super-blocks of 48 and 40 words).
  const unit = layout.bits === 8 ? 32 : layout.groupSize;
  const units = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, unit - 1), unit);
  const unitWords =
    layout.bits === 6 ? Q6K_SUPER_WORDS : layout.bits === 5 ? Q5K_SUPER_WORDS : unit / layout.perWord;
  // q5g32, q5g32a: 4 nibble words per group, then a high word per group padded to whole 16-byte words.
  const rowWords = isQ5g32(layout)
    ? k.add(
        'u32',
        k.reg('u32'),
        k.shl('b32', k.reg('u32'), units, 2),
        k.and('b32', k.reg('u32'), k.add('u32', k.reg('u32'), units, 3), ~3 >>> 0),
      )
    : k.mulLo('u32', k.reg('u32'), units, unitWords);
  const groups = layout.scalePerRow
    ? undefined
    : layout.bits !== 8
      ? units
      : k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, layout.groupSize - 1), layout.groupSize);
  const zeroWords = !groups
    ? undefined
    : layout.subBlockScales
      ? k.mulLo('u32', k.reg('u32'), groups, layout.bits === 6 ? Q6K_SCALE_WORDS : Q4K_SUB_SCALE_WORDS)
      : layout.zeroPoints
        ? k.shr('u32', k.reg('u32'), k.add('u32', k.reg('u32'), groups, 7), 3)
        : undefined;
  return { rowWords, groups, zeroWords };
}

/** q5g32 and q5g32a: 5-bit codes in groups of 32 (q5k's are in super-blocks). */
export function isQ5g32(layout: QuantLayout): boolean {
  return layout.bits === 5 && !layout.subBlockScales;
}

/**
 * The scale group of the 8-aligned run of weights that starts at weight `at`
 * of a row: at / groupSize, clamped to the last group (a q8g16 row's padding
 * half-block lies past it; x is 0 there).
 */
export function groupAt(k: KernelBuilder, layout: QuantLayout, at: R32, groups: R32): R32 {
  const g = k.shr('u32', k.reg('u32'), at, Math.log2(layout.groupSize));
  if (layout.bits === 4 || layout.bits === 5) return g;
  return k.min('u32', g, g, k.sub('u32', k.reg('u32'), groups, 1));
}

/**
 * The codes of `word` less `bias` (2^23 + the zero point) as exact f32: 4
 * signed bytes (q8, bias 2^23 + 128 after flipping each byte's sign bit) or
 * 8 nibbles (q4), the lowest first.
 */
export function codesOf(k: KernelBuilder, layout: QuantLayout, word: R32, bias: F32 | number): F32[] {
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
export function zeroBias(k: KernelBuilder, zeros: R64, zeroRow: R32, g: R32): F32 {
  const at = k.add('u32', k.reg('u32'), zeroRow, k.shr('u32', k.reg('u32'), g, 3));
  const word = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(zeros, at, 4), { nc: true });
  const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), g, 7), 2);
  const nibble = k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), word, shift), 0xf);
  const bias = k.cvt('f32', 'u32', k.reg('f32'), nibble, { rnd: 'rn' });
  return k.add('f32', bias, bias, MAGIC, { rnd: 'rn' });
}

/** The bias of codes without zero points: 2^23 (+ 128 for q8's flipped sign bit, + 8 for q4's centre, + 16 for q5g32's, + 0 for q4g32a). */
export function fixedBias(layout: QuantLayout): number {
  return MAGIC + (layout.bits === 8 ? 128 : layout.offset);
}

export function checkRows(rows: number): void {
  if (!Number.isInteger(rows) || rows < 1 || rows > QUANT_DOT_MAX_ROWS) {
    throw new InvalidArgumentError('the quantized streaming kernel takes at most QUANT_DOT_MAX_ROWS rows', {
      operation: quantizedMatmul.name,
      argument: 'rows',
      expected: `an integer from 1 to ${QUANT_DOT_MAX_ROWS}`,
      actual: String(rows),
    });
  }
}

export function checkZeros(v: QuantVariant): void {
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
export function storeOutput(
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
