import {
  Q4K_SUB_BLOCK,
  Q4K_SUB_SCALE_WORDS,
  Q4K_SUPER_BLOCK,
  Q5K_HIGH_WORDS_AT,
  Q5K_SUPER_WORDS,
  q5kHighBit,
  subBlockScaleMin,
} from './layout.js';
import { nearestQuotient, positiveZero, reciprocalOf } from './rounding.js';

// q4k (GGUF's Q4_K at 4.5 bits per weight, see layout.ts): its value, and a
// host quantizer (shared with q5k, which adds a bit per code) in ggml's manner (a scale and min per 32, quantized to
// 6 bits against a d and dmin per 256), simpler than ggml's search but
// giving a weight of the same layout and the same kind of error.

const fround = Math.fround;
const SUB_BLOCKS = Q4K_SUPER_BLOCK / Q4K_SUB_BLOCK;
const BY_15 = reciprocalOf(15);
const BY_31 = reciprocalOf(31);
const BY_63 = reciprocalOf(63);

/**
 * The value of code q of weight k of a row whose super-block scales, offsets
 * and sub-block words start at `scaleAt`, `scaleAt` and `subAt`:
 * f32(f32(q · f32(d · sc)) − f32(dmin · m)), ggml's f32 rounding.
 */
export function q4kValue(
  q: number,
  k: number,
  d: ArrayLike<number>,
  dmin: ArrayLike<number>,
  subScales: ArrayLike<number>,
  scaleAt: number,
  subAt: number,
): number {
  const s = Math.floor(k / Q4K_SUPER_BLOCK);
  const { sc, m } = subBlockScaleMin(subScales, subAt + Q4K_SUB_SCALE_WORDS * s, (k >> 5) & 7);
  return fround(fround(q * fround(d[scaleAt + s]! * sc)) - fround(dmin[scaleAt + s]! * m));
}

/** Writes 6-bit sc and m of sub-block j into a super-block's twelve bytes (the inverse of `subBlockScaleMin`). */
function putScaleMin(bytes: Uint8Array, j: number, sc: number, m: number): void {
  if (j < 4) {
    bytes[j] = (bytes[j]! & 0xc0) | sc;
    bytes[j + 4] = (bytes[j + 4]! & 0xc0) | m;
    return;
  }
  bytes[j + 4] = (sc & 0xf) | ((m & 0xf) << 4);
  bytes[j - 4] = (bytes[j - 4]! & 0x3f) | ((sc >> 4) << 6);
  bytes[j] = (bytes[j]! & 0x3f) | ((m >> 4) << 6);
}

/**
 * q4k of a weight [N, K], K a multiple of 256, with d and dmin rounded to the
 * scales' storage by `store`: per sub-block the range [min(0, lo), hi] gives
 * a scale (range / 15) and a min (−min(0, lo)); d and dmin are the largest of
 * them / 63, sc and m the nearest 6-bit multiples, and each code the nearest
 * to (w + f32(dmin · m)) / f32(d · sc) in 0 … 15. A super-block holding a
 * weight that is not finite gets NaN d and dmin, codes and sc, m 0.
 */
export function quantizeQ4k(
  w: ArrayLike<number>,
  n: number,
  k: number,
  store: (value: number) => number,
): { packed: Uint32Array; d: Float64Array; dmin: Float64Array; subScales: Uint32Array } {
  return quantizeScaleMinSuperBlocks(w, n, k, store, 15);
}

/**
 * q4k (`levels` 15) or q5k (31, see q5k.ts) of a weight [N, K]: the same
 * scales and mins, the codes 0 … levels; q5k's high bits go to the
 * super-block's words 32 + j (see layout.ts), q4k has none.
 */
