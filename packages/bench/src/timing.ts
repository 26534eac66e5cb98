/** Summary of repeated timings, in milliseconds. */
export interface TimingStats {
  readonly samples: number;
  readonly median: number;
  readonly mean: number;
  readonly min: number;
  readonly max: number;
  /** 10th and 90th percentiles (linear interpolation between order statistics). */
  readonly p10: number;
  readonly p90: number;
  /** Median absolute deviation from the median. */
  readonly mad: number;
}

/** The `q` quantile (0..1) of ascending `sorted`, interpolating linearly. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) throw new RangeError('quantile of no samples');
  const pos = Math.min(Math.max(q, 0), 1) * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = sorted[lo]!;
  const b = sorted[hi]!;
  return a + (b - a) * (pos - lo);
}

export function median(values: readonly number[]): number {
  return quantile(
    [...values].sort((a, b) => a - b),
    0.5,
  );
}

export function summarize(samples: readonly number[]): TimingStats {
  if (samples.length === 0) throw new RangeError('no timing samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = quantile(sorted, 0.5);
  return {
    samples: sorted.length,
    median: mid,
    mean: sorted.reduce((sum, x) => sum + x, 0) / sorted.length,
    min: sorted[0]!,
    max: sorted[sorted.length - 1]!,
    p10: quantile(sorted, 0.1),
    p90: quantile(sorted, 0.9),
    mad: median(sorted.map((x) => Math.abs(x - mid))),
  };
}

/** Half the p10–p90 range relative to the median: `0.02` reads ±2%. */
export function relativeSpread(stats: TimingStats): number {
  return stats.median > 0 ? (stats.p90 - stats.p10) / 2 / stats.median : 0;
}

export interface TimingOptions {
  /** Untimed runs first (compilation, caches, clocks), fewer once they took `targetMs`. */
  readonly warmup: number;
  /** Timed repetitions, at least. */
  readonly minReps: number;
  /** Timed repetitions, at most. */
  readonly maxReps: number;
  /** Keep repeating (past `minReps`) until this much time was measured. */
  readonly targetMs: number;
  /** Clock in milliseconds (`performance.now` by default). */
  readonly now?: () => number;
}

export const QUICK_TIMING: TimingOptions = { warmup: 1, minReps: 5, maxReps: 200, targetMs: 100 };
export const FULL_TIMING: TimingOptions = { warmup: 3, minReps: 5, maxReps: 2000, targetMs: 500 };

/**
 * Runs `once` up to `warmup` times untimed (fewer when that takes `targetMs`), then times repetitions until at least
 * `minReps` ran and `targetMs` was measured, or `maxReps` ran. `once` must
 * return only when the work it started has finished (e.g. after
 * `await backend.sync()`). Returns the durations in milliseconds.
 */
export async function measure(once: () => Promise<void>, options: TimingOptions): Promise<number[]> {
  const now = options.now ?? (() => performance.now());
  // Warm-up stops early once it has taken the target time (slow cases need no more).
  const warmStart = now();
  for (let i = 0; i < options.warmup && now() - warmStart < options.targetMs; i++) await once();
  const samples: number[] = [];
  let total = 0;
  while (samples.length < options.maxReps && (samples.length < options.minReps || total < options.targetMs)) {
    const start = now();
    await once();
    const elapsed = now() - start;
    samples.push(elapsed);
    total += elapsed;
  }
  return samples;
}

/** GFLOP/s (or GB/s, given bytes) of `amount` done in `ms` milliseconds. */
export function perSecondGiga(amount: number, ms: number): number {
  return ms > 0 ? amount / (ms * 1e-3) / 1e9 : Number.NaN;
}
