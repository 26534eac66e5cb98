import type { ThroughputMeasurement } from './throughput.js';
import type { TorchGraphResult } from './torchTrainBaseline.js';
import {
  formatMiB,
  formatNumber,
  rayoLabel,
  reportSection,
  type TrainBenchReport,
  textTable,
} from './trainBenchReport.js';
import { type WorkloadSpec, workloadId } from './workload.js';

type Timed = Pick<ThroughputMeasurement, 'tokensPerSecond' | 'memory'>;

/** One run of a checkpointed language model beside the same run keeping every activation. */
export interface CheckpointRow {
  /** The workload without checkpointing. */
  readonly workload: string;
  /** The policy's name: `blocks`, `every2`, … */
  readonly policy: string;
  readonly run: string;
  readonly tokensPerSecond: number | undefined;
  readonly checkpointedTokensPerSecond: number | undefined;
  readonly peakAllocatedBytes: number | undefined;
  readonly checkpointedPeakAllocatedBytes: number | undefined;
}

function ratio(a: number | undefined, b: number | undefined): number | undefined {
  return a !== undefined && b !== undefined && b > 0 ? a / b : undefined;
}

function timedOf(result: TorchGraphResult | undefined): Timed | undefined {
  return result && 'medianMs' in result ? result : undefined;
}

/** The policy's name of a checkpointed language model, else undefined. */
function policyOf(spec: WorkloadSpec): string | undefined {
  if (spec.kind !== 'transformer' || spec.checkpoint === undefined) return undefined;
  const id = workloadId(spec);
  const plain = workloadId({ ...spec, checkpoint: 'none' });
  return id === plain ? undefined : id.slice(plain.length + '-ckpt-'.length);
}

/**
 * Every run (rayo's backends and modes, PyTorch eager and graph) of every
 * checkpointed workload whose plain twin ran the same way too.
 */
export function checkpointRows(report: TrainBenchReport): CheckpointRow[] {
  const rows: CheckpointRow[] = [];
  for (const spec of report.workloads) {
    const policy = policyOf(spec);
    if (policy === undefined || spec.kind !== 'transformer') continue;
    const plain = workloadId({ ...spec, checkpoint: 'none' });
    if (!report.workloads.some((w) => w.id === plain)) continue;
    const row = (run: string, without: Timed, withIt: Timed): CheckpointRow => ({
      workload: plain,
      policy,
      run,
      tokensPerSecond: without.tokensPerSecond,
      checkpointedTokensPerSecond: withIt.tokensPerSecond,
      peakAllocatedBytes: without.memory?.peakAllocatedBytes,
      checkpointedPeakAllocatedBytes: withIt.memory?.peakAllocatedBytes,
    });
    for (const e of report.throughput) {
      if (e.workload !== spec.id || e.status !== 'ok') continue;
      const twin = report.throughput.find(
        (t) =>
          t.workload === plain &&
          t.backend === e.backend &&
          (t.mode ?? 'eager') === (e.mode ?? 'eager') &&
          t.status === 'ok',
      );
      if (twin?.status === 'ok') rows.push(row(`rayo ${rayoLabel(e)}`, twin.result, e.result));
    }
    if (report.baseline.status !== 'ok') continue;
    const results = report.baseline.output.results;
    const withIt = results.find((r) => r.id === spec.id);
    const without = results.find((r) => r.id === plain);
    if (withIt?.status !== 'ok' || without?.status !== 'ok') continue;
    rows.push(row('torch eager', without, withIt));
    const [graphWithout, graphWith] = [timedOf(without.graph), timedOf(withIt.graph)];
    if (graphWithout && graphWith) rows.push(row('torch graph', graphWithout, graphWith));
  }
  return rows;
}

const HEADER = [
  'workload',
  'checkpoint',
  'run',
  'tokens/s without',
  'tokens/s with',
  'speed with/without',
  'peak MiB without',
  'peak MiB with',
  'peak with/without',
];

function cells(r: CheckpointRow): string[] {
  return [
    r.workload,
    r.policy,
    r.run,
    formatNumber(r.tokensPerSecond, 4),
    formatNumber(r.checkpointedTokensPerSecond, 4),
    formatNumber(ratio(r.checkpointedTokensPerSecond, r.tokensPerSecond)),
    formatMiB(r.peakAllocatedBytes),
    formatMiB(r.checkpointedPeakAllocatedBytes),
    formatNumber(ratio(r.checkpointedPeakAllocatedBytes, r.peakAllocatedBytes)),
  ];
}

/** The report's activation checkpointing section (markdown); empty without a checkpointed workload and its twin. */
export function checkpointMarkdown(report: TrainBenchReport): string {
  return reportSection(
    'Activation checkpointing',
    'Each language model with its checkpointed blocks keeping only their inputs and running their ' +
      'forward again in backward, beside the same model keeping every activation, run the same way: ' +
      'tokens per second at the median step and the peak of allocated device memory (warm-up ' +
      'included). Below 1, speed with/without is the recompute’s cost and peak with/without the memory ' +
      'it saves.',
    HEADER,
    checkpointRows(report).map(cells),
  );
}

/** The same rows as a text table, for the terminal. */
export function checkpointSummary(report: TrainBenchReport): string {
  const rows = checkpointRows(report);
  return rows.length === 0 ? '' : `${textTable(HEADER, rows.map(cells))}\n`;
}