export function quantizeScaleMinSuperBlocks(
  w: ArrayLike<number>,
  n: number,
  k: number,
  store: (value: number) => number,
  levels: 15 | 31,
): { packed: Uint32Array; d: Float64Array; dmin: Float64Array; subScales: Uint32Array } {
  const blocks = k / Q4K_SUPER_BLOCK;
  const superWords = levels === 31 ? Q5K_SUPER_WORDS : Q4K_SUPER_BLOCK / 8;
  const byLevels = levels === 31 ? BY_31 : BY_15;
  const packed = new Uint32Array(n * blocks * superWords);
  const d = new Float64Array(n * blocks);
  const dmin = new Float64Array(n * blocks);
  const subScales = new Uint32Array(n * blocks * Q4K_SUB_SCALE_WORDS);
  const bytes = new Uint8Array(4 * Q4K_SUB_SCALE_WORDS);
  const scales = new Float64Array(SUB_BLOCKS);
  const mins = new Float64Array(SUB_BLOCKS);
  for (let row = 0; row < n; row++) {
    for (let s = 0; s < blocks; s++) {
      const first = row * k + s * Q4K_SUPER_BLOCK;
      let largestScale = Number.NEGATIVE_INFINITY;
      let largestMin = Number.NEGATIVE_INFINITY;
      let finite = true;
      for (let j = 0; j < SUB_BLOCKS; j++) {
        let lo = 0;
        let hi = 0;
        for (let i = first + j * Q4K_SUB_BLOCK, end = i + Q4K_SUB_BLOCK; i < end; i++) {
          const v = w[i]!;
          lo = Math.min(lo, v);
          hi = Math.max(hi, v);
        }
        // A NaN carries into lo and hi, an infinity into one of them.
        finite &&= Number.isFinite(lo) && Number.isFinite(hi);
        scales[j] = fround(fround(positiveZero(hi) - positiveZero(lo)) * byLevels);
        mins[j] = positiveZero(-lo);
        largestScale = Math.max(largestScale, scales[j]!);
        largestMin = Math.max(largestMin, mins[j]!);
      }
      const at = row * blocks + s;
      if (!finite) {
        // Codes and sub-block words stay 0.
        d[at] = Number.NaN;
        dmin[at] = Number.NaN;
        continue;
      }
      const dAt = store(fround(largestScale * BY_63));
      const dminAt = store(fround(largestMin * BY_63));
      d[at] = dAt;
      dmin[at] = dminAt;
      bytes.fill(0);
      const superAt = at * superWords;
      for (let j = 0; j < SUB_BLOCKS; j++) {
        const sc = dAt > 0 ? Math.min(63, nearestQuotient(scales[j]!, dAt)) : 0;
        const m = dminAt > 0 ? Math.min(63, nearestQuotient(mins[j]!, dminAt)) : 0;
        putScaleMin(bytes, j, sc, m);
        const scale = fround(dAt * sc);
        const offset = fround(dminAt * m);
        // A sub-block is four whole words of eight codes: each word made at once (q5k: and its high bits).
        const base = first + j * Q4K_SUB_BLOCK;
        let high = 0;
        for (let word = 0; word < Q4K_SUB_BLOCK / 8; word++) {
          let bits = 0;
          for (let i = 0; i < 8; i++) {
            const q = scale > 0 ? nearestQuotient(fround(w[base + 8 * word + i]! + offset), scale) : 0;
            const code = Math.min(levels, Math.max(0, q));
            bits |= (code & 0xf) << (4 * i);
            high |= (code >> 4) << q5kHighBit(8 * word + i);
          }
          packed[superAt + 4 * j + word] = bits >>> 0;
        }
        if (levels === 31) packed[superAt + Q5K_HIGH_WORDS_AT + j] = high >>> 0;
      }
      for (let i = 0; i < Q4K_SUB_SCALE_WORDS; i++) {
        const b = 4 * i;
        subScales[at * Q4K_SUB_SCALE_WORDS + i] =
          (bytes[b]! | (bytes[b + 1]! << 8) | (bytes[b + 2]! << 16) | (bytes[b + 3]! << 24)) >>> 0;
      }
    }
  }
  return { packed, d, dmin, subScales };
}
