import { describe, expect, it } from 'vitest';
import { Rng } from '../testing/random.js';
import { quantLayout } from './layout.js';
import { quantizeFinite, quantizeWeights } from './quantize.js';
import { nearestQuotient, positiveZero, reciprocalOf } from './rounding.js';

const fround = Math.fround;

describe('quantizing arithmetic', () => {
  it('rounds the exact quotient to nearest, ties up, even where the rounded quotient is off', () => {
    expect(nearestQuotient(2.5, 1)).toBe(3);
    expect(nearestQuotient(-2.5, 1)).toBe(-2);
    expect(nearestQuotient(0.5, 1)).toBe(1);
    expect(nearestQuotient(-0.5, 1)).toBe(-0);
    // An f32 just below 3.5 · 0.1 (exactly) rounds down to 3.
    const scale = fround(0.1);
    const below = fround(3.5 * scale) < 3.5 * scale ? fround(3.5 * scale) : fround(3.5 * scale - 2 ** -25);
    expect(below).toBeLessThan(3.5 * scale);
    expect(nearestQuotient(below, scale)).toBe(3);
    const rng = new Rng(5);
    for (let i = 0; i < 2000; i++) {
      const s = fround(rng.uniform(1e-3, 2));
      const t = fround(rng.uniform(-130, 130) * s);
      const q = nearestQuotient(t, s);
      // Exactly: t − (q − ½)·s ≥ 0 > t − (q + ½)·s, products of at most 34 bits.
      expect(t - (q - 0.5) * s).toBeGreaterThanOrEqual(0);
      expect(t - (q + 0.5) * s).toBeLessThan(0);
    }
  });

  it('forms scales as f32 products by f32 reciprocals, and counts ±0 as +0', () => {
    expect(reciprocalOf(7)).toBe(fround(1 / 7));
    expect(Object.is(positiveZero(-0), 0)).toBe(true);
    const w = Float32Array.of(0.7, -0.3, 0.1);
    const q = quantizeWeights(w, [1, 3], 'q8', {});
    expect(q.scales[0]).toBe(fround(fround(0.7) * reciprocalOf(127)));
  });

  it('refuses weights that are not finite, naming where; the device rule marks the group instead', () => {
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const w = Float32Array.from({ length: 70 }, (_, i) => (i === 40 ? bad : i / 100));
      expect(() => quantizeWeights(w, [2, 35], 'q4g32')).toThrow(/row 1, column 5/);
      const marked = quantizeFinite(w, 2, 35, 'q4g32', true, 'f16');
      const layout = quantLayout('q4g32', 35);
      // Row 1's first group is NaN with codes and zero point 0; every other group is quantized.
      expect(marked.scales[layout.groups]).toBe(0x7e00);
      expect(marked.packed.subarray(layout.rowWords, layout.rowWords + 4)).toEqual(new Uint32Array(4));
      expect(marked.zeros![1]! & 0xf).toBe(0);
      expect(marked.scales[0]).not.toBe(0x7e00);
      expect(marked.scales[layout.groups + 1]).not.toBe(0x7e00);
    }
  });
});
