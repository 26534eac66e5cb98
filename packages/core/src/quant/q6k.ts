import {
  Q4K_SUPER_BLOCK,
  Q6K_HIGH_WORDS_AT,
  Q6K_SCALE_WORDS,
  Q6K_SUB_BLOCK,
  Q6K_SUPER_WORDS,
  q6kCode,
  q6kSubBlockScale,
} from './layout.js';
import { nearestQuotient, reciprocalOf } from './rounding.js';

// q6k (GGUF's Q6_K at 6.5625 bits per weight, see layout.ts): its value,
// its codes written into a super-block's words, and a host quantizer in
// ggml's manner (an int8 scale per 16 against a d per 256), simpler than
// ggml's search but giving a weight of the same layout and kind of error.

const fround = Math.fround;
const SUB_BLOCKS = Q4K_SUPER_BLOCK / Q6K_SUB_BLOCK;
const BY_31 = reciprocalOf(31);
const BY_127 = reciprocalOf(127);

/**
 * The value of weight k of a row whose packed words, d and sub-block scale
 * words start at `packedAt`, `scaleAt` and `subAt`: f32(f32(d · sc) · (q − 32)),
 * ggml's f32 rounding.
 */
export function q6kValue(
  packed: ArrayLike<number>,
  k: number,
  d: ArrayLike<number>,
  subScales: ArrayLike<number>,
  at: { readonly packed: number; readonly scale: number; readonly sub: number },
): number {
  const s = k >> 8;
  const q = q6kCode(packed, at.packed + Q6K_SUPER_WORDS * s, k & 255);
  const sc = q6kSubBlockScale(subScales, at.sub + Q6K_SCALE_WORDS * s, (k & 255) >> 4);
  return fround(fround(d[at.scale + s]! * sc) * (q - 32));
}

/** ORs code q (0 … 63) of weight i (0 … 255) into the zeroed super-block whose words start at `packed[at]` (the inverse of `q6kCode`). */
export function putQ6kCode(packed: Uint32Array, at: number, i: number, q: number): void {
  const low = at + (i >> 3);
  packed[low] = (packed[low]! | ((q & 0xf) << (4 * (i & 7)))) >>> 0;
  const high = at + Q6K_HIGH_WORDS_AT + (i >> 4);
  const shift = 8 * ((i & 7) >> 1) + 2 * (2 * ((i >> 3) & 1) + (i & 1));
  packed[high] = (packed[high]! | ((q >> 4) << shift)) >>> 0;
}

/**
 * q6k of a weight [N, K], K a multiple of 256, with d rounded to the scales'
 * storage by `store`: per sub-block of 16 a scale amax / 31, d the largest of
 * them / 127, each int8 scale the nearest multiple of d, and each code the
 * nearest to w / f32(d · sc), within −32 … 31, plus 32. A super-block holding
 * a weight that is not finite gets a NaN d, codes 0 and scales 0.
 */
export function quantizeQ6k(
  w: ArrayLike<number>,
  n: number,
  k: number,
  store: (value: number) => number,
): { packed: Uint32Array; d: Float64Array; subScales: Uint32Array } {
  const blocks = k / Q4K_SUPER_BLOCK;
  const packed = new Uint32Array(n * blocks * Q6K_SUPER_WORDS);
  const d = new Float64Array(n * blocks);
  const subScales = new Uint32Array(n * blocks * Q6K_SCALE_WORDS);
  const amax = new Float64Array(SUB_BLOCKS);
  for (let row = 0; row < n; row++) {
    for (let s = 0; s < blocks; s++) {
      const first = row * k + s * Q4K_SUPER_BLOCK;
      let largest = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < SUB_BLOCKS; j++) {
        let most = 0;
        for (let i = first + j * Q6K_SUB_BLOCK, end = i + Q6K_SUB_BLOCK; i < end; i++)
          most = Math.max(most, Math.abs(w[i]!));
        amax[j] = fround(most * BY_31);
        largest = Math.max(largest, amax[j]!);
      }
      const at = row * blocks + s;
      // A NaN or an infinity carries into the largest amax. Codes and scales stay 0.
      if (!Number.isFinite(largest)) {
        d[at] = Number.NaN;
        continue;
      }
      const dAt = store(fround(largest * BY_127));
      d[at] = dAt;
      for (let j = 0; j < SUB_BLOCKS; j++) {
        const sc = dAt > 0 ? Math.min(127, nearestQuotient(amax[j]!, dAt)) : 0;
        const word = at * Q6K_SCALE_WORDS + (j >> 2);
        subScales[word] = (subScales[word]! | (sc << (8 * (j & 3)))) >>> 0;
        const scale = fround(dAt * sc);
        for (let i = 0; i < Q6K_SUB_BLOCK; i++) {
          const e = j * Q6K_SUB_BLOCK + i;
          const q = scale > 0 ? nearestQuotient(w[first + e]!, scale) : 0;
          putQ6kCode(packed, at * Q6K_SUPER_WORDS, e, Math.min(31, Math.max(-32, q)) + 32);
        }
      }
    }
  }
  return { packed, d, subScales };
}
