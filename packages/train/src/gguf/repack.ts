import {
  type Backend,
  DTypeError,
  f16BitsToF32,
  type QuantFormat,
  type QuantizedHostWeight,
  type QuantizedWeight,
  q5g32RowWords,
  quantLayout,
  type Shape,
  ShapeError,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import { q5kValues, q5Values } from './dequantize.js';
import {
  GGML_TYPES,
  type GgmlQuantizedType,
  type GgmlType,
  isGgmlQuantizedType,
  wholeBlocks,
} from './ggmlTypes.js';

/** One quantized tensor of a GGUF file, as a repack receives it. */
export interface GgufQuantizedTensor {
  /** Its name in the GGUF file, e.g. `blk.0.attn_q.weight`. */
  readonly name: string;
  /** The decoder's (Hugging Face) name of the weight, e.g. `model.layers.0.self_attn.q_proj.weight`. */
  readonly weight: string;
  readonly type: GgmlType;
  /** As stored, innermost first: `dims[0]` is the row length (the input features of a projection). */
  readonly dims: readonly number[];
  /** Outermost first: [out, in] for a projection, [vocab, hidden] for the embedding. */
  readonly shape: Shape;
  /**
   * The stored blocks, one row after another, in the decoder's row order:
   * the rows of Q and K already moved back from llama.cpp's RoPE layout.
   */
  readonly bytes: Uint8Array;
}

/** A weight on the device in a quantized kernel's format: its named parts (values, scales, …). */
export interface RepackedWeight {
  /** The kernel format, e.g. `q8` or `q4`. */
  readonly format: string;
  /** The logical shape, outermost first. */
  readonly shape: Shape;
  readonly tensors: Readonly<Record<string, Tensor>>;
}

/**
 * Turns the raw blocks of one quantized tensor into device tensors in the
 * format the quantized kernels read: the blocks uploaded as they are where
 * the layout suits the kernels, otherwise repacked once at load. Never
 * dequantized to f32 on the host.
 */
export type GgufRepack = (
  backend: Backend,
  tensor: GgufQuantizedTensor,
) => RepackedWeight | Tensor | Promise<RepackedWeight | Tensor>;

/** The repack used until the quantized kernels land: a DTypeError naming the tensor and its type. */
export const refuseQuantized: GgufRepack = (_backend, tensor) => {
  throw new DTypeError(
    `quantized GGUF tensors need the quantized kernels: '${tensor.name}' is ${tensor.type}`,
    {
      operation: 'loadGgufLlama',
      argument: tensor.name,
      expected: "F32, F16 or BF16, or a 'repack' option that puts quantized blocks in a kernel's format",
      actual: tensor.type,
    },
  );
};

// ---- host repacks of whole blocks (pure functions over bytes; no device) ----------------------

function blocksOf(type: GgmlQuantizedType, bytes: Uint8Array): number {
  return wholeBlocks(type, bytes.length, 'bytes', `repack${type}`);
}

const q = new Uint8Array(256);

/** Symmetric int8 groups: element i is `values[i] · f16(scales[i / groupSize])`. */
export interface Int8Groups {
  readonly groupSize: number;
  readonly values: Int8Array;
  /** f16 words, one per group. */
  readonly scales: Uint16Array;
}

/** 4-bit groups with a zero point of 8: element i is `(q_i − 8) · f16(scales[i / groupSize])`. */
export interface Int4Groups {
  readonly groupSize: number;
  /** Element 2k in the low nibble of byte k, element 2k+1 in its high nibble. */
  readonly nibbles: Uint8Array;
  /** f16 words, one per group. */
  readonly scales: Uint16Array;
}

/** Q8_0 as int8 values and one f16 scale per 32: the block's d and q split apart, losslessly. */
export function repackQ8_0(bytes: Uint8Array): Int8Groups {
  const blocks = blocksOf('Q8_0', bytes);
  const values = new Int8Array(blocks * 32);
  const scales = new Uint16Array(blocks);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(values.buffer);
  for (let b = 0, at = 0, v = 0; b < blocks; b++, at += 34, v += 32) {
    scales[b] = from.getUint16(at, true);
    for (let j = 0; j < 32; j += 4) to.setUint32(v + j, from.getUint32(at + 2 + j, true), true);
  }
  return { groupSize: 32, values, scales };
}

/**
 * Two 4-bit fields of each of the 4 bytes of `word` (little-endian), at bit
 * `shift` (0: low nibbles, 4: high): byte 2j's as the low nibble and byte
 * 2j+1's as the high nibble of byte j of the 16-bit result.
 */
function nibblePairs(word: number, shift: number): number {
  const n = (word >>> shift) & 0x0f0f0f0f;
  const t = n | (n >>> 4);
  return (t & 0xff) | ((t >>> 8) & 0xff00);
}

/**
 * The `count` (a multiple of 8) stored bytes at `at` of `from`, whose low
 * nibbles hold elements 0..count−1 and high nibbles count..2·count−1, as
 * sequential nibbles at `out` of `to` (elements 2k and 2k+1 in byte k), a
 * word at a time: low nibbles of bytes 2k, 2k+1 make byte k, high ones
 * byte count/2 + k.
 */
function packHalves(from: DataView, at: number, count: number, to: DataView, out: number): void {
  for (let i = 0; i < count; i += 8) {
    const w0 = from.getUint32(at + i, true);
    const w1 = from.getUint32(at + i + 4, true);
    to.setUint32(out + i / 2, nibblePairs(w0, 0) | (nibblePairs(w1, 0) << 16), true);
    to.setUint32(out + count / 2 + i / 2, nibblePairs(w0, 4) | (nibblePairs(w1, 4) << 16), true);
  }
}

/**
 * Q4_0 as sequential nibbles and one f16 scale per 32, losslessly: ggml
 * keeps element j and j+16 in one byte; here elements 2k and 2k+1 share
 * byte k, so that a kernel reads a group's values in order. Read and
 * written a word at a time: a whole model's blocks pass through here.
 */
export function repackQ4_0(bytes: Uint8Array): Int4Groups {
  const blocks = blocksOf('Q4_0', bytes);
  const nibbles = new Uint8Array(blocks * 16);
  const scales = new Uint16Array(blocks);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(nibbles.buffer);
  for (let b = 0, at = 0, out = 0; b < blocks; b++, at += 18, out += 16) {
    scales[b] = from.getUint16(at, true);
    packHalves(from, at + 2, 16, to, out);
  }
  return { groupSize: 32, nibbles, scales };
}

/**
 * Unsigned 4-bit groups with an offset: element i is
 * `q_i · scales[g] − offsets[g]` with g = i / groupSize, in f32 parameters.
 */
export interface Uint4OffsetGroups {
  readonly groupSize: number;
  /** Element 2k in the low nibble of byte k, element 2k+1 in its high nibble. */
  readonly nibbles: Uint8Array;
  readonly scales: Float32Array;
  readonly offsets: Float32Array;
}

/**
 * Q4_K as sequential nibbles with an f32 scale (d·sc) and offset (dmin·m)
 * per 32: the products ggml forms itself, so the values are the same bit
 * for bit. The f16 group scales of `Int4Groups` cannot hold them exactly
 * (and have no offset), so a symmetric 4-bit kernel would need a lossy
 * requantization instead.
 */
export function repackQ4_K(bytes: Uint8Array): Uint4OffsetGroups {
  const nibbles = new Uint8Array(blocksOf('Q4_K', bytes) * 128);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(nibbles.buffer);
  const { scales, offsets } = superBlockScales('Q4_K', bytes, (at, b) => q4kNibbles(from, at, to, b));
  return { groupSize: 32, nibbles, scales, offsets };
}

/** Block b's 256 codes (at byte `at`) in sequence: each 64 elements are 32 stored bytes, low nibbles first (see `q4kValues`). */
function q4kNibbles(from: DataView, at: number, to: DataView, b: number): void {
  for (let j = 0; j < 4; j++) packHalves(from, at + 16 + 32 * j, 32, to, b * 128 + 32 * j);
}

/**
 * Q4_K as core's `q4k`, at the file's own 4.5 bits per weight: the codes in
 * sequence (as `repackQ4_K` gives them), and each block's f16 d and dmin and
 * its twelve bytes of 6-bit scales and mins exactly as stored.
 */
export interface Q4KSuperBlocks {
  /** Element 2k in the low nibble of byte k, element 2k+1 in its high nibble. */
  readonly nibbles: Uint8Array;
  /** f16 words, one per block of 256. */
  readonly d: Uint16Array;
  readonly dmin: Uint16Array;
  /** Three little-endian u32 words per block: its stored scale bytes. */
  readonly subScales: Uint32Array;
}

export function repackQ4_KSuperBlocks(bytes: Uint8Array): Q4KSuperBlocks {
  const { blockBytes } = GGML_TYPES.Q4_K;
  const blocks = blocksOf('Q4_K', bytes);
  const nibbles = new Uint8Array(blocks * 128);
  const d = new Uint16Array(blocks);
  const dmin = new Uint16Array(blocks);
  const subScales = new Uint32Array(blocks * 3);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(nibbles.buffer);
  const sub = new DataView(subScales.buffer);
  for (let b = 0, at = 0; b < blocks; b++, at += blockBytes) {
    d[b] = from.getUint16(at, true);
    dmin[b] = from.getUint16(at + 2, true);
    for (let w = 0; w < 3; w++) sub.setUint32(12 * b + 4 * w, from.getUint32(at + 4 + 4 * w, true), true);
    q4kNibbles(from, at, to, b);
  }
  return { nibbles, d, dmin, subScales };
}

/**
 * The f32 scale d·sc and offset dmin·m of every sub-block of 32 of Q4_K or
 * Q5_K blocks (the products ggml forms), with `each` given every block.
 */
function superBlockScales(
  type: 'Q4_K' | 'Q5_K',
  bytes: Uint8Array,
  each: (at: number, b: number) => void,
): { scales: Float32Array; offsets: Float32Array } {
  const { blockBytes } = GGML_TYPES[type];
  const blocks = blocksOf(type, bytes);
  const scales = new Float32Array(blocks * 8);
  const offsets = new Float32Array(blocks * 8);
  for (let b = 0, at = 0; b < blocks; b++, at += blockBytes) {
    const d = f16BitsToF32(bytes[at]! | (bytes[at + 1]! << 8));
    const dmin = f16BitsToF32(bytes[at + 2]! | (bytes[at + 3]! << 8));
    // `q4kScaleMin` inline: the 12 scale bytes start at byte 4.
    const s = at + 4;
    for (let j = 0; j < 4; j++) {
      scales[b * 8 + j] = d * (bytes[s + j]! & 63);
      offsets[b * 8 + j] = dmin * (bytes[s + j + 4]! & 63);
      scales[b * 8 + j + 4] = d * ((bytes[s + j + 8]! & 0xf) | ((bytes[s + j]! >> 6) << 4));
      offsets[b * 8 + j + 4] = dmin * ((bytes[s + j + 8]! >> 4) | ((bytes[s + j + 4]! >> 6) << 4));
    }
    each(at, b);
  }
  return { scales, offsets };
}

/** The f16 d of every block as its scale and −m as its offset (f16 words, the sign bit flipped). */
export interface HalfScalesAndOffsets {
  readonly scales: Uint16Array;
  readonly offsets: Uint16Array;
}

/**
 * Q4_1 as sequential nibbles with the block's f16 d as the scale and −m as
 * the offset: f32(f32(q · d) − (−m)) is ggml's d·q + m.
 */
export function repackQ4_1(bytes: Uint8Array): HalfScalesAndOffsets & { readonly nibbles: Uint8Array } {
  const nibbles = new Uint8Array(blocksOf('Q4_1', bytes) * 16);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(nibbles.buffer);
  const parts = halfScalesAndOffsets('Q4_1', bytes, (_block, b) =>
    packHalves(from, b * 20 + 4, 16, to, b * 16),
  );
  return { nibbles, ...parts };
}

/** The f16 d (the first two bytes) of every block of `type`, with `each` given every block. */
function halfScales(
  type: 'Q5_0' | 'Q4_1' | 'Q5_1',
  bytes: Uint8Array,
  each: (block: Uint8Array, b: number) => void,
): Uint16Array {
  const { blockBytes } = GGML_TYPES[type];
  const scales = new Uint16Array(blocksOf(type, bytes));
  for (let b = 0; b < scales.length; b++) {
    const block = bytes.subarray(b * blockBytes, (b + 1) * blockBytes);
    scales[b] = block[0]! | (block[1]! << 8);
    each(block, b);
  }
  return scales;
}

/** The d and −m of every block of a type with a min (Q4_1, Q5_1), with `each` given every block. */
function halfScalesAndOffsets(
  type: 'Q4_1' | 'Q5_1',
  bytes: Uint8Array,
  each: (block: Uint8Array, b: number) => void,
): HalfScalesAndOffsets {
  const offsets = new Uint16Array(blocksOf(type, bytes));
  const scales = halfScales(type, bytes, (block, b) => {
    offsets[b] = (block[2]! | (block[3]! << 8)) ^ 0x8000;
    each(block, b);
  });
  return { scales, offsets };
}

/** Q5_0 as int8 codes q − 16 (in −16..15) with the block's f16 d per 32: f32(code · d) is ggml's value. */
export function repackQ5_0(bytes: Uint8Array): Int8Groups {
  const values = new Int8Array(blocksOf('Q5_0', bytes) * 32);
  const scales = halfScales('Q5_0', bytes, (block, b) => {
    q5Values(block, q, 2);
    for (let j = 0; j < 32; j++) values[b * 32 + j] = q[j]! - 16;
  });
  return { groupSize: 32, values, scales };
}

/** Q5_1 as int8 codes q (0..31) with the block's f16 d as the scale and −m as the offset (as `repackQ4_1`). */
export function repackQ5_1(bytes: Uint8Array): HalfScalesAndOffsets & { readonly values: Int8Array } {
  const values = new Int8Array(blocksOf('Q5_1', bytes) * 32);
  const parts = halfScalesAndOffsets('Q5_1', bytes, (block, b) => {
    q5Values(block, q, 4);
    values.set(q.subarray(0, 32), b * 32);
  });
  return { values, ...parts };
}

/**
 * Q5_0 and Q5_1 as core's `q5g32` and `q5g32a`, at the file's own 5.5 and 6
 * bits per weight: each row's nibbles in sequence (as `repackQ4_1` gives
 * Q4_1's), then a high word per block (its qh, each bit where core's layout
 * keeps it), padded to whole 16-byte words; the f16 d (and −m, as
 * `repackQ4_1`'s offsets) as stored.
 */
export interface Q5Rows extends Partial<HalfScalesAndOffsets> {
  /** `q5g32RowWords(cols / 32)` words per row. */
  readonly words: Uint32Array;
  readonly scales: Uint16Array;
}

export function repackQ5Rows(type: 'Q5_0' | 'Q5_1', bytes: Uint8Array, rows: number): Q5Rows {
  const { blockBytes } = GGML_TYPES[type];
  const perRow = blocksOf(type, bytes) / rows;
  const rowWords = q5g32RowWords(perRow);
  const words = new Uint32Array(rows * rowWords);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(words.buffer);
  // qh follows d (Q5_0) or d and m (Q5_1); qs, 16 bytes, follows qh.
  const qh = type === 'Q5_0' ? 2 : 4;
  const each = (_block: Uint8Array, b: number) => {
    const row = Math.floor(b / perRow);
    const g = b - row * perRow;
    const at = b * blockBytes;
    packHalves(from, at + qh + 4, 16, to, 4 * (row * rowWords + 4 * g));
    words[row * rowWords + 4 * perRow + g] = q5HighWord(from.getUint32(at + qh, true));
  };
  if (type === 'Q5_0') return { words, scales: halfScales(type, bytes, each) };
  return { words, ...halfScalesAndOffsets(type, bytes, each) };
}

/** Byte b of qh (elements 8w … 8w + 7) spread as core keeps them, before the shift by 2w: bit l at 8 · (l / 2) + l mod 2. */
const HIGH_SPREAD = Uint32Array.from({ length: 256 }, (_, b) => {
  let spread = 0;
  for (let l = 0; l < 8; l++) if ((b >> l) & 1) spread |= 1 << (8 * (l >> 1) + (l & 1));
  return spread;
});

/** A block's qh (bit i: element i's fifth bit) as core's high word: bit i at 8 · ((i mod 8) / 2) + 2 · (i / 8) + i mod 2. */
function q5HighWord(qh: number): number {
  let word = 0;
  for (let w = 0; w < 4; w++) word |= HIGH_SPREAD[(qh >>> (8 * w)) & 0xff]! << (2 * w);
  return word >>> 0;
}

/** Int8 codes with an f32 scale and offset per group: element i is `values[i] · scales[g] − offsets[g]`. */
export interface Int8OffsetGroups {
  readonly values: Int8Array;
  readonly scales: Float32Array;
  readonly offsets: Float32Array;
}

/** Q5_K as int8 codes q (0..31) with Q4_K's f32 scale d·sc and offset dmin·m per 32. */
export function repackQ5_K(bytes: Uint8Array): Int8OffsetGroups {
  const values = new Int8Array(blocksOf('Q5_K', bytes) * 256);
  const parts = superBlockScales('Q5_K', bytes, (at, b) => {
    q5kValues(bytes.subarray(at, at + 176), q);
    values.set(q, b * 256);
  });
  return { values, ...parts };
}

/**
 * Q5_K as core's `q5k`, at the file's own 5.5 bits per weight: each block's
 * codes as 40 words (the low nibbles in sequence, as `repackQ4_KSuperBlocks`
 * gives Q4_K's, then a word of high bits per sub-block of 32, see core's
 * quant/layout.ts), its f16 d and dmin and twelve bytes of 6-bit scales and
 * mins exactly as stored.
 */
export interface Q5KSuperBlocks {
  /** 40 words per block of 256. */
  readonly words: Uint32Array;
  /** f16 words, one per block. */
  readonly d: Uint16Array;
  readonly dmin: Uint16Array;
  /** Three little-endian u32 words per block: its stored scale bytes. */
  readonly subScales: Uint32Array;
}

export function repackQ5_KSuperBlocks(bytes: Uint8Array): Q5KSuperBlocks {
  const { blockBytes } = GGML_TYPES.Q5_K;
  const blocks = blocksOf('Q5_K', bytes);
  const words = new Uint32Array(blocks * 40);
  const d = new Uint16Array(blocks);
  const dmin = new Uint16Array(blocks);
  const subScales = new Uint32Array(blocks * 3);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(words.buffer);
  for (let b = 0, at = 0; b < blocks; b++, at += blockBytes) {
    d[b] = from.getUint16(at, true);
    dmin[b] = from.getUint16(at + 2, true);
    for (let w = 0; w < 3; w++) subScales[3 * b + w] = from.getUint32(at + 4 + 4 * w, true);
    // qs (at byte 48) as Q4_K's: each 64 elements are 32 stored bytes, low nibbles first.
    for (let j = 0; j < 4; j++) packHalves(from, at + 48 + 32 * j, 32, to, 160 * b + 32 * j);
    q5kHighWords(from, at + 16, words, 40 * b + 32);
  }
  return { words, d, dmin, subScales };
}

/**
 * The eight high words of a block whose qh starts at byte `at`, at `out`:
 * bit s of qh[l] is element 32s + l's fifth bit, which q5k keeps at bit
 * 8 · ((l mod 8) / 2) + 2 · (l / 8) + l mod 2 of word s. For each run of 8
 * bytes (l = 8w … 8w + 7) the even and odd bytes gathered into a word each
 * put bit s of every byte at bits 0, 8, 16, 24 (even) and 1, 9, 17, 25 (odd)
 * under one shift and mask, then 2w higher.
 */
function q5kHighWords(from: DataView, at: number, words: Uint32Array, out: number): void {
  for (let s = 0; s < 8; s++) words[out + s] = 0;
  for (let w = 0; w < 4; w++) {
    const lo = from.getUint32(at + 8 * w, true);
    const hi = from.getUint32(at + 8 * w + 4, true);
    const even = (lo & 0xff) | ((lo >>> 8) & 0xff00) | ((hi & 0xff) << 16) | ((hi << 8) & 0xff000000);
    const odd = ((lo >>> 8) & 0xff) | ((lo >>> 16) & 0xff00) | ((hi & 0xff00) << 8) | (hi & 0xff000000);
    for (let s = 0; s < 8; s++) {
      const bits = ((even >>> s) & 0x01010101) | (((odd >>> s) & 0x01010101) << 1);
      words[out + s] = (words[out + s]! | (bits << (2 * w))) >>> 0;
    }
  }
}

/** Symmetric int8 groups with f32 scales: element i is `values[i] · scales[i / groupSize]`. */
export interface Int8F32Groups {
  readonly groupSize: number;
  readonly values: Int8Array;
  readonly scales: Float32Array;
}

/**
 * Q6_K as int8 values (q − 32, in −32..31) with an f32 scale (d·scale) per
 * 16: ggml's own products, so the values are the same bit for bit.
 */
export function repackQ6_K(bytes: Uint8Array): Int8F32Groups {
  const blocks = blocksOf('Q6_K', bytes);
  const values = new Int8Array(blocks * 256);
  const scales = new Float32Array(blocks * 16);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const to = new DataView(values.buffer);
  // Four elements a word at a time, laid out as `q6kValues` reads them.
  for (let b = 0, at = 0, v = 0; b < blocks; b++, at += 210, v += 256) {
    const d = f16BitsToF32(from.getUint16(at + 208, true));
    for (let g = 0; g < 16; g++) scales[b * 16 + g] = d * from.getInt8(at + 192 + g);
    for (let h = 0; h < 2; h++) {
      const ql = at + 64 * h;
      const qh = at + 128 + 32 * h;
      const e = v + 128 * h;
      for (let l = 0; l < 32; l += 4) {
        const low = from.getUint32(ql + l, true);
        const next = from.getUint32(ql + l + 32, true);
        const high = from.getUint32(qh + l, true);
        to.setUint32(e + l, centred6((low & 0x0f0f0f0f) | ((high & 0x03030303) << 4)), true);
        to.setUint32(e + l + 32, centred6((next & 0x0f0f0f0f) | ((high & 0x0c0c0c0c) << 2)), true);
        to.setUint32(e + l + 64, centred6(((low >>> 4) & 0x0f0f0f0f) | (high & 0x30303030)), true);
        to.setUint32(e + l + 96, centred6(((next >>> 4) & 0x0f0f0f0f) | ((high >>> 2) & 0x30303030)), true);
      }
    }
  }
  return { groupSize: 16, values, scales };
}

/**
 * Q6_K as core's `q6k`, at the file's own 6.5625 bits per weight: each
 * block's codes as 48 words (the low nibbles in sequence, then the high
 * pairs, see core's quant/layout.ts), its f16 d and its sixteen int8 scales
 * exactly as stored.
 */
export interface Q6KSuperBlocks {
  /** 48 words per block of 256. */
  readonly words: Uint32Array;
  /** f16 words, one per block. */
  readonly d: Uint16Array;
  /** Four little-endian u32 words per block: its stored int8 scales. */
  readonly subScales: Uint32Array;
}

export function repackQ6_KSuperBlocks(bytes: Uint8Array): Q6KSuperBlocks {
  const { blockBytes } = GGML_TYPES.Q6_K;
  const blocks = blocksOf('Q6_K', bytes);
  const words = new Uint32Array(blocks * 48);
  const d = new Uint16Array(blocks);
  const subScales = new Uint32Array(blocks * 4);
  const from = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0, at = 0; b < blocks; b++, at += blockBytes) {
    d[b] = from.getUint16(at + 208, true);
    for (let w = 0; w < 4; w++) subScales[4 * b + w] = from.getUint32(at + 192 + 4 * w, true);
    q6kWords(from, at, words, 48 * b);
  }
  return { words, d, subScales };
}

