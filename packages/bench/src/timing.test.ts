import { describe, expect, it } from 'vitest';
import {
  FULL_TIMING,
  L2_BYTES,
  measure,
  median,
  nextCallsPerSample,
  perSecondGiga,
  QUICK_TIMING,
  quantile,
  relativeSpread,
  rotationSets,
  scaleStats,
  summarize,
} from './timing.js';

const NO_ROTATION = { rotateBytes: 0, maxSets: 1, deviceSampleMs: 0, maxCallsPerSample: 1 };

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
  // A kernel that takes `stepMs` on a clock that only it advances. By row:
  // warm-up runs are excluded and at least minReps timed; warm-up stops early
  // once it takes the target time (two runs reach 600 ms > 500 ms, then five
  // timed runs); runs repeat until the target time is measured; maxReps stops them.
  it.each`
    stepMs   | warmup | minReps | maxReps | targetMs | samples | calls
    ${1000}  | ${2}   | ${5}    | ${100}  | ${5000}  | ${5}    | ${7}
    ${300}   | ${3}   | ${5}    | ${100}  | ${500}   | ${5}    | ${7}
    ${2}     | ${0}   | ${5}    | ${1000} | ${100}   | ${50}   | ${50}
    ${0.001} | ${1}   | ${5}    | ${20}   | ${500}   | ${20}   | ${21}
  `(
    '$stepMs ms a call, warmup $warmup, $minReps to $maxReps reps, target $targetMs ms: $samples samples of $calls calls',
    async ({ stepMs, warmup, minReps, maxReps, targetMs, samples, calls }) => {
      let t = 0;
      let called = 0;
      const timed = await measure(
        async () => {
          called++;
          t += stepMs;
        },
        { warmup, minReps, maxReps, targetMs, now: () => t, ...NO_ROTATION },
      );
      expect(timed).toHaveLength(samples);
      for (const sample of timed) expect(sample).toBeCloseTo(stepMs, 9);
      expect(called).toBe(calls);
    },
  );
});

describe('device time', () => {
  it('takes the time a repetition reports, and passes the repetition index', async () => {
    let t = 0;
    const reps: number[] = [];
    const samples = await measure(
      async (rep) => {
        reps.push(rep);
        t += 10; // 10 ms of host time per call …
        return 0.25 * (rep + 1); // … of which the device reports less
      },
      { warmup: 2, minReps: 3, maxReps: 3, targetMs: 1000, now: () => t, ...NO_ROTATION },
    );
    expect(reps).toEqual([0, 1, 2, 3, 4]);
    expect(samples).toEqual([0.75, 1, 1.25]);
  });

  it('counts host time towards the target even when the device reports less', async () => {
    let t = 0;
    const samples = await measure(
      async () => {
        t += 10;
        return 0.001;
      },
      { warmup: 0, minReps: 1, maxReps: 1000, targetMs: 100, now: () => t, ...NO_ROTATION },
    );
    expect(samples).toHaveLength(10);
  });
});

describe('calls per device-timed sample', () => {
  it('grow until a sample lasts the target, within the cap', () => {
    // 1 call in 0.1 ms, 2 ms wanted: 25 calls (with a quarter to spare)
    expect(nextCallsPerSample(1, 0.1, 2, 1024)).toBe(25);
    expect(nextCallsPerSample(25, 2.5, 2, 1024)).toBe(25);
    expect(nextCallsPerSample(1, 5, 2, 1024)).toBe(1);
    // a clock that reads 0: eight times as many calls
    expect(nextCallsPerSample(1, 0, 2, 1024)).toBe(8);
    expect(nextCallsPerSample(512, 0, 2, 1024)).toBe(1024);
    expect(nextCallsPerSample(1024, 0, 2, 1024)).toBe(1024);
    expect(nextCallsPerSample(1, 0.001, 2, 16)).toBe(16);
  });
});

describe('rotation', () => {
  it('rotates working sets that fit in L2, up to maxSets', () => {
    const options = { rotateBytes: 256e6, maxSets: 64 };
    expect(rotationSets(L2_BYTES + 1, options)).toBe(1);
    expect(rotationSets(L2_BYTES, options)).toBe(6);
    expect(rotationSets(16e6, options)).toBe(16);
    expect(rotationSets(1000, options)).toBe(64);
    expect(rotationSets(0, options)).toBe(1);
    expect(rotationSets(4e6, { rotateBytes: 16e6, maxSets: 8 })).toBe(4);
  });

  it('is bounded in both modes', () => {
    expect(QUICK_TIMING.maxSets).toBeLessThanOrEqual(FULL_TIMING.maxSets);
    expect(QUICK_TIMING.rotateBytes).toBeLessThan(FULL_TIMING.rotateBytes);
  });
});

describe('scaleStats', () => {
  it('scales every time and keeps the sample count', () => {
    const s = scaleStats(summarize([1000, 2000, 3000]), 1 / 1000);
    expect(s.samples).toBe(3);
    expect(s.median).toBeCloseTo(2);
    expect(s.min).toBeCloseTo(1);
    expect(s.max).toBeCloseTo(3);
    expect(relativeSpread(s)).toBeCloseTo(relativeSpread(summarize([1000, 2000, 3000])));
  });
});

describe('rates', () => {
  it('turns an amount and milliseconds into giga-per-second', () => {
    expect(perSecondGiga(2e9, 1000)).toBeCloseTo(2);
    expect(perSecondGiga(2 * 256 ** 3, 1)).toBeCloseTo(33.554432);
    expect(perSecondGiga(1e6, 0)).toBeNaN();
  });
});
