import { describe, expect, it } from 'vitest';
import { measure, median, perSecondGiga, quantile, relativeSpread, summarize } from './timing.js';

describe('quantile and median', () => {
  it('interpolates between order statistics', () => {
    expect(quantile([1, 2, 3, 4], 0.5)).toBe(2.5);
    expect(quantile([10, 20], 0.1)).toBeCloseTo(11);
    expect(quantile([5], 0.9)).toBe(5);
    expect(quantile([1, 2, 3], 0)).toBe(1);
    expect(quantile([1, 2, 3], 1)).toBe(3);
  });

  it('takes the median of unsorted values without changing them', () => {
    const values = [9, 1, 5, 3, 7];
    expect(median(values)).toBe(5);
    expect(values).toEqual([9, 1, 5, 3, 7]);
    expect(median([4, 1, 3, 2])).toBe(2.5);
  });

  it('rejects no samples', () => {
    expect(() => quantile([], 0.5)).toThrow(RangeError);
    expect(() => summarize([])).toThrow(RangeError);
  });
});

describe('summarize', () => {
  it('computes median, mean, min, max, p10, p90 and MAD', () => {
    const s = summarize([5, 1, 4, 2, 3, 100]);
    expect(s.samples).toBe(6);
    expect(s.median).toBe(3.5);
    expect(s.mean).toBeCloseTo(115 / 6);
    expect(s.min).toBe(1);
    expect(s.max).toBe(100);
    // sorted 1 2 3 4 5 100: p10 at position 0.5, p90 at 4.5
    expect(s.p10).toBeCloseTo(1.5);
    expect(s.p90).toBeCloseTo(52.5);
    // |x − 3.5| = 2.5 1.5 0.5 0.5 1.5 96.5 → median 1.5
    expect(s.mad).toBe(1.5);
  });

  it('gives zero spread for identical samples', () => {
    const s = summarize([2, 2, 2, 2, 2]);
    expect(s.mad).toBe(0);
    expect(relativeSpread(s)).toBe(0);
  });

  it('measures spread as half the p10–p90 range over the median', () => {
    const s = summarize([9, 10, 10, 10, 11]);
    expect(relativeSpread(s)).toBeCloseTo((s.p90 - s.p10) / 2 / 10);
  });
});

describe('measure', () => {
  function fakeClock(stepMs: number) {
    let t = 0;
    let calls = 0;
    return {
      now: () => t,
      once: async () => {
        calls++;
        t += stepMs;
      },
      calls: () => calls,
    };
  }

  it('excludes warm-up runs and repeats at least minReps times', async () => {
    const clock = fakeClock(1000);
    const samples = await measure(clock.once, {
      warmup: 2,
      minReps: 5,
      maxReps: 100,
      targetMs: 5000,
      now: clock.now,
    });
    expect(samples).toEqual([1000, 1000, 1000, 1000, 1000]);
    expect(clock.calls()).toBe(7);
  });

  it('warms up less when warm-up runs already take the target time', async () => {
    const clock = fakeClock(300);
    await measure(clock.once, { warmup: 3, minReps: 5, maxReps: 100, targetMs: 500, now: clock.now });
    // two warm-up runs reach 600 ms > 500 ms, then five timed runs
    expect(clock.calls()).toBe(7);
  });

  it('repeats until the target time is measured', async () => {
    const clock = fakeClock(2);
    const samples = await measure(clock.once, {
      warmup: 0,
      minReps: 5,
      maxReps: 1000,
      targetMs: 100,
      now: clock.now,
    });
    expect(samples.length).toBe(50);
  });

  it('stops at maxReps', async () => {
    const clock = fakeClock(0.001);
    const samples = await measure(clock.once, {
      warmup: 1,
      minReps: 5,
      maxReps: 20,
      targetMs: 500,
      now: clock.now,
    });
    expect(samples.length).toBe(20);
  });
});

describe('rates', () => {
  it('turns an amount and milliseconds into giga-per-second', () => {
    expect(perSecondGiga(2e9, 1000)).toBeCloseTo(2);
    expect(perSecondGiga(2 * 256 ** 3, 1)).toBeCloseTo(33.554432);
    expect(perSecondGiga(1e6, 0)).toBeNaN();
  });
});