/**
 * The codes of the block at byte `at` as q6k's 48 words at `out`, a word at
 * a time (see `q6kValues` for ggml's order: element 128h + 32kk + l takes
 * nibble kk / 2 of ql[64h + 32(kk mod 2) + l] and bits 2kk of qh[32h + l]).
 * Word t holds the low nibbles of elements 8t … 8t + 7: one h and kk, eight
 * consecutive l. Word 32 + t holds the high pairs of elements 16t … 16t + 15,
 * byte b those of 16t + 2b, +1 at bits 0–3 and of 16t + 8 + 2b, +1 at 4–7.
 */
function q6kWords(from: DataView, at: number, words: Uint32Array, out: number): void {
  for (let t = 0; t < 32; t++) {
    const kk = (t >> 2) & 3;
    const src = at + 64 * (t >> 4) + 32 * (kk & 1) + 8 * (t & 3);
    const shift = 4 * (kk >> 1);
    const low = nibblePairs(from.getUint32(src, true), shift);
    words[out + t] = (low | (nibblePairs(from.getUint32(src + 4, true), shift) << 16)) >>> 0;
  }
  for (let t = 0; t < 16; t++) {
    const src = at + 128 + 32 * (t >> 3) + 16 * (t & 1);
    const shift = 2 * ((t >> 1) & 3);
    const p0 = highPairs(from.getUint32(src, true), shift);
    const p1 = highPairs(from.getUint32(src + 4, true), shift);
    const p2 = highPairs(from.getUint32(src + 8, true), shift);
    const p3 = highPairs(from.getUint32(src + 12, true), shift);
    words[out + 32 + t] = (p0 | (p1 << 16) | ((p2 | (p3 << 16)) << 4)) >>> 0;
  }
}

