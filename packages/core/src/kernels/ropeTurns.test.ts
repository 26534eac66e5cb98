import { describe, expect, it } from 'vitest';
import { frequencyTurns64, inverseTwoPiFixed } from './ropeTurns.js';

describe('ropeTurns', () => {
  it('holds 1 / 2π to f64 precision and beyond', () => {
    expect(Number(inverseTwoPiFixed(64)) / 2 ** 64).toBe(1 / (2 * Math.PI));
    expect(inverseTwoPiFixed(120) >> 56n).toBe(inverseTwoPiFixed(64));
    expect(inverseTwoPiFixed(2)).toBe(0n);
    expect(() => inverseTwoPiFixed(123)).toThrow(RangeError);
  });

  it('gives turns per position as a 64-bit fraction', () => {
    expect(frequencyTurns64(0)).toBe(0n);
    expect(frequencyTurns64(1)).toBe(inverseTwoPiFixed(64));
    expect(frequencyTurns64(0.5)).toBe(inverseTwoPiFixed(63));
    // 2π radians per position is a whole turn: nothing is left of it.
    const whole = frequencyTurns64(2 * Math.PI);
    expect(whole < 2n ** 12n || whole > 2n ** 64n - 2n ** 12n).toBe(true);
    for (const f of [1e-5, 0.0123, 0.7, 2 ** -40]) {
      expect(Number(frequencyTurns64(f)) / 2 ** 64).toBeCloseTo(f / (2 * Math.PI), 15);
    }
  });

  it('puts the angle of a large position within 1e-9 radians of the exact one', () => {
    // position · f with f = 0.5: 2^24 · 0.5 = 2^23 radians; its turn fraction from the
    // f64 reduction (exact here: 2^23 is exact and Math.sin reduces exactly).
    const position = 2n ** 24n - 8n;
    const turns = (position * frequencyTurns64(0.5)) & (2n ** 64n - 1n);
    const angle = (Number(turns) / 2 ** 64) * 2 * Math.PI;
    const exact = Number(position) * 0.5;
    expect(Math.abs(Math.sin(angle) - Math.sin(exact))).toBeLessThan(1e-9);
    expect(Math.abs(Math.cos(angle) - Math.cos(exact))).toBeLessThan(1e-9);
  });
});
