import { f16BitsToF32 } from '@rayo/core';
import { GGML_TYPES, type GgmlQuantizedType, wholeBlocks } from './ggmlTypes.js';

/**
 * Reference dequantization of ggml's blocks, on the host, to f32: the oracle
 * the tests check quantized kernels and repacks against. Loading never calls
 * it (weights stay quantized on the device). Each product is rounded to f32
 * where ggml's C rounds it, so that values match ggml's bit for bit.
 *
 * Block layouts (ggml-common.h), all little-endian:
 * - Q8_0, 32 elements in 34 bytes: f16 d; int8 q[32]. x = d·q.
 * - Q4_0, 32 in 18: f16 d; u8 qs[16], element j in the low nibble of byte j,
 *   element j+16 in its high nibble. x = d·(q − 8).
 * - Q4_1, 32 in 20: f16 d; f16 m; u8 qs[16] as Q4_0's. x = d·q + m.
 * - Q5_0, 32 in 22: f16 d; u8 qh[4], a little-endian u32 whose bit j is
 *   the fifth bit of element j; u8 qs[16] as Q4_0's (the low 4 bits).
 *   x = d·(q − 16).
 * - Q5_1, 32 in 24: f16 d; f16 m; qh[4] and qs[16] as Q5_0's. x = d·q + m.
 * - Q4_K, 256 in 144: f16 d; f16 dmin; u8 scales[12], eight 6-bit scales and
 *   eight 6-bit mins (see `q4kScaleMin`); u8 qs[128]. Each 64 elements j..j+63
 *   take 32 bytes: the low nibbles are sub-block 2·(j/64), the high nibbles
 *   sub-block 2·(j/64)+1. x = d·sc·q − dmin·m.
 * - Q5_K, 256 in 176: f16 d; f16 dmin; u8 scales[12] as Q4_K's; u8 qh[32];
 *   u8 qs[128] as Q4_K's (the low 4 bits). Bit s of qh[l] is the fifth bit
 *   of element 32·s + l. x = d·sc·q − dmin·m.
 * - Q6_K, 256 in 210: u8 ql[128] (low 4 bits); u8 qh[64] (high 2 bits);
 *   int8 scales[16], one per 16 elements; f16 d. Within each half of 128
 *   elements (64 ql bytes, 32 qh bytes), element l+32·k (l < 32, k < 4) takes
 *   the low (k even) or high (k odd) nibble of ql[l + 32·(k&1)] and bits
 *   2k..2k+1 of qh[l]. x = d·scale·(q − 32).
 */

const fround = Math.fround;

/**
 * The 6-bit scale and min of sub-block `j` (0–7) of a Q4_K super-block's
 * 12 scale bytes: sub-blocks 0–3 keep theirs in the low 6 bits of bytes j
 * (scale) and j+4 (min); sub-blocks 4–7 split theirs into a low nibble in
 * byte j+4 (scale low, min high) and two high bits in the top of bytes j−4
 * (scale) and j (min).
 */
export function q4kScaleMin(scales: Uint8Array, j: number): { scale: number; min: number } {
  if (j < 4) return { scale: scales[j]! & 63, min: scales[j + 4]! & 63 };
  return {
    scale: (scales[j + 4]! & 0xf) | ((scales[j - 4]! >> 6) << 4),
    min: (scales[j + 4]! >> 4) | ((scales[j]! >> 6) << 4),
  };
}

/**
 * The 32 4-bit values (0–15) of a Q4_0 block (or of the 16 bytes at
 * `at` of a Q4_1 or Q5 block), in element order, into `q`.
 */
export function q4_0Values(block: Uint8Array, q: Uint8Array, at = 2): void {
  for (let j = 0; j < 16; j++) {
    q[j] = block[at + j]! & 0xf;
    q[j + 16] = block[at + j]! >> 4;
  }
}

/** The 32 5-bit values (0–31) of a Q5_0 or Q5_1 block whose qh starts at byte `at`, into `q`. */
export function q5Values(block: Uint8Array, q: Uint8Array, at: number): void {
  q4_0Values(block, q, at + 4);
  const qh = (block[at]! | (block[at + 1]! << 8) | (block[at + 2]! << 16) | (block[at + 3]! << 24)) >>> 0;
  for (let j = 0; j < 32; j++) q[j]! |= ((qh >>> j) & 1) << 4;
}

/** The 256 4-bit values (0–15) of a Q4_K block, in element order, into `q`. */
export function q4kValues(block: Uint8Array, q: Uint8Array): void {
  for (let j = 0; j < 4; j++) {
    for (let l = 0; l < 32; l++) {
      const byte = block[16 + 32 * j + l]!;
      q[64 * j + l] = byte & 0xf;
      q[64 * j + 32 + l] = byte >> 4;
    }
  }
}

/** The 256 5-bit values (0–31) of a Q5_K block, in element order, into `q`. */
export function q5kValues(block: Uint8Array, q: Uint8Array): void {
  for (let j = 0; j < 4; j++) {
    for (let l = 0; l < 32; l++) {
      const byte = block[48 + 32 * j + l]!;
      const high = block[16 + l]!;
      q[64 * j + l] = (byte & 0xf) | (((high >> (2 * j)) & 1) << 4);
      q[64 * j + 32 + l] = (byte >> 4) | (((high >> (2 * j + 1)) & 1) << 4);
    }
  }
}