/**
 * The 2-bit fields at bit `shift` of each of the 4 bytes of `word`: bytes
 * 0, 1's in bits 0–3 and bytes 2, 3's in bits 8–11 of the result.
 */
function highPairs(word: number, shift: number): number {
  const h = (word >>> shift) & 0x03030303;
  const t = h | (h >>> 6);
  return (t & 0xff) | ((t >>> 8) & 0xff00);
}

/**
 * Each byte q (0–63) of `word` as the int8 byte of q − 32: q ^ 32 is
 * q − 32 in 6-bit two's complement, its sign bit 5 copied into bits 6 and 7.
 */
function centred6(word: number): number {
  const y = word ^ 0x20202020;
  const sign = y & 0x20202020;
  return y | (sign << 1) | (sign << 2);
}

// ---- onto core's quantized formats ------------------------------------------------------------

/** Bytes of `rows` rows of `cols` elements in whole blocks of `type`; otherwise a ShapeError for `kernel`. */
function checkBlockRows(
  kernel: string,
  type: GgmlQuantizedType,
  bytes: Uint8Array,
  rows: number,
  cols: number,
): void {
  const { blockSize, blockBytes } = GGML_TYPES[type];
  if (cols % blockSize !== 0 || bytes.byteLength !== rows * (cols / blockSize) * blockBytes) {
    throw new ShapeError(`${type} blocks do not make whole rows of the shape`, {
      operation: kernel,
      argument: 'bytes',
      expected: `cols a multiple of ${blockSize} and ${rows} · ${cols / blockSize} blocks of ${blockBytes} bytes`,
      actual: `cols ${cols}, ${bytes.byteLength} bytes`,
    });
  }
}

