import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, toHostArray, toNumbers } from './dtype.js';

const isNaNBits = (bits: number, expMask: number, mantMask: number) =>
  (bits & expMask) === expMask && (bits & mantMask) !== 0;

/** Every word of a 16-bit format decodes and encodes back to itself (NaNs to a NaN). */
function expectRoundTrip(decode: (b: number) => number, encode: (v: number) => number, expMask: number) {
  const mantMask = 0x7fff & ~expMask;
  for (let bits = 0; bits < 0x10000; bits++) {
    const back = encode(decode(bits));
    if (isNaNBits(bits, expMask, mantMask)) expect(isNaNBits(back, expMask, mantMask)).toBe(true);
    else if (back !== bits) expect.fail(`0x${bits.toString(16)} came back as 0x${back.toString(16)}`);
  }
}

describe('f16', () => {
  it('round-trips all 65536 words, ±0 and ±Inf included', () => {
    expectRoundTrip(f16BitsToF32, f32ToF16Bits, 0x7c00);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
    expect(f16BitsToF32(0x7c00)).toBe(Number.POSITIVE_INFINITY);
    expect(f16BitsToF32(0xfc00)).toBe(Number.NEGATIVE_INFINITY);
  });

  it('rounds halfway cases to the even word', () => {
    // 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10.
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00);
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(f32ToF16Bits(-(1 + 2 ** -11))).toBe(0xbc00);
    // Just above halfway rounds up: the double is rounded once, not through f32.
    expect(f32ToF16Bits(1 + 2 ** -11 + 2 ** -40)).toBe(0x3c01);
  });

  it('handles the subnormal boundaries', () => {
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001);
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000); // tie to even (zero)
    expect(f32ToF16Bits(2 ** -25 + 2 ** -50)).toBe(0x0001);
    expect(f32ToF16Bits(3 * 2 ** -25)).toBe(0x0002); // tie 1.5 steps → 2
    expect(f32ToF16Bits(-(2 ** -26))).toBe(0x8000);
    expect(f32ToF16Bits(2 ** -14)).toBe(0x0400); // smallest normal
    expect(f32ToF16Bits(2 ** -14 - 2 ** -25)).toBe(0x0400); // carry out of the subnormals, tie to even
    expect(f32ToF16Bits(2 ** -14 - 2 ** -24)).toBe(0x03ff); // largest subnormal
  });

  it('overflows to Inf at the halfway point past the largest finite value', () => {
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65519.99)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00);
    expect(f32ToF16Bits(-1e30)).toBe(0xfc00);
    expect(f32ToF16Bits(Number.POSITIVE_INFINITY)).toBe(0x7c00);
    expect(f32ToF16Bits(Number.NEGATIVE_INFINITY)).toBe(0xfc00);
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(Number.NaN)))).toBe(true);
  });
});

describe('bf16', () => {
  it('round-trips all 65536 words, ±0 and ±Inf included', () => {
    expectRoundTrip(bf16BitsToF32, f32ToBf16Bits, 0x7f80);
    expect(f32ToBf16Bits(-0)).toBe(0x8000);
  });

  it('rounds halfway cases to even, subnormals and overflow included', () => {
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f32ToBf16Bits(1 + 2 ** -8 + 2 ** -40)).toBe(0x3f81);
    expect(f32ToBf16Bits(2 ** -133)).toBe(0x0001);
    expect(f32ToBf16Bits(2 ** -134)).toBe(0x0000);
    expect(f32ToBf16Bits(3 * 2 ** -134)).toBe(0x0002);
    expect(f32ToBf16Bits(2 ** -126)).toBe(0x0080);
    const maxFinite = (2 - 2 ** -7) * 2 ** 127;
    expect(f32ToBf16Bits(maxFinite)).toBe(0x7f7f);
    expect(f32ToBf16Bits((2 - 2 ** -8) * 2 ** 127)).toBe(0x7f80);
    expect(f32ToBf16Bits(-1e300)).toBe(0xff80);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(Number.NaN)))).toBe(true);
  });
});

describe('host conversions', () => {
  it('f16 and bf16 conversion error stays within half an ulp', () => {
    fc.assert(
      fc.property(fc.double({ min: -60000, max: 60000, noNaN: true }), (x) => {
        const h = f16BitsToF32(f32ToF16Bits(x));
        expect(Math.abs(h - x)).toBeLessThanOrEqual(Math.max(Math.abs(x) * 2 ** -11, 2 ** -25));
        const b = bf16BitsToF32(f32ToBf16Bits(x));
        expect(Math.abs(b - x)).toBeLessThanOrEqual(Math.max(Math.abs(x) * 2 ** -8, 2 ** -134));
      }),
    );
  });

  it('host arrays convert numbers to and from each dtype', () => {
    expect(toHostArray('i32', [1, -2, 3])).toEqual(new Int32Array([1, -2, 3]));
    expect(Array.from(toNumbers('f16', toHostArray('f16', [1.5, -2, 0.25])))).toEqual([1.5, -2, 0.25]);
    expect(Array.from(toNumbers('bf16', toHostArray('bf16', [1.5, -2, 0.25])))).toEqual([1.5, -2, 0.25]);
  });
});
