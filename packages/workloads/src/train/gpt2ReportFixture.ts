import { THROUGHPUT_ADAMW } from './throughput.js';
import type { TorchTrainResult } from './torchTrainBaseline.js';
import type { TrainBenchReport } from './trainBenchReport.js';

// The parts of a made-up train-bench report of GPT-2 small on one H200 that
// the report sections' tests share (batch 8 of 1,024 tokens).

/** A timed run of `medianMs` a step whose peak allocation was `peakAllocatedBytes`. */
export function gpt2Timed(medianMs: number, peakAllocatedBytes: number) {
  return {
    samplesPerSecond: 8000 / medianMs,
    tokensPerSecond: (8 * 1024 * 1000) / medianMs,
    medianMs,
    p10Ms: medianMs,
    p90Ms: medianMs,
    stepsTimed: 3,
    firstLoss: 11,
    lastLoss: 10,
    memory: { peakAllocatedBytes, peakReservedBytes: 2 * peakAllocatedBytes },
  };
}

/** The report's settings for a cuda run of the gpt2 suite, with `extra` settings added. */
export function gpt2Settings(
  extra: Partial<TrainBenchReport['settings']> = {},
): TrainBenchReport['settings'] {
  return {
    backends: ['cuda'],
    parity: ['cpu', 'cuda'],
    quick: false,
    warmup: 1,
    steps: 3,
    paritySteps: 2,
    seed: 0,
    clipNorm: 1,
    adamw: THROUGHPUT_ADAMW,
    suite: 'gpt2',
    ...extra,
  };
}

/** A cuda run of `workload` that timed a step of `medianMs` peaking at `peakAllocatedBytes`. */
export function gpt2Throughput(
  workload: string,
  mode: 'eager' | 'replayed',
  medianMs: number,
  peakAllocatedBytes: number,
) {
  return {
    backend: 'cuda',
    workload,
    mode,
    status: 'ok',
    result: { workload, ...gpt2Timed(medianMs, peakAllocatedBytes) },
  } as const;
}

/** The report of a cuda run on an H200 with PyTorch's `torchResults` beside it (no parity runs). */
export function gpt2Report(parts: {
  readonly settings: TrainBenchReport['settings'];
  readonly workloads: TrainBenchReport['workloads'];
  readonly throughput: TrainBenchReport['throughput'];
  readonly torchResults: readonly TorchTrainResult[];
}): TrainBenchReport {
  return {
    schema: 'rayo-train-bench/2',
    createdAt: '2026-01-01T00:00:00.000Z',
    node: '20',
    settings: parts.settings,
    backends: [{ name: 'cuda', available: true, device: 'H200' }],
    workloads: parts.workloads,
    parity: [],
    throughput: parts.throughput,
    baseline: {
      status: 'ok',
      output: { schema: 'rayo-train-torch/3', available: true, results: parts.torchResults },
    },
    comparisons: [],
  };
}