/** A repack's output as a core format takes it: the codes in order (nibbles two to a byte, or int8). */
interface CoreParts extends Pick<QuantizedHostWeight, 'scales' | 'offsets' | 'zeros' | 'scaleDType'> {
  readonly format: QuantFormat;
  readonly codes: Uint8Array | Int8Array | Uint32Array;
}

function partsOf(repacked: {
  nibbles?: Uint8Array;
  values?: Int8Array;
  scales: Uint16Array | Float32Array;
  offsets?: Uint16Array | Float32Array;
}): Omit<CoreParts, 'format' | 'scaleDType'> {
  const { nibbles, values, scales, offsets } = repacked;
  return { codes: (nibbles ?? values)!, scales, ...(offsets ? { offsets } : {}) };
}

/** The core format `repackOntoCoreFormats` puts `type` in (see `CORE_PARTS`). */
export const CORE_FORMAT_OF: Readonly<Record<GgmlQuantizedType, QuantFormat>> = {
  Q4_0: 'q4g32',
  Q8_0: 'q8g32',
  Q5_0: 'q5g32',
  Q6_K: 'q6k',
  Q4_K: 'q4k',
  Q5_K: 'q5k',
  Q4_1: 'q4g32a',
  Q5_1: 'q5g32a',
};

/**
 * Each type in the core format that holds it exactly, f32(f32(q · scale) −
 * offset) being ggml's own value (see each repack):
 * - Q4_0 as `q4g32` (f16 d, codes centred on 8) and Q8_0 as `q8g32` (f16
 *   d): GGUF rows are whole blocks, so no row is padded.
 * - Q5_0 as `q5g32` (f16 d, codes centred on 16) and Q5_1 as `q5g32a` (f16
 *   scales d and offsets −m): their codes, nibbles and high words by rows.
 * - Q4_K as `q4k`: its codes, f16 d and dmin and 6-bit scales as stored.
 * - Q5_K as `q5k`: its codes, f16 d and dmin and 6-bit scales as stored.
 * - Q6_K as `q6k`: its codes, f16 d and int8 scales as stored.
 * - Q4_1 as `q4g32a` with f16 scales d and offsets −m.
 * On the device every type takes its stored bits per weight (Q5_0's and
 * Q5_1's rows of a number of blocks not a multiple of 4 a few padding words more).
 */
