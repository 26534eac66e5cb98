import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, toHostArray, toNumbers } from './dtype.js';

describe('dtypes', () => {
  it('f16 round-trips every finite half value exactly', () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const exp = (bits >>> 10) & 0x1f;
      if (exp === 0x1f) continue;
      const v = f16BitsToF32(bits);
      const back = f32ToF16Bits(v);
      // +0 and -0 are distinct words; both decode to zero.
      expect(back === bits || (v === 0 && (back & 0x7fff) === 0)).toBe(true);
    }
  });

  it('f16 and bf16 conversion error stays within half an ulp', () => {
    fc.assert(
      fc.property(fc.float({ min: -60000, max: 60000, noNaN: true, noDefaultInfinity: true }), (x) => {
        const h = f16BitsToF32(f32ToF16Bits(x));
        expect(Math.abs(h - x)).toBeLessThanOrEqual(Math.max(Math.abs(x) * 2 ** -11, 2 ** -25));
        const b = bf16BitsToF32(f32ToBf16Bits(x));
        expect(Math.abs(b - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -8 + 1e-38);
      }),
    );
  });

  it('host arrays convert numbers to and from each dtype', () => {
    expect(toHostArray('i32', [1, -2, 3])).toEqual(new Int32Array([1, -2, 3]));
    expect(Array.from(toNumbers('f16', toHostArray('f16', [1.5, -2, 0.25])))).toEqual([1.5, -2, 0.25]);
    expect(Array.from(toNumbers('bf16', toHostArray('bf16', [1.5, -2, 0.25])))).toEqual([1.5, -2, 0.25]);
  });
});
