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
 * The range of random scales that keep |w| within about 1 over random codes: 128 · 0.008 for
 * the 8-bit formats, 15 · 0.066 for q4 with zero points and for q4g32a (whose offsets, in
 * [0, 1), shift the values into −1 … 1), 15 · 63 · 0.001 for q4k's d (its sub-block scales are
 * 6-bit multiples of it), 31 · 63 · 0.0005 for q5k's, 32 · 128 · 0.00024 for q6k's d (random words make every int8
 * sub-block scale and every code).
 */
export function quantScaleRange(format: QuantFormat): readonly [number, number] {
  const layout = quantLayout(format, 1);
  if (layout.subBlockScales)
    return layout.bits === 6 ? [0.00006, 0.00024] : layout.bits === 5 ? [0.0001, 0.0005] : [0.0002, 0.001];
  // q5g32's (q − 16) and q5g32a's q reach 16 and 31: half q4's scales.
  return layout.bits === 8 ? [0.002, 0.008] : layout.bits === 5 ? [0.01, 0.033] : [0.02, 0.066];
}

/** The upper end of random offsets, from 0: 1, and q4k's and q5k's dmin 1 / 63, as its 6-bit mins multiply it. */
export function quantOffsetLimit(format: QuantFormat): number {
  return quantLayout(format, 1).subBlockScales ? 1 / 63 : 1;
}

/** Scales in `quantScaleRange`. */
export function quantScales(format: QuantFormat, n: number, kd: number): InputSample {
  const layout = quantLayout(format, kd);
  const [lo, hi] = quantScaleRange(format);
  return f32([n, layout.groups], (rng, size) => Array.from({ length: size }, () => rng.uniform(lo, hi)));
}

/** Offsets in [0, `quantOffsetLimit`). */
export function quantOffsets(format: QuantFormat, n: number, kd: number): InputSample | undefined {
  const layout = quantLayout(format, kd);
  if (!layout.offsets) return undefined;
  const hi = quantOffsetLimit(format);
  return f32([n, layout.groups], (rng, size) => Array.from({ length: size }, () => rng.uniform(0, hi)));
}