const CORE_PARTS: Readonly<Record<GgmlQuantizedType, (bytes: Uint8Array, rows: number) => CoreParts>> = {
  Q4_0: (bytes) => ({ format: CORE_FORMAT_OF.Q4_0, scaleDType: 'f16', ...partsOf(repackQ4_0(bytes)) }),
  Q8_0: (bytes) => ({ format: CORE_FORMAT_OF.Q8_0, scaleDType: 'f16', ...partsOf(repackQ8_0(bytes)) }),
  Q5_0: (bytes, rows) => {
    const { words, scales } = repackQ5Rows('Q5_0', bytes, rows);
    return { format: CORE_FORMAT_OF.Q5_0, scaleDType: 'f16', codes: words, scales };
  },
  Q6_K: (bytes) => {
    const { words, d, subScales } = repackQ6_KSuperBlocks(bytes);
    return { format: CORE_FORMAT_OF.Q6_K, scaleDType: 'f16', codes: words, scales: d, zeros: subScales };
  },
  Q4_K: (bytes) => {
    const { nibbles, d, dmin, subScales } = repackQ4_KSuperBlocks(bytes);
    return {
      format: CORE_FORMAT_OF.Q4_K,
      scaleDType: 'f16',
      codes: nibbles,
      scales: d,
      offsets: dmin,
      zeros: subScales,
    };
  },
  Q5_K: (bytes) => {
    const { words, d, dmin, subScales } = repackQ5_KSuperBlocks(bytes);
    return {
      format: CORE_FORMAT_OF.Q5_K,
      scaleDType: 'f16',
      codes: words,
      scales: d,
      offsets: dmin,
      zeros: subScales,
    };
  },
  Q4_1: (bytes) => ({ format: CORE_FORMAT_OF.Q4_1, scaleDType: 'f16', ...partsOf(repackQ4_1(bytes)) }),
  Q5_1: (bytes, rows) => {
    const { words, scales, offsets } = repackQ5Rows('Q5_1', bytes, rows);
    return { format: CORE_FORMAT_OF.Q5_1, scaleDType: 'f16', codes: words, scales, offsets };
  },
};

