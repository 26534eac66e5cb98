import {
  formatNumber,
  rayoLabel,
  reportSection,
  type TrainBenchReport,
  textTable,
} from './trainBenchReport.js';
import { workloadId } from './workload.js';

/** One rayo run of a workload under a reduced policy beside the same run in f32. */
export interface PrecisionRow {
  /** The workload in f32. */
  readonly workload: string;
  readonly precision: string;
  readonly run: string;
  readonly samplesPerSecond: number;
  readonly f32SamplesPerSecond: number;
}

/**
 * Every rayo run (backend and mode) of every workload under a policy other
 * than f32 whose f32 twin ran the same way: the comparison `--precision
 * f32,f16` is for.
 */
export function precisionRows(report: TrainBenchReport): PrecisionRow[] {
  const rows: PrecisionRow[] = [];
  for (const spec of report.workloads) {
    const precision = spec.precision ?? 'f32';
    if (precision === 'f32') continue;
    const f32 = workloadId({ ...spec, precision: 'f32' });
    for (const e of report.throughput) {
      if (e.workload !== spec.id || e.status !== 'ok') continue;
      const twin = report.throughput.find(
        (t) =>
          t.workload === f32 &&
          t.backend === e.backend &&
          (t.mode ?? 'eager') === (e.mode ?? 'eager') &&
          t.status === 'ok',
      );
      if (twin?.status !== 'ok') continue;
      rows.push({
        workload: f32,
        precision,
        run: `rayo ${rayoLabel(e)}`,
        samplesPerSecond: e.result.samplesPerSecond,
        f32SamplesPerSecond: twin.result.samplesPerSecond,
      });
    }
  }
  return rows;
}

const HEADER = ['workload', 'precision', 'run', 'samples/s f32', 'samples/s', 'speed / f32'];

function cells(r: PrecisionRow): string[] {
  return [
    r.workload,
    r.precision,
    r.run,
    formatNumber(r.f32SamplesPerSecond, 4),
    formatNumber(r.samplesPerSecond, 4),
    formatNumber(r.samplesPerSecond / r.f32SamplesPerSecond),
  ];
}

/** The report's precision section (markdown); empty without a reduced-precision workload and its f32 twin. */
export function precisionMarkdown(report: TrainBenchReport): string {
  return reportSection(
    'Precision policies',
    'Each workload under a reduced precision policy beside the same workload in f32, run the same way ' +
      'on the same backend: samples per second at the median step. Above 1, speed / f32 is what the ' +
      'policy gains (f16 includes its loss scaling).',
    HEADER,
    precisionRows(report).map(cells),
  );
}

/** The same rows as a text table, for the terminal. */
export function precisionSummary(report: TrainBenchReport): string {
  const rows = precisionRows(report);
  return rows.length === 0 ? '' : `${textTable(HEADER, rows.map(cells))}\n`;
}
