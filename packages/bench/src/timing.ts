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
  /** Keep repeating (past `minReps`) until this much wall time was spent timing. */
  readonly targetMs: number;
  /**
   * Inputs whose working set fits in a GPU's L2 cache are rotated: this many
   * bytes of input sets are allocated and cycled through, at most `maxSets`.
   */
  readonly rotateBytes: number;
  readonly maxSets: number;
  /**
   * A device-timed sample records calls into one submission until it takes
   * at least this long (device clocks can be coarse: Dawn rounds timestamps
   * to 65.536 µs unless told not to), at most `maxCallsPerSample`.
   */
  readonly deviceSampleMs: number;
  readonly maxCallsPerSample: number;
  /** Clock in milliseconds (`performance.now` by default). */
  readonly now?: () => number;
}

export const QUICK_TIMING: TimingOptions = {
  warmup: 1,
  minReps: 5,
  maxReps: 200,
  targetMs: 100,
  rotateBytes: 16 * 2 ** 20,
  maxSets: 8,
  deviceSampleMs: 1,
  maxCallsPerSample: 1024,
};
export const FULL_TIMING: TimingOptions = {
  warmup: 3,
  minReps: 5,
  maxReps: 2000,
  targetMs: 500,
  rotateBytes: 256 * 2 ** 20,
  maxSets: 64,
  deviceSampleMs: 2,
  maxCallsPerSample: 1024,
};

/** Working sets up to this size are rotated (the L2 of an H100 or H200 is 50 MB). */
export const L2_BYTES = 50e6;

/** How many input sets to cycle through for a working set of `bytes`. */
export function rotationSets(bytes: number, options: Pick<TimingOptions, 'rotateBytes' | 'maxSets'>): number {
  if (bytes <= 0 || bytes > L2_BYTES) return 1;
  return Math.max(1, Math.min(options.maxSets, Math.ceil(options.rotateBytes / bytes)));
}

/**
 * One repetition, given its index. Resolves when the work it started has
 * finished (e.g. after `await backend.sync()`), to the milliseconds a device
 * clock measured, or to undefined: then the host time around the call counts.
 */
export type Repetition = (rep: number) => Promise<number | undefined> | Promise<void>;

/**
 * Runs `once` up to `warmup` times untimed (fewer when that takes
 * `targetMs`), then repeats it until at least `minReps` ran and `targetMs` of
 * wall time was spent, or `maxReps` ran. Returns the durations in
 * milliseconds: the device's where `once` resolves to one, else the host's.
 */
export async function measure(once: Repetition, options: TimingOptions): Promise<number[]> {
  const now = options.now ?? (() => performance.now());
  let rep = 0;
  // Warm-up stops early once it has taken the target time (slow cases need no more).
  const warmStart = now();
  for (let i = 0; i < options.warmup && now() - warmStart < options.targetMs; i++) await once(rep++);
  const samples: number[] = [];
  let total = 0;
  while (samples.length < options.maxReps && (samples.length < options.minReps || total < options.targetMs)) {
    const start = now();
    const device = await once(rep++);
    const elapsed = now() - start;
    samples.push(typeof device === 'number' ? device : elapsed);
    total += elapsed;
  }
  return samples;
}

/**
 * How many calls one device-timed sample needs to last `targetMs`, given
 * that `calls` calls took `ms` (0 when the clock could not resolve them),
 * at most `max`. Returns `calls` when the sample is long enough already.
 */
export function nextCallsPerSample(calls: number, ms: number, targetMs: number, max: number): number {
  if (ms >= targetMs || calls >= max) return calls;
  const wanted = ms > 0 ? Math.ceil((calls * targetMs * 1.25) / ms) : calls * 8;
  return Math.min(max, Math.max(wanted, calls + 1));
}

/**
 * The calls per device-timed sample: one sample of one call first (it is the
 * first warm-up run too), then more calls until a sample lasts
 * `deviceSampleMs`, at most `maxCallsPerSample`. Resolves to undefined when
 * the first sample has no device time (the device has no clock). The PyTorch
 * baseline script's `calibrate_calls` follows the same rule.
 */
export async function calibrateCalls(
  sample: (calls: number) => Promise<number | undefined>,
  options: Pick<TimingOptions, 'deviceSampleMs' | 'maxCallsPerSample'>,
): Promise<number | undefined> {
  let calls = 1;
  let ms = await sample(calls);
  if (ms === undefined) return undefined;
  for (;;) {
    const next = nextCallsPerSample(calls, ms ?? 0, options.deviceSampleMs, options.maxCallsPerSample);
    if (next === calls) return calls;
    calls = next;
    ms = await sample(calls);
  }
}

/** The same statistics for `factor` times the samples (per kernel of a batch, say). */
export function scaleStats(stats: TimingStats, factor: number): TimingStats {
  return {
    samples: stats.samples,
    median: stats.median * factor,
    mean: stats.mean * factor,
    min: stats.min * factor,
    max: stats.max * factor,
    p10: stats.p10 * factor,
    p90: stats.p90 * factor,
    mad: stats.mad * factor,
  };
}

/** GFLOP/s (or GB/s, given bytes) of `amount` done in `ms` milliseconds. */
export function perSecondGiga(amount: number, ms: number): number {
  return ms > 0 ? amount / (ms * 1e-3) / 1e9 : Number.NaN;
}
