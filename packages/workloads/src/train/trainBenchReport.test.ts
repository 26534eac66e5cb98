import { describe, expect, it } from 'vitest';
import type { ParityReport } from './parity.js';
import { type PeakMemory, THROUGHPUT_ADAMW, type ThroughputMeasurement } from './throughput.js';
import {
  type BaselineEntry,
  compareWithBaseline,
  exitCodeOf,
  formatMiB,
  formatNumber,
  rayoLabel,
  reportMarkdown,
  summaryTable,
  type ThroughputEntry,
  type TrainBenchReport,
  textTable,
  throughputRatio,
} from './trainBenchReport.js';

const MiB = 2 ** 20;

const measurement = (
  workload: string,
  samplesPerSecond: number,
  memory?: PeakMemory,
): ThroughputMeasurement => ({
  workload,
  ...(memory ? { memory } : {}),
  samplesPerSecond,
  medianMs: 1000 / samplesPerSecond,
  p10Ms: 900 / samplesPerSecond,
  p90Ms: 1100 / samplesPerSecond,
  stepsTimed: 5,
  firstLoss: 2.3,
  lastLoss: 2.1,
});

const throughput: ThroughputEntry[] = [
  {
    backend: 'wgpu',
    workload: 'mlp-a',
    status: 'ok',
    result: measurement('mlp-a', 3000, { peakAllocatedBytes: 3 * MiB, peakReservedBytes: 4 * MiB }),
  },
  {
    backend: 'cuda',
    workload: 'mlp-a',
    status: 'ok',
    result: measurement('mlp-a', 500, { peakAllocatedBytes: 1.5 * MiB, peakReservedBytes: 2 * MiB }),
  },
  { backend: 'wgpu', workload: 'lm-b', status: 'ok', result: measurement('lm-b', 40) },
  {
    backend: 'cuda',
    workload: 'lm-b',
    status: 'unsupported',
    reason: 'lacks rope, softmax',
    missing: ['rope', 'softmax'],
  },
];

const baseline: BaselineEntry = {
  status: 'ok',
  output: {
    schema: 'rayo-train-torch/3',
    available: true,
    torch: '2.11.0',
    device: 'NVIDIA H200',
    results: [
      {
        id: 'mlp-a',
        status: 'ok',
        ...measurement('mlp-a', 1000, { peakAllocatedBytes: 2 * MiB, peakReservedBytes: 4 * MiB }),
        graph: measurement('mlp-a', 2000, { peakAllocatedBytes: 3 * MiB, peakReservedBytes: 6 * MiB }),
      },
      { id: 'lm-b', status: 'error', message: 'RuntimeError: out of memory' },
      {
        id: 'lm-c',
        status: 'ok',
        ...measurement('lm-c', 10),
        graph: { error: 'RuntimeError: not capturable' },
      },
    ],
  },
};

const parityReport = (passed: boolean): ParityReport => ({
  passed,
  backends: ['wgpu', 'cuda'],
  model: 'mlp',
  steps: [
    {
      step: 1,
      lossA: 2.5,
      lossB: 2.5001,
      lossDiff: 1e-4,
      gradNormA: 3,
      gradNormB: 3.03,
      gradNormRelDiff: 0.01,
    },
  ],
  maxLossDiff: 1e-4,
  maxGradNormRelDiff: 0.01,
  lossTolerance: 1e-3,
  gradNormTolerance: 0.05,
  kernels: ['adamwStep'],
  failures: passed ? [] : ['step 1: loss 2.5 vs 2.6 (|Δ| 0.1 > 0.001)'],
});

function report(): TrainBenchReport {
  return {
    schema: 'rayo-train-bench/2',
    createdAt: '2025-01-01T00:00:00.000Z',
    node: '20.0.0',
    settings: {
      backends: ['wgpu', 'cuda'],
      parity: ['wgpu', 'cuda'],
      quick: false,
      warmup: 5,
      steps: 30,
      paritySteps: 8,
      seed: 0,
      clipNorm: 1,
      adamw: THROUGHPUT_ADAMW,
    },
    backends: [
      { name: 'wgpu', available: true, device: 'nvidia-h200' },
      { name: 'cuda', available: true, device: 'NVIDIA H200 (sm_90, 132 SMs)' },
    ],
    workloads: [
      { id: 'mlp-a', kind: 'mlp', sizes: [4, 2], activation: 'relu', batch: 8 },
      { id: 'lm-b', kind: 'transformer', vocab: 8, dim: 4, heads: 1, hidden: 8, blocks: 1, seq: 2, batch: 1 },
    ],
    parity: [
      { model: 'mlp', backends: ['wgpu', 'cuda'], status: 'passed', report: parityReport(true) },
      {
        model: 'transformer',
        backends: ['wgpu', 'cuda'],
        status: 'skipped',
        reason: "backend 'cuda' lacks kernels the transformer training step runs: rope",
      },
    ],
    throughput,
    baseline,
    comparisons: compareWithBaseline(throughput, baseline),
  };
}