/**
 * A quantized GGUF tensor [rows, cols] in core's format for its type,
 * exactly (see `CORE_PARTS`); blocks that do not make whole rows of the
 * shape are a ShapeError for `operation`.
 */
export function ggufAsCoreFormat(
  type: GgmlQuantizedType,
  bytes: Uint8Array,
  rows: number,
  cols: number,
  operation = 'ggufAsCoreFormat',
): QuantizedHostWeight {
  checkBlockRows(operation, type, bytes, rows, cols);
  return hostWeightOf(CORE_PARTS[type](bytes, rows), rows, cols);
}

/** Core parts as a host weight [rows, cols], the codes as u32 words. */
function hostWeightOf(core: CoreParts, rows: number, cols: number): QuantizedHostWeight {
  const { format, codes, ...parts } = core;
  const words = rows * quantLayout(format, cols).rowWords;
  // The repacks return fresh arrays: used as they are where no row is padded (a copy otherwise).
  const whole = codes.byteOffset === 0 && codes.buffer.byteLength === words * 4;
  const packed = whole ? new Uint32Array(codes.buffer) : new Uint32Array(words);
  if (!whole)
    new Uint8Array(packed.buffer).set(new Uint8Array(codes.buffer, codes.byteOffset, codes.byteLength));
  return { format, n: rows, k: cols, packed, ...parts };
}

