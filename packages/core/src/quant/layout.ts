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
 *
 * Group-scaled formats whose values are ggml's (GGUF's Q8_0, Q6_K, Q5_K and Q4_K
 * repacked losslessly; any weight may be quantized to them too). Each value
 * is an f32 formed as ggml forms it, so that a GGUF tensor repacked into
 * them dequantizes to ggml's own values bit for bit:
 * - `q8g32`, `q8g16`: int8 codes laid out as q8's (byte k % 4 of word
 *   k / 4), a scale per group of 32 or 16 consecutive k: value =
 *   f32(q · scale[n, g]). Scales are [N, G], G = ceil(K / group); rows are
 *   padded to whole 32-weight blocks (where K mod 32 is 1 to 16, a q8g16 row
 *   ends in a padding half-block past its last group: kernels take the last
 *   group's scale there, against x of 0). Q8_0 is q8g32
 *   with f16 scales; Q6_K is q8g16 with q − 32 as the code and f32 scales
 *   d · scale (10 bits per weight instead of Q6_K's 6.56: what a kernel
 *   reads stays the int8 of q8).
 * - `q4g32a`: unsigned nibbles laid out as q4g32's, with a scale and an
 *   offset per 32 (no zero points): value = f32(f32(q · scale[n, g]) −
 *   offset[n, g]). Offsets are [N, G] in the scales' dtype. Q4_K is q4g32a
 *   with f32 scales d · sc and offsets dmin · m.
 * - `q8g32a`: int8 codes laid out as q8's, with a scale and an offset per
 *   32, valued as q4g32a's: f32(f32(q · scale[n, g]) − offset[n, g]). The
 *   5-bit ggml types land here exactly: Q5_1 with scales d and offsets −m,
 *   Q5_K with f32 scales d · sc and offsets dmin · m (10 bits per weight
 *   where they store 6 and 5.5: the kernels read the int8 codes of q8;
 *   `q5k` keeps Q5_K at its own bits).
 * - `q4k`: GGUF's Q4_K at its own 4.5 bits per weight. Unsigned nibbles laid
 *   out as q4g32's; per super-block of 256 weights an f16 (or f32, bf16) d in
 *   `scales` and dmin in `offsets` ([N, K / 256] each), and in `zeros` the
 *   super-block's twelve bytes of 6-bit sub-block scales and mins as the
 *   file stores them (three u32 words per super-block: [N, 3 · K / 256]; see
 *   `subBlockScaleMin`). Weight k lies in sub-block j = (k / 32) mod 8 of its
 *   super-block, whose 6-bit sc and m give value = f32(f32(q · f32(d · sc)) −
 *   f32(dmin · m)), ggml's own. K is a multiple of 256 (as GGUF's Q4_K rows
 *   are): other K are refused.
 * - `q6k`: GGUF's Q6_K at its own 6.5625 bits per weight. 6-bit codes q
 *   (0 … 63) split as the file splits them, into a low nibble and a high
 *   pair of bits; per super-block of 256 weights, 48 words of `packed`:
 *   words 0–31 hold the low nibbles laid out as q4g32's (weight i of the
 *   super-block at nibble i % 8 of word i / 8), words 32–47 the high pairs,
 *   word 32 + t holding those of nibble words 2t and 2t + 1: byte b of it
 *   has, at bits 0–1, 2–3, 4–5, 6–7, the high pairs of the four nibbles of
 *   byte b of word 2t and then of word 2t + 1, in order. So a byte mask
 *   (0x0f0f0f0f on a nibble word, 0x30303030 on its shifted high word)
 *   gives four whole codes at once, as ggml's own kernels form them. An f16
 *   (or f32, bf16) d per super-block in `scales` ([N, K / 256]) and, in
 *   `zeros`, its sixteen int8 sub-block scales as the file stores them
 *   (four u32 words per super-block, sub-block j in byte j: [N, 4 · K / 256]).
 *   Weight i lies in sub-block j = i / 16, and value = f32(f32(d · sc_j) ·
 *   (q − 32)), ggml's own. 192 + 16 + 2 bytes per 256 weights, as the
 *   file's 210. K is a multiple of 256: other K are refused.
 * - `q5k`: GGUF's Q5_K at its own 5.5 bits per weight: q4k with one more
 *   bit per code, q = low nibble + 16 · high bit (0 … 31), scales, offsets
 *   and `zeros` exactly as q4k's, value = f32(f32(q · f32(d · sc)) −
 *   f32(dmin · m)). Per super-block of 256 weights, 40 words of `packed`:
 *   words 0–31 the low nibbles laid out as q4g32's, words 32–39 the high
 *   bits, word 32 + j holding those of sub-block j (nibble words 4j … 4j +
 *   3, the 16-byte word a kernel reads): weight i's bit at 8 · ((i mod 8) /
 *   2) + 2 · ((i / 8) mod 4) + i mod 2. So one u32 load gives a 16-byte
 *   word's high bits, and, shifted right by 2 · w for its nibble word w, a
 *   byte mask (0x0f0f0f0f on the nibbles, 0x10101010 on the shifted high
 *   word) gives four whole codes at once, as q6k's high pairs do. 160 + 12
 *   + 4 bytes per 256 weights, as the file's 176. K is a multiple of 256:
 *   other K are refused.
 * - `q5g32`: GGUF's Q5_0 at its own 5.5 bits per weight. 5-bit codes q
 *   (0 … 31) and a scale per 32 (f16 d in the file): value = f32((q − 16) ·
 *   scale[n, g]), ggml's own. A row's `packed` is its low nibbles laid out
 *   as q4g32's (4 words per group, words 0 … 4G − 1), then its high bits, one
 *   word per group (word 4G + g, each bit where q5k puts sub-block j's:
 *   weight i of the group at `q5kHighBit(i)`), padded with zero words to a
 *   whole 16-byte word: rowWords = 4G + 4 · ceil(G / 4). Nibbles first and
 *   the high words apart keep every row, every group's 16 bytes of nibbles
 *   and every 4 groups' high words on 16-byte boundaries (the unit every
 *   kernel loads), where interleaving a word per group would not (20
 *   bytes). Any K, padded as q4g32's (padding codes 16, value 0).
 * - `q5g32a`: GGUF's Q5_1 at its own 6 bits per weight: q5g32's codes and
 *   layout with a scale and an offset per 32, valued as q4g32a's: f32(f32(q ·
 *   scale[n, g]) − offset[n, g]). Q5_1 is q5g32a with scales d and offsets
 *   −m (f16 both, as the file's).
 */
export const QUANT_FORMATS = [
  'q8',
  'q4g32',
  'q4g128',
  'q8g32',
  'q8g16',
  'q4g32a',
  'q8g32a',
  'q4k',
  'q6k',
  'q5k',
  'q5g32',
  'q5g32a',
] as const;
export type QuantFormat = (typeof QUANT_FORMATS)[number];

/** Weights per 16-byte word of packed data, the unit every kernel reads. */
export const BLOCK_WEIGHTS = 32;
/** q4k's super-block (one d, one dmin, eight 6-bit scales and mins) and sub-block (one scale and min). */
export const Q4K_SUPER_BLOCK = 256;
export const Q4K_SUB_BLOCK = 32;
/** u32 words of q4k's 6-bit sub-block scales and mins per super-block. */
export const Q4K_SUB_SCALE_WORDS = 3;
/** q6k's sub-block (one int8 scale) and its words per super-block: of `packed` (low nibbles, then high pairs) and of `zeros`. */
export const Q6K_SUB_BLOCK = 16;
export const Q6K_SUPER_WORDS = 48;
export const Q6K_HIGH_WORDS_AT = 32;
export const Q6K_SCALE_WORDS = 4;
/** q5k's words per super-block of `packed` (32 of low nibbles, then 8 of high bits, one per sub-block of 32). */
export const Q5K_SUPER_WORDS = 40;
export const Q5K_HIGH_WORDS_AT = 32;

/** q5g32's and q5g32a's u32 words of `packed` per row of G groups: 4G of nibbles, then G high words padded to 4. */
export function q5g32RowWords(groups: number): number {
  return 4 * groups + 4 * Math.ceil(groups / 4);
}

export interface QuantLayout {
  readonly format: QuantFormat;
  /** Bits per weight of the codes: 8, 6 (q6k: a nibble and a high pair, see the format), 5 (q5k, q5g32, q5g32a: a nibble and a high bit) or 4. */
  readonly bits: 8 | 6 | 5 | 4;
  /** Consecutive k sharing one entry of `scales`: the whole (padded) row for q8, a super-block for q4k. */
  readonly groupSize: number;
  /** Entries of `scales` per row: 1 for q8, ceil(K / groupSize) otherwise. */
  readonly groups: number;
  /** u32 words of packed data per row. */
  readonly rowWords: number;
  /**
   * u32 words of `zeros` per row: zero-point nibbles (q4g32, q4g128), q4k's
   * 6-bit and q6k's int8 sub-block scales; else 0.
   */
  readonly zeroWords: number;
  /** Weights per u32 word: 4 or 8 (q6k and the 5-bit formats: of their nibble words). */
  readonly perWord: 4 | 8;
  /** Value of a code without zero points: q − offset (0 for q8 and 8-bit groups, 8 for q4, 0 for q4g32a, 16 for q5g32, 32 for q6k). */
  readonly offset: number;
  /** One scale for the whole row (q8); otherwise a scale per group. */
  readonly scalePerRow: boolean;
  /** Takes optional zero-point nibbles (q4g32, q4g128). */
  readonly zeroPoints: boolean;
  /** Takes an offset per group, subtracted after scaling (q4g32a, q8g32a). */
  readonly offsets: boolean;
  /** Values are f32 products formed as ggml forms them (the formats after q4g128); else exact. */
  readonly f32Values: boolean;
  /**
   * q4k, q5k and q6k: rows are whole super-blocks of 256, and `zeros`
   * (required) holds each super-block's sub-block scales: q4k's and q5k's
   * 6-bit scales and mins (a weight's scale and offset are f32(d · sc) and
   * f32(dmin · m) of its 32-weight sub-block), q6k's int8 scales (f32(d · sc) of its 16).
   */
  readonly subBlockScales: boolean;
}

export function isQuantFormat(value: unknown): value is QuantFormat {
  return typeof value === 'string' && (QUANT_FORMATS as readonly string[]).includes(value);
}

/**
 * The codes a layout stores: `lowest` … `lowest + levels`. Offsets (q4g32a,
 * q8g32a) span the group's range over every code (0 … 15, −128 … 127);
 * symmetric int8 keeps −127 … 127; the other 4-bit formats 0 … 15, the 5-bit ones 0 … 31, q6k 0 … 63.
 */
export function codeRange(layout: Pick<QuantLayout, 'bits' | 'offsets'>): { lowest: number; levels: number } {
  if (layout.bits === 4) return { lowest: 0, levels: 15 };
  if (layout.bits === 5) return { lowest: 0, levels: 31 };
  if (layout.bits === 6) return { lowest: 0, levels: 63 };
  return layout.offsets ? { lowest: -128, levels: 255 } : { lowest: -127, levels: 254 };
}

/** The layout of a row of K weights in `format`. */
export function quantLayout(format: QuantFormat, k: number): QuantLayout {
  const blocks = Math.ceil(k / BLOCK_WEIGHTS);
  if (format === 'q8' || format === 'q8g32' || format === 'q8g16' || format === 'q8g32a') {
    const padded = blocks * BLOCK_WEIGHTS;
    const groupSize = format === 'q8' ? padded : format === 'q8g16' ? 16 : 32;
    return {
      format,
      bits: 8,
      groupSize,
      groups: format === 'q8' ? 1 : Math.ceil(k / groupSize),
      rowWords: padded / 4,
      zeroWords: 0,
      perWord: 4,
      offset: 0,
      scalePerRow: format === 'q8',
      zeroPoints: false,
      offsets: format === 'q8g32a',
      f32Values: format !== 'q8',
      subBlockScales: false,
    };
  }
  if (format === 'q4k' || format === 'q5k') {
    const groups = Math.ceil(k / Q4K_SUPER_BLOCK);
    const q5k = format === 'q5k';
    return {
      format,
      bits: q5k ? 5 : 4,
      groupSize: Q4K_SUPER_BLOCK,
      groups,
      rowWords: q5k ? groups * Q5K_SUPER_WORDS : (groups * Q4K_SUPER_BLOCK) / 8,
      zeroWords: Q4K_SUB_SCALE_WORDS * groups,
      perWord: 8,
      offset: 0,
      scalePerRow: false,
      zeroPoints: false,
      offsets: true,
      f32Values: true,
      subBlockScales: true,
    };
  }
  if (format === 'q6k') {
    const groups = Math.ceil(k / Q4K_SUPER_BLOCK);
    return {
      format,
      bits: 6,
      groupSize: Q4K_SUPER_BLOCK,
      groups,
      rowWords: groups * Q6K_SUPER_WORDS,
      zeroWords: Q6K_SCALE_WORDS * groups,
      perWord: 8,
      offset: 32,
      scalePerRow: false,
      zeroPoints: false,
      offsets: false,
      f32Values: true,
      subBlockScales: true,
    };
  }
  const groupSize = format === 'q4g128' ? 128 : 32;
  const groups = Math.ceil(k / groupSize);
  if (format === 'q5g32' || format === 'q5g32a') {
    const affine = format === 'q5g32a';
    return {
      format,
      bits: 5,
      groupSize,
      groups,
      rowWords: q5g32RowWords(groups),
      zeroWords: 0,
      perWord: 8,
      offset: affine ? 0 : 16,
      scalePerRow: false,
      zeroPoints: false,
      offsets: affine,
      f32Values: true,
      subBlockScales: false,
    };
  }
  const asymmetric = format === 'q4g32a';
  return {
    format,
    bits: 4,
    groupSize,
    groups,
    rowWords: (groups * groupSize) / 8,
    zeroWords: asymmetric ? 0 : Math.ceil(groups / 8),
    perWord: 8,
    offset: asymmetric ? 0 : 8,
    scalePerRow: false,
    zeroPoints: !asymmetric,
    offsets: asymmetric,
    f32Values: asymmetric,
    subBlockScales: false,
  };
}

/** The code of weight (n, k): a signed byte for q8, a nibble 0…15 for q4, 0…31 for the 5-bit formats, 0…63 for q6k. */
export function codeAt(packed: ArrayLike<number>, layout: QuantLayout, n: number, k: number): number {
  if (layout.bits === 6) return q6kCode(packed, n * layout.rowWords + Q6K_SUPER_WORDS * (k >> 8), k & 255);
  if (layout.bits === 5 && layout.subBlockScales)
    return q5kCode(packed, n * layout.rowWords + Q5K_SUPER_WORDS * (k >> 8), k & 255);
  if (layout.bits === 5) return q5g32Code(packed, n * layout.rowWords, layout.groups, k);
  const word = packed[n * layout.rowWords + Math.floor(k / layout.perWord)]! >>> 0;
  if (layout.bits === 8) return ((word >>> (8 * (k % 4))) << 24) >> 24;
  return (word >>> (4 * (k % 8))) & 0xf;
}

/** The zero point of group g of row n (q4g32 and q4g128 with zero points only). */
export function zeroAt(zeros: ArrayLike<number>, layout: QuantLayout, n: number, g: number): number {
  return ((zeros[n * layout.zeroWords + (g >> 3)]! >>> 0) >>> (4 * (g % 8))) & 0xf;
}

/**
 * The 6-bit scale and min of sub-block j (0 … 7) of a q4k super-block whose
 * three words start at `words[at]`: ggml's get_scale_min_k4 over the twelve
 * bytes (little-endian words). Sub-blocks 0–3 keep theirs in the low 6 bits
 * of bytes j and j + 4; sub-blocks 4–7 in the nibbles of byte j + 4 with the
 * top 2 bits in bytes j − 4 and j.
 */
export function subBlockScaleMin(words: ArrayLike<number>, at: number, j: number): { sc: number; m: number } {
  const byte = (b: number) => ((words[at + (b >> 2)]! >>> 0) >>> (8 * (b & 3))) & 0xff;
  if (j < 4) return { sc: byte(j) & 63, m: byte(j + 4) & 63 };
  const low = byte(j + 4);
  return { sc: (low & 0xf) | ((byte(j - 4) >> 6) << 4), m: (low >> 4) | ((byte(j) >> 6) << 4) };
}

/**
 * The 6-bit code (0 … 63) of weight i (0 … 255) of a q6k super-block whose
 * 48 words start at `packed[at]`: its low nibble, and its high pair from
 * byte (i mod 8) / 2 of word 32 + i / 16 at bit 2 · (2 · ((i / 8) mod 2) + i mod 2).
 */
export function q6kCode(packed: ArrayLike<number>, at: number, i: number): number {
  const low = ((packed[at + (i >> 3)]! >>> 0) >>> (4 * (i & 7))) & 0xf;
  const shift = 8 * ((i & 7) >> 1) + 2 * (2 * ((i >> 3) & 1) + (i & 1));
  const high = ((packed[at + Q6K_HIGH_WORDS_AT + (i >> 4)]! >>> 0) >>> shift) & 3;
  return low | (high << 4);
}

/** The int8 scale of sub-block j (0 … 15) of a q6k super-block whose four `zeros` words start at `words[at]`. */
export function q6kSubBlockScale(words: ArrayLike<number>, at: number, j: number): number {
  return (((words[at + (j >> 2)]! >>> 0) >>> (8 * (j & 3))) << 24) >> 24;
}

/** The bit of q5k's high word 32 + i / 32 that holds weight i's (0 … 255) high bit (see the format). */
export function q5kHighBit(i: number): number {
  return 8 * ((i & 7) >> 1) + 2 * ((i >> 3) & 3) + (i & 1);
}

/** The 5-bit code (0 … 31) of weight i (0 … 255) of a q5k super-block whose 40 words start at `packed[at]`. */
export function q5kCode(packed: ArrayLike<number>, at: number, i: number): number {
  const low = ((packed[at + (i >> 3)]! >>> 0) >>> (4 * (i & 7))) & 0xf;
  const high = ((packed[at + Q5K_HIGH_WORDS_AT + (i >> 5)]! >>> 0) >>> q5kHighBit(i)) & 1;
  return low | (high << 4);
}

/** The 5-bit code (0 … 31) of weight k of a q5g32 (q5g32a) row of G groups whose words start at `packed[at]`. */
export function q5g32Code(packed: ArrayLike<number>, at: number, groups: number, k: number): number {
  const low = ((packed[at + (k >> 3)]! >>> 0) >>> (4 * (k & 7))) & 0xf;
  const high = ((packed[at + 4 * groups + (k >> 5)]! >>> 0) >>> q5kHighBit(k & 31)) & 1;
  return low | (high << 4);
}
