/**
 * Quantized weight formats for decoding: a weight W of [N, K] (a linear
 * layer's [out, in]) stored as small integers and a scale per group of
 * consecutive elements along K. Every backend reads the same bits.
 *
 * Packed data: a u32 tensor of [N, rowWords(K)], row-major, little-endian
 * words. Each row is padded with zero codes to whole blocks of 32 weights
 * (16 bytes of q4, 32 bytes of q8), and q4 rows further to whole groups, so
 * every row starts on a 16-byte boundary and a thread reads whole 16-byte
 * words; nothing reads the padding as weights (x is taken as 0 past K).
 *
 * - `q8`: int8 per output channel, symmetric. Weight k of a row is byte
 *   k % 4 of word k / 4 (bits 8·(k % 4) … +7), two's complement; value =
 *   q · scale[n]. One scale per row: scales are [N, 1].
 * - `q4g32`, `q4g128`: 4 bits per weight, a scale per group of 32 or 128
 *   consecutive k. Weight k of a row is nibble k % 8 of word k / 8 (bits
 *   4·(k % 8) … +3), the lower nibble first, so one 16-byte word holds 32
 *   consecutive weights and a q4g32 group is exactly one 16-byte word.
 *   Without zero points, value = (q − 8) · scale[n, g]; with them, value =
 *   (q − zero[n, g]) · scale[n, g]. Scales are [N, G], G = ceil(K / group).
 *   Zero points are nibbles too, 8 per u32 word, group g at nibble g % 8 of
 *   word g / 8: a u32 tensor of [N, ceil(G / 8)].
 *
 * Scales may be f32, f16 or bf16; `quantizeWeights` stores q8's per-row scale
 * in f32 (N scales cost nothing next to N·K bytes, and f32 keeps the full
 * range of small rows) and q4's group scales in f16, as common 4-bit formats
 * do (2 bytes per 16 already cost 1/8 of the weight bytes at group 32; f16's
 * relative rounding, 2^-11, is far below the 4-bit step).
 */
export const QUANT_FORMATS = ['q8', 'q4g32', 'q4g128'] as const;
export type QuantFormat = (typeof QUANT_FORMATS)[number];

/** Weights per 16-byte word of packed data, the unit every kernel reads. */
export const BLOCK_WEIGHTS = 32;

export interface QuantLayout {
  readonly format: QuantFormat;
  /** Bits per weight: 8 or 4. */
  readonly bits: 8 | 4;
  /** Consecutive k sharing one scale: the whole (padded) row for q8. */
  readonly groupSize: number;
  /** Scale groups per row: 1 for q8, ceil(K / groupSize) for q4. */
  readonly groups: number;
  /** u32 words of packed data per row. */
  readonly rowWords: number;
  /** u32 words of zero-point nibbles per row (q4 only; 0 for q8). */
  readonly zeroWords: number;
  /** Weights per u32 word: 4 or 8. */
  readonly perWord: 4 | 8;
  /** Value of a code without zero points: q − offset (0 for q8, 8 for q4). */
  readonly offset: number;
}

export function isQuantFormat(value: unknown): value is QuantFormat {
  return typeof value === 'string' && (QUANT_FORMATS as readonly string[]).includes(value);
}

/** The layout of a row of K weights in `format`. */
export function quantLayout(format: QuantFormat, k: number): QuantLayout {
  const blocks = Math.ceil(k / BLOCK_WEIGHTS);
  if (format === 'q8') {
    const padded = blocks * BLOCK_WEIGHTS;
    return {
      format,
      bits: 8,
      groupSize: padded,
      groups: 1,
      rowWords: padded / 4,
      zeroWords: 0,
      perWord: 4,
      offset: 0,
    };
  }
  const groupSize = format === 'q4g32' ? 32 : 128;
  const groups = Math.ceil(k / groupSize);
  return {
    format,
    bits: 4,
    groupSize,
    groups,
    rowWords: (groups * groupSize) / 8,
    zeroWords: Math.ceil(groups / 8),
    perWord: 8,
    offset: 8,
  };
}

/** The code of weight (n, k): a signed byte for q8, a nibble 0…15 for q4. */
export function codeAt(packed: ArrayLike<number>, layout: QuantLayout, n: number, k: number): number {
  const word = packed[n * layout.rowWords + Math.floor(k / layout.perWord)]! >>> 0;
  if (layout.bits === 8) return ((word >>> (8 * (k % 4))) << 24) >> 24;
  return (word >>> (4 * (k % 8))) & 0xf;
}

/** The zero point of group g of row n (q4 with zero points only). */
export function zeroAt(zeros: ArrayLike<number>, layout: QuantLayout, n: number, g: number): number {
  return ((zeros[n * layout.zeroWords + (g >> 3)]! >>> 0) >>> (4 * (g % 8))) & 0xf;
}