type AsCoreFormat = (bytes: Uint8Array, rows: number, cols: number) => QuantizedHostWeight;
const asCoreFormat =
  (type: GgmlQuantizedType, operation: string): AsCoreFormat =>
  (bytes, rows, cols) =>
    ggufAsCoreFormat(type, bytes, rows, cols, operation);

/** `ggufAsCoreFormat` of one type: Q4_0 as `q4g32`, Q8_0 as `q8g32`, Q4_K as `q4k`, Q5_K as `q5k`, Q6_K as `q6k`. */
export const q4_0AsQ4g32 = asCoreFormat('Q4_0', 'q4_0AsQ4g32');
export const q8_0AsQ8g32 = asCoreFormat('Q8_0', 'q8_0AsQ8g32');
export const q4_KAsQ4k = asCoreFormat('Q4_K', 'q4_KAsQ4k');
export const q5_KAsQ5k = asCoreFormat('Q5_K', 'q5_KAsQ5k');
export const q6_KAsQ6k = asCoreFormat('Q6_K', 'q6_KAsQ6k');

/**
 * Q6_K as `q8g16`, exactly too, in more bytes: code q − 32 as int8 and an
 * f32 scale d·scale per 16 (10 bits per weight where the file and `q6k`
 * hold 6.5625).
 */
