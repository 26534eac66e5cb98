import { f16BitsToF32, InvalidArgumentError } from '@rayo/core';
import { GGML_TYPES, type GgmlQuantizedType } from './ggmlTypes.js';

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
 * - Q4_K, 256 in 144: f16 d; f16 dmin; u8 scales[12], eight 6-bit scales and
 *   eight 6-bit mins (see `q4kScaleMin`); u8 qs[128]. Each 64 elements j..j+63
 *   take 32 bytes: the low nibbles are sub-block 2·(j/64), the high nibbles
 *   sub-block 2·(j/64)+1. x = d·sc·q − dmin·m.
 * - Q6_K, 256 in 210: u8 ql[128] (low 4 bits); u8 qh[64] (high 2 bits);
 *   int8 scales[16], one per 16 elements; f16 d. Within each half of 128
 *   elements (64 ql bytes, 32 qh bytes), element l+32·k (l < 32, k < 4) takes
 *   the low (k even) or high (k odd) nibble of ql[l + 32·(k&1)] and bits
 *   2k..2k+1 of qh[l]. x = d·scale·(q − 32).
 */

const fround = Math.fround;

function half(bytes: Uint8Array, at: number): number {
  return f16BitsToF32(bytes[at]! | (bytes[at + 1]! << 8));
}

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

function dequantizeQ8_0(block: Uint8Array, out: Float32Array, at: number): void {
  const d = half(block, 0);
  for (let j = 0; j < 32; j++) out[at + j] = fround(d * ((block[2 + j]! << 24) >> 24));
}

function dequantizeQ4_0(block: Uint8Array, out: Float32Array, at: number): void {
  const d = half(block, 0);
  for (let j = 0; j < 16; j++) {
    const byte = block[2 + j]!;
    out[at + j] = fround(((byte & 0xf) - 8) * d);
    out[at + j + 16] = fround(((byte >> 4) - 8) * d);
  }
}

function dequantizeQ4_K(block: Uint8Array, out: Float32Array, at: number): void {
  const d = half(block, 0);
  const dmin = half(block, 2);
  const scales = block.subarray(4, 16);
  for (let j = 0; j < 4; j++) {
    const lo = q4kScaleMin(scales, 2 * j);
    const hi = q4kScaleMin(scales, 2 * j + 1);
    const d1 = fround(d * lo.scale);
    const m1 = fround(dmin * lo.min);
    const d2 = fround(d * hi.scale);
    const m2 = fround(dmin * hi.min);
    for (let l = 0; l < 32; l++) {
      const byte = block[16 + 32 * j + l]!;
      out[at + 64 * j + l] = fround(fround(d1 * (byte & 0xf)) - m1);
      out[at + 64 * j + 32 + l] = fround(fround(d2 * (byte >> 4)) - m2);
    }
  }
}

function dequantizeQ6_K(block: Uint8Array, out: Float32Array, at: number): void {
  const d = half(block, 208);
  for (let h = 0; h < 2; h++) {
    const ql = 64 * h;
    const qh = 128 + 32 * h;
    for (let l = 0; l < 32; l++) {
      const high = block[qh + l]!;
      const q = [
        (block[ql + l]! & 0xf) | ((high & 3) << 4),
        (block[ql + l + 32]! & 0xf) | (((high >> 2) & 3) << 4),
        (block[ql + l]! >> 4) | (((high >> 4) & 3) << 4),
        (block[ql + l + 32]! >> 4) | (((high >> 6) & 3) << 4),
      ];
      for (let k = 0; k < 4; k++) {
        const e = 128 * h + 32 * k + l;
        const scale = (block[192 + (e >> 4)]! << 24) >> 24;
        out[at + e] = fround(fround(d * scale) * (q[k]! - 32));
      }
    }
  }
}

const DEQUANTIZE: Record<GgmlQuantizedType, (block: Uint8Array, out: Float32Array, at: number) => void> = {
  Q8_0: dequantizeQ8_0,
  Q4_0: dequantizeQ4_0,
  Q4_K: dequantizeQ4_K,
  Q6_K: dequantizeQ6_K,
};

/** The f32 values of `bytes`, whole blocks of `type` (host reference; see the module comment). */
export function dequantize(type: GgmlQuantizedType, bytes: Uint8Array): Float32Array {
  const { blockSize, blockBytes } = GGML_TYPES[type];
  if (bytes.length % blockBytes !== 0) {
    throw new InvalidArgumentError(`${type} data is not a whole number of blocks`, {
      kernel: 'dequantize',
      argument: 'bytes',
      expected: `a multiple of ${blockBytes} bytes`,
      actual: `${bytes.length}`,
    });
  }
  const blocks = bytes.length / blockBytes;
  const out = new Float32Array(blocks * blockSize);
  const one = DEQUANTIZE[type];
  for (let b = 0; b < blocks; b++)
    one(bytes.subarray(b * blockBytes, (b + 1) * blockBytes), out, b * blockSize);
  return out;
}