/** The 256 6-bit values (0–63, before the −32) of a Q6_K block, in element order, into `q`. */
export function q6kValues(block: Uint8Array, q: Uint8Array): void {
  for (let h = 0; h < 2; h++) {
    for (let l = 0; l < 32; l++) {
      const ql0 = block[64 * h + l]!;
      const ql1 = block[64 * h + l + 32]!;
      const qh = block[128 + 32 * h + l]!;
      const e = 128 * h + l;
      q[e] = (ql0 & 0xf) | ((qh & 3) << 4);
      q[e + 32] = (ql1 & 0xf) | (((qh >> 2) & 3) << 4);
      q[e + 64] = (ql0 >> 4) | (((qh >> 4) & 3) << 4);
      q[e + 96] = (ql1 >> 4) | (((qh >> 6) & 3) << 4);
    }
  }
}

/** An f16 block scale at byte `at`. */
export function blockHalf(block: Uint8Array, at: number): number {
  return f16BitsToF32(block[at]! | (block[at + 1]! << 8));
}

const q = new Uint8Array(256);

function dequantizeQ8_0(block: Uint8Array, out: Float32Array, at: number): void {
  const d = blockHalf(block, 0);
  for (let j = 0; j < 32; j++) out[at + j] = fround(d * ((block[2 + j]! << 24) >> 24));
}

function dequantizeQ4_0(block: Uint8Array, out: Float32Array, at: number): void {
  const d = blockHalf(block, 0);
  q4_0Values(block, q);
  for (let j = 0; j < 32; j++) out[at + j] = fround((q[j]! - 8) * d);
}

/** Q4_1 and Q5_1: x = d·q + m, the product rounded to f32 before the sum (as ggml's C, uncontracted). */
function dequantizeWithMin(block: Uint8Array, out: Float32Array, at: number): void {
  const d = blockHalf(block, 0);
  const m = blockHalf(block, 2);
  for (let j = 0; j < 32; j++) out[at + j] = fround(fround(q[j]! * d) + m);
}

function dequantizeQ4_1(block: Uint8Array, out: Float32Array, at: number): void {
  q4_0Values(block, q, 4);
  dequantizeWithMin(block, out, at);
}

function dequantizeQ5_0(block: Uint8Array, out: Float32Array, at: number): void {
  const d = blockHalf(block, 0);
  q5Values(block, q, 2);
  for (let j = 0; j < 32; j++) out[at + j] = fround((q[j]! - 16) * d);
}

function dequantizeQ5_1(block: Uint8Array, out: Float32Array, at: number): void {
  q5Values(block, q, 4);
  dequantizeWithMin(block, out, at);
}

function dequantizeQ4_K(block: Uint8Array, out: Float32Array, at: number): void {
  q4kValues(block, q);
  dequantizeSuperBlock(block, out, at);
}

function dequantizeQ5_K(block: Uint8Array, out: Float32Array, at: number): void {
  q5kValues(block, q);
  dequantizeSuperBlock(block, out, at);
}

/** Q4_K and Q5_K once their values are in `q`: x = d·sc·q − dmin·m per sub-block of 32. */
function dequantizeSuperBlock(block: Uint8Array, out: Float32Array, at: number): void {
  const d = blockHalf(block, 0);
  const dmin = blockHalf(block, 2);
  const scales = block.subarray(4, 16);
  for (let j = 0; j < 8; j++) {
    const { scale, min } = q4kScaleMin(scales, j);
    const sd = fround(d * scale);
    const sm = fround(dmin * min);
    for (let l = 0; l < 32; l++) out[at + 32 * j + l] = fround(fround(sd * q[32 * j + l]!) - sm);
  }
}

function dequantizeQ6_K(block: Uint8Array, out: Float32Array, at: number): void {
  const d = blockHalf(block, 208);
  q6kValues(block, q);
  for (let e = 0; e < 256; e++) {
    const scale = (block[192 + (e >> 4)]! << 24) >> 24;
    out[at + e] = fround(fround(d * scale) * (q[e]! - 32));
  }
}

const DEQUANTIZE: Record<GgmlQuantizedType, (block: Uint8Array, out: Float32Array, at: number) => void> = {
  Q8_0: dequantizeQ8_0,
  Q4_0: dequantizeQ4_0,
  Q4_1: dequantizeQ4_1,
  Q5_0: dequantizeQ5_0,
  Q5_1: dequantizeQ5_1,
  Q4_K: dequantizeQ4_K,
  Q5_K: dequantizeQ5_K,
  Q6_K: dequantizeQ6_K,
};

/** The f32 values of `bytes`, whole blocks of `type` (host reference; see the module comment). */
export function dequantize(type: GgmlQuantizedType, bytes: Uint8Array): Float32Array {
  const { blockSize, blockBytes } = GGML_TYPES[type];
  const blocks = wholeBlocks(type, bytes.length, 'bytes', 'dequantize');
  const out = new Float32Array(blocks * blockSize);
  const one = DEQUANTIZE[type];
  for (let b = 0; b < blocks; b++)
    one(bytes.subarray(b * blockBytes, (b + 1) * blockBytes), out, b * blockSize);
  return out;
}
