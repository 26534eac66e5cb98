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

/**
 * The nearest word to `x` of a 16-bit format, by search over every finite
 * positive word (their values grow with the word): ties go to the even word,
 * and past the largest finite word to Inf from its halfway point on.
 */
function nearestBySearch(x: number, decode: (bits: number) => number, inf: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  let lo = 0;
  let hi = inf - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (decode(mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  const below = decode(lo);
  const above = lo + 1 === inf ? below + (below - decode(lo - 1)) : decode(lo + 1);
  if (a === below) return sign | lo;
  const up = a - below > above - a || (a - below === above - a && (lo & 1) === 1);
  return sign | (up ? lo + 1 : lo);
}

describe('f32 inputs', () => {
  it('round from the f32 bits to the nearest f16 and bf16 words, as a double would', () => {
    const f32 = new Float32Array(1);
    const bits = new Uint32Array(f32.buffer);
    let state = 12345;
    for (let i = 0; i < 200_000; i++) {
      // A linear congruential walk over every exponent, subnormals and the largest values included.
      state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
      bits[0] = state;
      const x = f32[0]!;
      if (Number.isNaN(x) || !Number.isFinite(x)) continue;
      const f16 = f32ToF16Bits(x);
      const bf16 = f32ToBf16Bits(x);
      if (
        f16 !== nearestBySearch(x, f16BitsToF32, 0x7c00) ||
        bf16 !== nearestBySearch(x, bf16BitsToF32, 0x7f80)
      ) {
        expect.fail(`${x} (0x${state.toString(16)}): f16 0x${f16.toString(16)}, bf16 0x${bf16.toString(16)}`);
      }
    }
    for (const x of [Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      expect(f32ToF16Bits(x)).toBe(x > 0 ? 0x7c00 : 0xfc00);
      expect(f32ToBf16Bits(x)).toBe(x > 0 ? 0x7f80 : 0xff80);
    }
    bits[0] = 0xffc00001; // a negative NaN with a payload: the quiet NaN, as from a double
    expect(f32ToF16Bits(f32[0]!)).toBe(0x7e00);
    expect(f32ToBf16Bits(f32[0]!)).toBe(0x7fc0);
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
