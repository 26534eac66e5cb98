import { f16BitsToF32, f32ToF16Bits } from '@rayo/core';
import { q4kScaleMin } from './dequantize.js';
import { GGML_TYPES, type GgmlQuantizedType, wholeBlocks } from './ggmlTypes.js';

/**
 * Quantizers that write ggml's block layouts exactly (see `dequantize.ts`
 * for the layouts), for the GGUF writer: a test writes quantized files with
 * them, and a converter could. Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follow
 * ggml's reference quantizers step for step. Q4_K, Q5_K and Q6_K use the
 * simple start of ggml's: per sub-block range (Q4_K, Q5_K) or absolute
 * maximum (Q6_K), with the 6- or
 * 8-bit sub-block scales quantized against the super-block's largest, but
 * without the iterative search ggml adds to lower the error; any file of
 * either decodes the same way.
 */

const fround = Math.fround;

/** ggml's `nearest_int`: round half to even. */
function nearestInt(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** C's `roundf`: half away from zero. */
function roundAway(x: number): number {
  return Math.sign(x) * Math.round(Math.abs(x));
}

function setHalf(block: Uint8Array, at: number, value: number): number {
  const bits = f32ToF16Bits(value);
  block[at] = bits & 0xff;
  block[at + 1] = bits >> 8;
  return f16BitsToF32(bits);
}

function quantizeQ8_0(x: Float32Array, block: Uint8Array): void {
  let amax = 0;
  for (const v of x) amax = Math.max(amax, Math.abs(v));
  const d = fround(amax / 127);
  const id = d ? fround(1 / d) : 0;
  setHalf(block, 0, d);
  for (let j = 0; j < 32; j++) block[2 + j] = roundAway(fround(x[j]! * id)) & 0xff;
}

/**
 * Q4_0 (centre 8) and Q5_0 (centre 16): d = the signed extreme / −centre,
 * q = trunc(x / d + centre + 0.5) up to 2·centre − 1, into `q`.
 */
function quantizeCentred(x: Float32Array, block: Uint8Array, centre: number, q: Uint8Array): void {
  let amax = 0;
  let max = 0;
  for (const v of x) {
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  const d = fround(max / -centre);
  const id = d ? fround(1 / d) : 0;
  setHalf(block, 0, d);
  for (let j = 0; j < 32; j++)
    q[j] = Math.min(2 * centre - 1, Math.trunc(fround(fround(x[j]! * id) + centre + 0.5)));
}

function quantizeQ4_0(x: Float32Array, block: Uint8Array): void {
  quantizeCentred(x, block, 8, q32);
  packHalves(q32, block, 2);
}

/** The block's minimum and maximum, as ggml's reference quantizers find them. */
function range(x: Float32Array): { min: number; max: number } {
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  for (const v of x) {
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  return { min, max };
}

/** The 32 values of `q` (0–15) as Q4_0's qs, into the 16 bytes at `at`. */
function packHalves(q: Uint8Array, block: Uint8Array, at: number): void {
  for (let j = 0; j < 16; j++) block[at + j] = (q[j]! & 0xf) | ((q[j + 16]! & 0xf) << 4);
}

/** The 32 values of `q` (0–31) as a Q5 block's qh (at `at`) and qs (after it). */
function packQ5(q: Uint8Array, block: Uint8Array, at: number): void {
  let qh = 0;
  for (let j = 0; j < 32; j++) qh |= (q[j]! >> 4) << j;
  for (let b = 0; b < 4; b++) block[at + b] = (qh >>> (8 * b)) & 0xff;
  packHalves(q, block, at + 4);
}

/** Q4_1 and Q5_1: d = (max − min) / levels, m = min, q = trunc((x − min) / d + 0.5). */
function quantizeWithMin(x: Float32Array, block: Uint8Array, levels: number, q: Uint8Array): void {
  const { min, max } = range(x);
  const d = fround((max - min) / levels);
  const id = d ? fround(1 / d) : 0;
  setHalf(block, 0, d);
  setHalf(block, 2, min);
  for (let j = 0; j < 32; j++)
    q[j] = Math.min(levels, Math.trunc(fround(fround(fround(x[j]! - min) * id) + 0.5)));
}

const q32 = new Uint8Array(32);

function quantizeQ4_1(x: Float32Array, block: Uint8Array): void {
  quantizeWithMin(x, block, 15, q32);
  packHalves(q32, block, 4);
}

function quantizeQ5_1(x: Float32Array, block: Uint8Array): void {
  quantizeWithMin(x, block, 31, q32);
  packQ5(q32, block, 4);
}

function quantizeQ5_0(x: Float32Array, block: Uint8Array): void {
  quantizeCentred(x, block, 16, q32);
  packQ5(q32, block, 2);
}

/**
 * Q4_K (levels 15) and Q5_K (31): per sub-block of 32 a scale (range / levels)
 * and a min, both quantized to 6 bits against the super-block's largest;
 * returns the values (0–levels), which the caller packs.
 */
function quantizeSuperBlock(x: Float32Array, block: Uint8Array, levels: number): Uint8Array {
  const scales = new Float32Array(8);
  const mins = new Float32Array(8);
  for (let j = 0; j < 8; j++) {
    let lo = 0;
    let hi = 0;
    for (let l = 0; l < 32; l++) {
      lo = Math.min(lo, x[32 * j + l]!);
      hi = Math.max(hi, x[32 * j + l]!);
    }
    scales[j] = (hi - lo) / levels;
    mins[j] = -lo;
  }
  const maxScale = Math.max(...scales);
  const maxMin = Math.max(...mins);
  const inverseScale = maxScale > 0 ? 63 / maxScale : 0;
  const inverseMin = maxMin > 0 ? 63 / maxMin : 0;
  const packed = block.subarray(4, 16);
  packed.fill(0);
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(inverseScale * scales[j]!));
    const lm = Math.min(63, nearestInt(inverseMin * mins[j]!));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      packed[j - 4]! |= (ls >> 4) << 6;
      packed[j]! |= (lm >> 4) << 6;
    }
  }
  const d = setHalf(block, 0, maxScale / 63);
  const dmin = setHalf(block, 2, maxMin / 63);
  const q = new Uint8Array(256);
  for (let j = 0; j < 8; j++) {
    const { scale, min } = q4kScaleMin(packed, j);
    const sd = fround(d * scale);
    if (!sd) continue;
    const sm = fround(dmin * min);
    for (let l = 0; l < 32; l++)
      q[32 * j + l] = Math.max(0, Math.min(levels, nearestInt((x[32 * j + l]! + sm) / sd)));
  }
  return q;
}