describe('train-bench report', () => {
  it('divides rayo by PyTorch throughput only when both are positive and finite', () => {
    expect(throughputRatio(300, 100)).toBe(3);
    expect(throughputRatio(0, 100)).toBeUndefined();
    expect(throughputRatio(100, undefined)).toBeUndefined();
    expect(throughputRatio(Number.POSITIVE_INFINITY, 1)).toBeUndefined();
    expect(throughputRatio(Number.NaN, 1)).toBeUndefined();
  });

  it('compares each rayo measurement with the PyTorch result of its workload', () => {
    expect(compareWithBaseline(throughput, baseline)).toEqual([
      {
        backend: 'wgpu',
        workload: 'mlp-a',
        rayoSamplesPerSecond: 3000,
        torchSamplesPerSecond: 1000,
        ratio: 3,
        torchGraphSamplesPerSecond: 2000,
        graphRatio: 1.5,
        peakAllocatedRatio: 1.5,
        graphPeakAllocatedRatio: 1,
      },
      {
        backend: 'cuda',
        workload: 'mlp-a',
        rayoSamplesPerSecond: 500,
        torchSamplesPerSecond: 1000,
        ratio: 0.5,
        torchGraphSamplesPerSecond: 2000,
        graphRatio: 0.25,
        peakAllocatedRatio: 0.75,
        graphPeakAllocatedRatio: 0.5,
      },
    ]);
    expect(compareWithBaseline(throughput, { status: 'unavailable', reason: 'no torch' })).toEqual([]);
    // A replayed measurement keeps its mode, and the tables tell it from the eager one.
    const first = throughput[0]!;
    const replayed = { ...first, mode: 'replayed' as const };
    const compared = compareWithBaseline([first, replayed], baseline);
    expect(compared.map((c) => [c.backend, c.mode])).toEqual([
      ['wgpu', undefined],
      ['wgpu', 'replayed'],
    ]);
    expect(rayoLabel(replayed)).toBe('wgpu replayed');
    expect(rayoLabel({ ...first, mode: 'replayed-host' })).toBe('wgpu replayed host-fed');
    expect(rayoLabel(first)).toBe('wgpu');
  });

  it('fails the run on a failed or crashed parity check, not on a skipped one', () => {
    const r = report();
    expect(exitCodeOf(r)).toBe(0);
    const failed = {
      parity: [
        { model: 'mlp', backends: ['a', 'b'], status: 'failed', report: parityReport(false) },
      ] as const,
    };
    expect(exitCodeOf(failed)).toBe(1);
    expect(
      exitCodeOf({ parity: [{ model: 'mlp', backends: ['a', 'b'], status: 'error', reason: 'x' }] }),
    ).toBe(1);
  });

  it('formats numbers compactly', () => {
    expect(formatNumber(undefined)).toBe('—');
    expect(formatNumber(123456.7, 4)).toBe('123457');
    expect(formatNumber(0.5)).toBe('0.5');
    expect(formatNumber(2.384185791015625e-7, 2)).toBe('2.4e-7');
    expect(formatNumber(0)).toBe('0');
    expect(textTable(['a', 'bb'], [['xyz', '1']])).toBe('a    bb\n---  --\nxyz  1');
    expect(formatMiB(1.5 * MiB)).toBe('1.5');
    expect(formatMiB(undefined)).toBe('—');
  });

  it('puts verdicts, ratios and the reasons for what did not run into the summary', () => {
    const text = summaryTable(report());
    expect(text).toMatch(/mlp: wgpu vs cuda\s+passed\s+1\.0e-4 \(tol 0\.001\)\s+0\.01 \(tol 0\.05\)/);
    expect(text).toMatch(/transformer: wgpu vs cuda\s+skipped/);
    expect(text).toMatch(/mlp-a\s+wgpu\s+3000\s+0\.333\s+1000\s+3\s+2000\s+1\.5\s+3\s+1\.5\s+1\n/);
    expect(text).toMatch(/mlp-a\s+cuda\s+500\s+2\s+1000\s+0\.5\s+2000\s+0\.25\s+1\.5\s+0\.75\s+0\.5\n/);
    expect(text).toMatch(/wgpu\s+40\s+25\s+—\s+—\s+—\s+—\s+—\s+—\s+—\n/);
    expect(text).toMatch(/lm-b\s+cuda\s+unsupported\n/);
    expect(text).toContain('lm-b on cuda: unsupported: lacks rope, softmax');
    expect(text).toContain("parity transformer: wgpu vs cuda: backend 'cuda' lacks");
    expect(text.trimEnd().split('\n').at(-1)).toBe('torch 2.11.0 on NVIDIA H200');
  });

  it('writes per-step parity tables and the throughput table in Markdown', () => {
    const md = reportMarkdown(report());
    expect(md).toContain('### mlp: wgpu vs cuda: passed');
    // A pipe in a cell is escaped, so that the table keeps its columns.
    expect(md).toContain('| step | loss wgpu | loss cuda | \\|Δloss\\| |');
    expect(md).toContain('| 1 | 2.500000 | 2.500100 | 1.0e-4 | 3.000000 | 3.030000 | 0.01 |');
    expect(md).toContain('### transformer: wgpu vs cuda: skipped');
    expect(md).toContain('| mlp-a | cuda | 500 | — | 2 | 1.8–2.2 | 5 | 1000 | 0.5 | 2000 | 0.25 |');
    expect(md).toContain('- lm-c, CUDA graph: RuntimeError: not capturable');
    expect(md).toContain('| lm-b | cuda | unsupported: lacks rope, softmax |');
    expect(md).toContain('- lm-b: RuntimeError: out of memory');
  });

  it('tabulates the peak device memory of each workload against PyTorch’s', () => {
    const md = reportMarkdown(report());
    expect(md).toContain('## Peak device memory');
    const section = md.slice(md.indexOf('### mlp-a'), md.indexOf('## PyTorch baseline'));
    expect(section).toContain(
      '| run | peak allocated MiB | peak reserved MiB | allocated / torch eager | allocated / torch graph |',
    );
    expect(section).toContain('| rayo wgpu | 3 | 4 | 1.5 | 1 |');
    expect(section).toContain('| rayo cuda | 1.5 | 2 | 0.75 | 0.5 |');
    expect(section).toContain('| torch eager | 2 | 4 |  |  |');
    expect(section).toContain('| torch graph | 3 | 6 |  |  |');
    // A workload with no memory figures on either side gets no table.
    expect(md).not.toContain('### lm-b');
  });
});
