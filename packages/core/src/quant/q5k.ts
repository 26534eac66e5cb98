import { Q5K_HIGH_WORDS_AT, q5kHighBit } from './layout.js';
import { quantizeScaleMinSuperBlocks } from './q4k.js';

// q5k (GGUF's Q5_K at 5.5 bits per weight, see layout.ts): q4k with 5-bit
// codes, so its value is q4k's formula (q up to 31) and its host quantizer
// q4k's with 31 levels and a plane of high bits.

export { q4kValue as q5kValue } from './q4k.js';

/**
 * q5k of a weight [N, K], K a multiple of 256, with d and dmin rounded to the
 * scales' storage by `store`: as `quantizeQ4k`, but each sub-block's scale is
 * its range / 31 and each code the nearest to (w + f32(dmin · m)) /
 * f32(d · sc) in 0 … 31. A super-block holding a weight that is not finite
 * gets NaN d and dmin, codes and sc, m 0.
 */
export function quantizeQ5k(
  w: ArrayLike<number>,
  n: number,
  k: number,
  store: (value: number) => number,
): { packed: Uint32Array; d: Float64Array; dmin: Float64Array; subScales: Uint32Array } {
  return quantizeScaleMinSuperBlocks(w, n, k, store, 31);
}

/** ORs code q (0 … 31) of weight i (0 … 255) into the zeroed super-block whose words start at `packed[at]` (the inverse of `q5kCode`). */
export function putQ5kCode(packed: Uint32Array, at: number, i: number, q: number): void {
  const low = at + (i >> 3);
  packed[low] = (packed[low]! | ((q & 0xf) << (4 * (i & 7)))) >>> 0;
  const high = at + Q5K_HIGH_WORDS_AT + (i >> 5);
  packed[high] = (packed[high]! | ((q >> 4) << q5kHighBit(i))) >>> 0;
}