export const q6_KAsQ8g16: AsCoreFormat = (bytes, rows, cols) => {
  checkBlockRows('q6_KAsQ8g16', 'Q6_K', bytes, rows, cols);
  return hostWeightOf({ format: 'q8g16', scaleDType: 'f32', ...partsOf(repackQ6_K(bytes)) }, rows, cols);
};

/**
 * Q4_K as `q4g32a`, exactly too, in more bytes: f32 scales d·sc and offsets
 * dmin·m per 32 (6 bits per weight where the file and `q4k` hold 4.5).
 */
export const q4_KAsQ4g32a: AsCoreFormat = (bytes, rows, cols) => {
  checkBlockRows('q4_KAsQ4g32a', 'Q4_K', bytes, rows, cols);
  return hostWeightOf({ format: 'q4g32a', scaleDType: 'f32', ...partsOf(repackQ4_K(bytes)) }, rows, cols);
};

/** Q5_0 as `q8g32`, exactly too, in more bytes: int8 codes q − 16 and f16 d (8.5 bits per weight where the file and `q5g32` hold 5.5). */
export const q5_0AsQ8g32: AsCoreFormat = (bytes, rows, cols) => {
  checkBlockRows('q5_0AsQ8g32', 'Q5_0', bytes, rows, cols);
  return hostWeightOf({ format: 'q8g32', scaleDType: 'f16', ...partsOf(repackQ5_0(bytes)) }, rows, cols);
};

/** Q5_1 as `q8g32a`, exactly too, in more bytes: int8 codes q, f16 d and −m (9 bits per weight where the file and `q5g32a` hold 6). */
export const q5_1AsQ8g32a: AsCoreFormat = (bytes, rows, cols) => {
  checkBlockRows('q5_1AsQ8g32a', 'Q5_1', bytes, rows, cols);
  return hostWeightOf({ format: 'q8g32a', scaleDType: 'f16', ...partsOf(repackQ5_1(bytes)) }, rows, cols);
};

/**
 * Q5_K as `q8g32a`, exactly too, in more bytes: int8 codes with f32 scales
 * d·sc and offsets dmin·m per 32 (10 bits per weight where the file and
 * `q5k` hold 5.5).
 */
export const q5_KAsQ8g32a: AsCoreFormat = (bytes, rows, cols) => {
  checkBlockRows('q5_KAsQ8g32a', 'Q5_K', bytes, rows, cols);
  return hostWeightOf({ format: 'q8g32a', scaleDType: 'f32', ...partsOf(repackQ5_K(bytes)) }, rows, cols);
};

/**
 * A repack for `loadGgufLlama` that puts quantized tensors on the device in
 * core's formats, exactly (the values ggml's own dequantization gives):
 * Q4_0 as `q4g32`, Q8_0 and Q5_0 as `q8g32`, Q4_K as `q4k`, Q5_K as `q5k`,
 * Q4_1 as `q4g32a`, Q6_K as `q6k`, Q5_1 as `q8g32a`. The
 * parts are named as `quantizedWeightOf` takes them (`packed`, `scales`,
 * `zeros`, `offsets`). Other quantized types are refused by name.
 */
export const repackOntoCoreFormats: GgufRepack = (backend, tensor) => {
  if (!isGgmlQuantizedType(tensor.type) || tensor.shape.length !== 2) return refuseQuantized(backend, tensor);
  const [rows, cols] = tensor.shape as [number, number];
  return repackedWeightOf(
    uploadQuantized(backend, ggufAsCoreFormat(tensor.type, tensor.bytes, rows, cols)),
    tensor.shape,
  );
};

/** A quantized weight on the device with its parts named as `quantizedWeightOf` takes them. */
export function repackedWeightOf(weight: QuantizedWeight, shape: Shape): RepackedWeight {
  const tensors: Record<string, Tensor> = { packed: weight.packed, scales: weight.scales };
  if (weight.zeros) tensors.zeros = weight.zeros;
  if (weight.offsets) tensors.offsets = weight.offsets;
  return { format: weight.format, shape, tensors };
}