function quantizeQ4_K(x: Float32Array, block: Uint8Array): void {
  const q = quantizeSuperBlock(x, block, 15);
  for (let j = 0; j < 4; j++) {
    for (let l = 0; l < 32; l++) block[16 + 32 * j + l] = q[64 * j + l]! | (q[64 * j + 32 + l]! << 4);
  }
}

function quantizeQ5_K(x: Float32Array, block: Uint8Array): void {
  const q = quantizeSuperBlock(x, block, 31);
  const qh = block.subarray(16, 48);
  qh.fill(0);
  for (let j = 0; j < 4; j++) {
    for (let l = 0; l < 32; l++) {
      const lo = q[64 * j + l]!;
      const hi = q[64 * j + 32 + l]!;
      block[48 + 32 * j + l] = (lo & 0xf) | ((hi & 0xf) << 4);
      qh[l]! |= ((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1));
    }
  }
}

function quantizeQ6_K(x: Float32Array, block: Uint8Array): void {
  const scales = new Float32Array(16);
  let maxScale = 0;
  for (let g = 0; g < 16; g++) {
    let max = 0;
    for (let l = 0; l < 16; l++) if (Math.abs(x[16 * g + l]!) > Math.abs(max)) max = x[16 * g + l]!;
    // The signed extreme maps to −32, the end of the range with a step to spare.
    scales[g] = max / -32;
    if (Math.abs(scales[g]!) > Math.abs(maxScale)) maxScale = scales[g]!;
  }
  block.fill(0);
  if (maxScale === 0) return;
  const inverse = -128 / maxScale;
  const d = setHalf(block, 208, 1 / inverse);
  const q = new Uint8Array(256).fill(32);
  for (let g = 0; g < 16; g++) {
    const scale = Math.min(127, nearestInt(inverse * scales[g]!));
    block[192 + g] = scale & 0xff;
    const sd = fround(d * scale);
    if (!sd) continue;
    for (let l = 0; l < 16; l++)
      q[16 * g + l] = Math.max(-32, Math.min(31, nearestInt(x[16 * g + l]! / sd))) + 32;
  }
  for (let h = 0; h < 2; h++) {
    for (let l = 0; l < 32; l++) {
      const e = 128 * h + l;
      block[64 * h + l] = (q[e]! & 0xf) | ((q[e + 64]! & 0xf) << 4);
      block[64 * h + l + 32] = (q[e + 32]! & 0xf) | ((q[e + 96]! & 0xf) << 4);
      block[128 + 32 * h + l] =
        (q[e]! >> 4) | ((q[e + 32]! >> 4) << 2) | ((q[e + 64]! >> 4) << 4) | ((q[e + 96]! >> 4) << 6);
    }
  }
}

const QUANTIZE: Record<GgmlQuantizedType, (x: Float32Array, block: Uint8Array) => void> = {
  Q8_0: quantizeQ8_0,
  Q4_0: quantizeQ4_0,
  Q4_1: quantizeQ4_1,
  Q5_0: quantizeQ5_0,
  Q5_1: quantizeQ5_1,
  Q4_K: quantizeQ4_K,
  Q5_K: quantizeQ5_K,
  Q6_K: quantizeQ6_K,
};

/** `values` as blocks of `type`; their count must be a whole number of blocks. */
export function quantize(type: GgmlQuantizedType, values: Float32Array): Uint8Array {
  const { blockSize, blockBytes } = GGML_TYPES[type];
  const blocks = wholeBlocks(type, values.length, 'values', 'quantize');
  const out = new Uint8Array(blocks * blockBytes);
  const one = QUANTIZE[type];
  for (let b = 0; b < blocks; b++) {
    one(
      values.subarray(b * blockSize, (b + 1) * blockSize),
      out.subarray(b * blockBytes, (b + 1) * blockBytes),
    );
  }
  return out;
}
