import type { ThroughputMeasurement } from './throughput.js';
import type { TorchGraphResult } from './torchTrainBaseline.js';
import { formatMiB, formatNumber, rayoLabel, type TrainBenchReport, textTable } from './trainBenchReport.js';
import { trainingFlopsPerStep } from './workload.js';

/** One run of one workload: its speed, memory, and the model FLOPs it sustained. */
export interface MfuRow {
  readonly workload: string;
  readonly run: string;
  readonly tokensPerSecond: number | undefined;
  readonly medianMs: number;
  readonly peakAllocatedBytes: number | undefined;
  /** Model FLOPs per second (see `trainingFlopsPerStep`), in TFLOP/s. */
  readonly tflops: number;
  /** `tflops` over the peak given on the command line; absent without one. */
  readonly mfu?: number;
}

type Timed = Pick<ThroughputMeasurement, 'medianMs' | 'tokensPerSecond' | 'memory'>;

function timedOf(result: TorchGraphResult | undefined): Timed | undefined {
  return result && 'medianMs' in result ? result : undefined;
}

/** Every timed run of every workload, rayo's and PyTorch's, with its model FLOPs utilisation. */
export function mfuRows(report: TrainBenchReport): MfuRow[] {
  const peak = report.settings.peakTflops;
  const rows: MfuRow[] = [];
  for (const spec of report.workloads) {
    const flops = trainingFlopsPerStep(spec);
    const row = (run: string, t: Timed): MfuRow => {
      const tflops = flops / (t.medianMs / 1000) / 1e12;
      return {
        workload: spec.id,
        run,
        tokensPerSecond: t.tokensPerSecond,
        medianMs: t.medianMs,
        peakAllocatedBytes: t.memory?.peakAllocatedBytes,
        tflops,
        ...(peak === undefined ? {} : { mfu: tflops / peak }),
      };
    };
    for (const e of report.throughput) {
      if (e.workload === spec.id && e.status === 'ok') rows.push(row(`rayo ${rayoLabel(e)}`, e.result));
    }
    const torch =
      report.baseline.status === 'ok'
        ? report.baseline.output.results.find((r) => r.id === spec.id)
        : undefined;
    if (torch?.status !== 'ok') continue;
    const runs: [string, Timed | undefined][] = [
      ['torch eager', torch],
      ['torch graph', timedOf(torch.graph)],
      ['torch compile', timedOf(torch.compiled)],
    ];
    for (const [run, t] of runs) if (t) rows.push(row(run, t));
  }
  return rows;
}

const HEADER = ['workload', 'run', 'tokens/s', 'median ms', 'peak MiB', 'model TFLOP/s', 'MFU'];

function cells(r: MfuRow): string[] {
  return [
    r.workload,
    r.run,
    formatNumber(r.tokensPerSecond, 4),
    formatNumber(r.medianMs),
    formatMiB(r.peakAllocatedBytes),
    formatNumber(r.tflops),
    r.mfu === undefined ? '—' : `${(100 * r.mfu).toFixed(1)}%`,
  ];
}

/** The report's model FLOPs utilisation section (markdown). */
export function mfuMarkdown(report: TrainBenchReport): string {
  const rows = mfuRows(report);
  if (rows.length === 0) return '';
  const peak = report.settings.peakTflops;
  const table = [
    `| ${HEADER.join(' | ')} |`,
    `| ${HEADER.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${cells(r).join(' | ')} |`),
  ];
  return [
    '',
    '## Model FLOPs utilisation',
    '',
    'Model FLOPs of a step: 6 per weight of a matrix product per token (forward and backward) and ' +
      '12 · blocks · dim · seq per token for attention’s products, over the median step time. ' +
      (peak === undefined
        ? 'No peak was given (`--peak-tflops`), so no MFU.'
        : `MFU is that over the peak given on the command line, ${peak} TFLOP/s.`),
    '',
    ...table,
    '',
  ].join('\n');
}

/** The same rows as a text table, for the terminal. */
export function mfuSummary(report: TrainBenchReport): string {
  const rows = mfuRows(report);
  return rows.length === 0 ? '' : `${textTable(HEADER, rows.map(cells))}\n`;
}
