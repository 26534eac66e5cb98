import type { Backend, MemoryStats } from '@rayo/core';
import { AdamW, type AdamWOptions, ReplayedStep, type StepResult, trainStep } from '@rayo/train';
import { lossScalerFor } from './lossScaling.js';
import { buildWorkload, samplesPerStep, tokensPerStep, type WorkloadSpec, workloadId } from './workload.js';

/** AdamW as both rayo and the PyTorch baseline run it (PyTorch's defaults, decay on every parameter). */
export const THROUGHPUT_ADAMW = {
  lr: 1e-3,
  beta1: 0.9,
  beta2: 0.999,
  eps: 1e-8,
  weightDecay: 0.01,
} as const satisfies AdamWOptions;

export interface ThroughputOptions {
  /** Untimed steps first (pipelines, modules, allocations warm up). */
  readonly warmup: number;
  /** Timed steps; the median of their times counts. */
  readonly steps: number;
  /** Clip the gradients to this global norm each step (default 1). */
  readonly clipNorm?: number;
  readonly seed?: number;
  /**
   * How the steps run, and what each copies per step besides the step
   * number and learning rate (a few bytes):
   * - `eager` (default): each step recorded and submitted anew
   *   (`trainStep`), reading the batch uploaded once; no batch copy.
   * - `replayed`: recorded once and replayed (`ReplayedStep`), fed the batch
   *   uploaded once as device tensors: each input copied device to device
   *   into the step's fixed inputs, as a loop over a device-resident data
   *   set does (and as PyTorch's CUDA-graph baseline does).
   * - `replayed-host`: the same, fed the batch from the host: each input
   *   written host to device every step, as a loop over host data does.
   */
  readonly mode?: 'eager' | 'replayed' | 'replayed-host';
}

/** Milliseconds of the timed steps, summarised. */
export interface StepTimes {
  readonly medianMs: number;
  readonly p10Ms: number;
  readonly p90Ms: number;
}

/** The device memory a training run reached (the backend's peaks, reset when the run started). */
export interface PeakMemory {
  /** The most bytes in use (tensors, scratch) during the run: PyTorch's `max_memory_allocated`. */
  readonly peakAllocatedBytes: number;
  /** The most bytes held from the device (in use plus cached): PyTorch's `max_memory_reserved`. */
  readonly peakReservedBytes: number;
  /** rayo: bytes already in use when the run started (the cache was emptied first). */
  readonly startAllocatedBytes?: number;
}

export interface ThroughputMeasurement extends StepTimes {
  readonly workload: string;
  readonly samplesPerSecond: number;
  /** Language models only. */
  readonly tokensPerSecond?: number;
  readonly stepsTimed: number;
  /** Loss of the first and the last step: training that diverges shows here. */
  readonly firstLoss: number;
  readonly lastLoss: number;
  /** Absent where the device has no memory statistics (PyTorch on the cpu). */
  readonly memory?: PeakMemory;
}

/** Linear interpolation between the closest ranks of sorted values. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const pos = q * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export function summariseTimes(times: readonly number[]): StepTimes {
  const sorted = [...times].sort((x, y) => x - y);
  return { medianMs: quantile(sorted, 0.5), p10Ms: quantile(sorted, 0.1), p90Ms: quantile(sorted, 0.9) };
}

/**
 * Trains `spec` on `backend` with AdamW (THROUGHPUT_ADAMW) and clipping, and
 * times each step on the host from its start until its loss is read back: the
 * readback waits for the step's work, so each time covers the whole step.
 * Throughput is the batch over the median step time. The device memory the
 * run reaches, warm-up included, is in `memory` (the cache emptied first).
 */
/** A run's peak device memory: the cache emptied and the backend's peaks reset when it starts, as PyTorch's side does. */
class PeakTracker {
  readonly #start: MemoryStats;

  constructor(private readonly backend: Backend) {
    backend.emptyCache();
    backend.resetPeakMemory();
    this.#start = backend.memory();
  }

  result(): PeakMemory {
    const end = this.backend.memory();
    return {
      peakAllocatedBytes: end.peakAllocatedBytes,
      peakReservedBytes: end.peakReservedBytes,
      startAllocatedBytes: this.#start.allocatedBytes,
    };
  }
}

export async function measureThroughput(
  backend: Backend,
  spec: WorkloadSpec,
  options: ThroughputOptions,
): Promise<ThroughputMeasurement> {
  const peak = new PeakTracker(backend);
  const work = buildWorkload(backend, spec, options.seed ?? 0);
  const optimizer = new AdamW(work.model.namedParameters(), THROUGHPUT_ADAMW);
  const lossScaler = lossScalerFor(backend, spec);
  const scaling = lossScaler ? { lossScaler } : {};
  const clipNorm = options.clipNorm ?? 1;
  const mode = options.mode ?? 'eager';
  const replayed =
    mode !== 'eager'
      ? new ReplayedStep({
          backend,
          optimizer,
          inputs: Object.fromEntries(
            Object.entries(work.batch).map(([name, input]) => [
              name,
              { shape: input.shape, dtype: input.dtype },
            ]),
          ),
          loss: (tape, inputs) => work.lossOn(tape, inputs),
          clipNorm,
          ...scaling,
        })
      : undefined;
  const step = (): Promise<StepResult> =>
    replayed
      ? replayed.run(mode === 'replayed' ? work.tensors : work.batch)
      : trainStep({ backend, optimizer, loss: (tape) => work.loss(tape), clipNorm, ...scaling });
  try {
    const times: number[] = [];
    const losses: number[] = [];
    for (let i = 0; i < options.warmup + options.steps; i++) {
      const start = performance.now();
      const { loss } = await step();
      const elapsed = performance.now() - start;
      losses.push(loss!);
      if (i >= options.warmup) times.push(elapsed);
    }
    const memory = peak.result();
    const summary = summariseTimes(times);
    const perSecond = (count: number) => (1000 * count) / summary.medianMs;
    const tokens = tokensPerStep(spec);
    return {
      workload: workloadId(spec),
      samplesPerSecond: perSecond(samplesPerStep(spec)),
      ...(tokens === undefined ? {} : { tokensPerSecond: perSecond(tokens) }),
      ...summary,
      stepsTimed: times.length,
      firstLoss: losses[0]!,
      lastLoss: losses[losses.length - 1]!,
      memory,
    };
  } finally {
    replayed?.dispose();
    optimizer.dispose();
    lossScaler?.dispose();
    work.dispose();
  }
}
