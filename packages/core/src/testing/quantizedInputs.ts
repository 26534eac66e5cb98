import { type QuantFormat, quantLayout } from '../quant/layout.js';
import { f32, type InputSample } from './cases.js';

/** Random words: every code, the row padding included (a kernel must not count it). */
export function quantWords(shape: readonly number[]): InputSample {
  return {
    shape,
    dtype: 'u32',
    init: (rng, size) => Array.from({ length: size }, () => rng.int(0, 2 ** 32)),
  };
}

/**
 * Scales that keep |w| within about 1: 128 · 0.008 for the 8-bit formats, 15 · 0.066 for
 * q4 with zero points and for q4g32a (whose offsets, in [0, 1), shift the values into −1 … 1).
 */
export function quantScales(format: QuantFormat, n: number, kd: number): InputSample {
  const [lo, hi] = quantLayout(format, kd).bits === 8 ? [0.002, 0.008] : [0.02, 0.066];
  return f32([n, quantLayout(format, kd).groups], (rng, size) =>
    Array.from({ length: size }, () => rng.uniform(lo, hi)),
  );
}
