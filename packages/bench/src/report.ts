import { cpus, totalmem } from 'node:os';
import type { BackendInfo, BackendStatus } from '@rayo/core';
import type { BaselineOutput, TorchComparison } from './baseline.js';
import { compareWithTorch } from './baseline.js';
import { type CaseResult, isFailure, type Timer } from './bench.js';
import type { CaseBound, SuiteMode } from './case.js';
import { perSecondGiga, relativeSpread, type TimingStats } from './timing.js';

/** About three significant digits, without exponent notation. */
function sig(x: number): string {
  const abs = Math.abs(x);
  if (abs >= 100) return x.toFixed(0);
  if (abs >= 10) return x.toFixed(1);
  if (abs >= 1 || abs === 0) return x.toFixed(2);
  return x.toPrecision(2);
}

/** A duration given in milliseconds, in ns, µs, ms or s. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '-';
  if (ms < 1e-3 && ms !== 0) return `${sig(ms * 1e6)} ns`;
  if (ms < 1) return `${sig(ms * 1000)} µs`;
  if (ms < 1000) return `${sig(ms)} ms`;
  return `${sig(ms / 1000)} s`;
}

/** A rate (GFLOP/s, GB/s); `-` when unknown. */
export function formatRate(rate: number | undefined): string {
  return rate === undefined || !Number.isFinite(rate) ? '-' : sig(rate);
}

/** Half the p10–p90 range relative to the median, e.g. `±1.2%`. */
export function formatSpread(stats: TimingStats): string {
  return `±${(relativeSpread(stats) * 100).toFixed(1)}%`;
}

/** A ratio such as `1.52x`; `-` when unknown. */
export function formatRatio(ratio: number | undefined): string {
  return ratio === undefined || !Number.isFinite(ratio) ? '-' : `${sig(ratio)}x`;
}

/** GFLOP/s at the median time, when the work and the time are known. */
export function gflops(result: CaseResult): number | undefined {
  // Data movement does no arithmetic: no rate rather than 0.
  if (!result.timing || !result.cost || result.cost.flops === 0) return undefined;
  return perSecondGiga(result.cost.flops, result.timing.median);
}

/** GB/s at the median time, when the bytes and the time are known. */
export function gbps(result: CaseResult): number | undefined {
  if (!result.timing || !result.cost) return undefined;
  return perSecondGiga(result.cost.bytes, result.timing.median);
}

/** A backend's measured bandwidth ceiling: its device copy. */
export interface Ceiling {
  readonly backend: string;
  readonly case: string;
  /** Bytes read + written per second, in GB/s. */
  readonly gbps: number;
  readonly timer: Timer;
}

/** The ceiling of each backend whose copy was timed. */
export function ceilingsOf(results: readonly CaseResult[]): Map<string, Ceiling> {
  const ceilings = new Map<string, Ceiling>();
  for (const r of results) {
    const rate = gbps(r);
    if (r.ceiling && r.status === 'ok' && rate !== undefined && rate > 0) {
      ceilings.set(r.backend, { backend: r.backend, case: r.id, gbps: rate, timer: r.timer ?? 'host' });
    }
  }
  return ceilings;
}

/**
 * Peak FLOP rates given with `--peak-tflops`: `all` applies to every GPU
 * backend, `byBackend` to the backends it names.
 */
export interface PeakTflops {
  readonly all?: number;
  readonly byBackend?: Readonly<Record<string, number>>;
}

export function peakTflopsFor(
  peak: PeakTflops | undefined,
  backend: string,
  kind: 'cpu' | 'gpu',
): number | undefined {
  return peak?.byBackend?.[backend] ?? (kind === 'gpu' ? peak?.all : undefined);
}

export interface CeilingFraction {
  /** Achieved / ceiling (1 = at the ceiling). */
  readonly fraction: number;
  /** `bandwidth`: the measured copy GB/s; `flops`: the given peak. */
  readonly of: 'bandwidth' | 'flops';
}

/**
 * The fraction of the relevant ceiling a result reached: memory-bound cases
 * against the backend's copy bandwidth, FLOP-bound ones against the peak
 * given (none otherwise); latency-bound cases have none.
 */
export function ceilingFraction(
  r: CaseResult,
  ceilingGbps: number | undefined,
  peakTflops: number | undefined,
): CeilingFraction | undefined {
  if (r.bound === 'bytes') {
    const rate = gbps(r);
    return rate !== undefined && ceilingGbps && ceilingGbps > 0
      ? { fraction: rate / ceilingGbps, of: 'bandwidth' }
      : undefined;
  }
  if (r.bound === 'flops') {
    const rate = gflops(r);
    return rate !== undefined && peakTflops && peakTflops > 0
      ? { fraction: rate / (peakTflops * 1000), of: 'flops' }
      : undefined;
  }
  return undefined;
}

export function formatFraction(f: CeilingFraction | undefined): string {
  if (!f || !Number.isFinite(f.fraction)) return '-';
  const pct = f.fraction * 100;
  return `${pct >= 10 ? pct.toFixed(0) : pct.toPrecision(2)}% ${f.of === 'bandwidth' ? 'bw' : 'fp'}`;
}

/** A result with everything the reports show beside its own numbers. */
export interface AnnotatedResult {
  readonly result: CaseResult;
  readonly ceiling?: CeilingFraction;
  readonly torch?: TorchComparison;
}

export interface ReportContext {
  /** Backend infos (for the kind a plain `--peak-tflops` applies to). */
  readonly backends: readonly BackendInfo[];
  readonly peakTflops?: PeakTflops;
  /** PyTorch's milliseconds per call by case id. */
  readonly torchTimes?: ReadonlyMap<string, number>;
}

export function annotate(results: readonly CaseResult[], context: ReportContext): AnnotatedResult[] {
  const ceilings = ceilingsOf(results);
  const kinds = new Map(context.backends.map((b) => [b.name, b.kind]));
  return results.map((result) => {
    const peak = peakTflopsFor(context.peakTflops, result.backend, kinds.get(result.backend) ?? 'gpu');
    const ceiling = ceilingFraction(result, ceilings.get(result.backend)?.gbps, peak);
    const torch = compareWithTorch(result.timing?.median, context.torchTimes?.get(result.id));
    return { result, ...(ceiling ? { ceiling } : {}), ...(torch ? { torch } : {}) };
  });
}

export const TABLE_COLUMNS = [
  'backend',
  'case',
  'median',
  'spread',
  'timer',
  'GFLOP/s',
  'GB/s',
  'ceiling',
  'status',
] as const;
/** Added when a baseline ran: PyTorch's time, rayo/torch time, rayo/torch throughput. */
export const TORCH_COLUMNS = ['torch', 't/torch', 'thru/torch'] as const;
const RIGHT_ALIGNED = new Set<string>(['median', 'spread', 'GFLOP/s', 'GB/s', 'ceiling', ...TORCH_COLUMNS]);

function columns(withTorch: boolean): string[] {
  return withTorch ? [...TABLE_COLUMNS.slice(0, -1), ...TORCH_COLUMNS, 'status'] : [...TABLE_COLUMNS];
}

/** One row of cells per result, in `columns()` order. */
export function tableRows(annotated: readonly AnnotatedResult[], withTorch = false): string[][] {
  return annotated.map(({ result: r, ceiling, torch }) => [
    r.backend,
    r.id,
    r.timing ? formatDuration(r.timing.median) : '-',
    r.timing ? formatSpread(r.timing) : '-',
    r.timer ?? '-',
    formatRate(gflops(r)),
    formatRate(gbps(r)),
    formatFraction(ceiling),
    ...(withTorch
      ? [
          torch ? formatDuration(torch.torchMs) : '-',
          formatRatio(torch?.timeRatio),
          formatRatio(torch?.throughputRatio),
        ]
      : []),
    r.status,
  ]);
}

/** Annotated results without ceilings or a baseline (tests, quick looks). */
function plain(results: readonly (CaseResult | AnnotatedResult)[]): AnnotatedResult[] {
  return results.map((r) => ('result' in r ? r : { result: r }));
}

/**
 * The terminal table: a header, a rule and one line per result, then one note
 * per case that failed, errored or was skipped. Torch columns appear when a
 * result has a PyTorch time.
 */
export function formatTable(input: readonly (CaseResult | AnnotatedResult)[]): string {
  const annotated = plain(input);
  const withTorch = annotated.some((a) => a.torch);
  const rows = tableRows(annotated, withTorch);
  const header = columns(withTorch);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (RIGHT_ALIGNED.has(header[i]!) ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const out = [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)];
  const notes = annotated.map((a) => a.result).filter((r) => r.status !== 'ok' && r.message);
  if (notes.length) {
    out.push('');
    for (const r of notes) out.push(`${r.status} ${r.backend} ${r.id}: ${r.message}`);
  }
  return `${out.join('\n')}\n`;
}

export interface Summary {
  readonly cases: number;
  readonly ok: number;
  readonly failed: number;
  readonly errors: number;
  readonly skipped: number;
}

export function summarizeResults(results: readonly CaseResult[]): Summary {
  const count = (status: CaseResult['status']) => results.filter((r) => r.status === status).length;
  return {
    cases: results.length,
    ok: count('ok'),
    failed: count('FAILED'),
    errors: count('ERROR'),
    skipped: count('skipped'),
  };
}

export function formatSummary(results: readonly CaseResult[]): string {
  const s = summarizeResults(results);
  const parts = [`${s.ok} ok`, `${s.failed} failed`];
  if (s.errors) parts.push(`${s.errors} errors`);
  if (s.skipped) parts.push(`${s.skipped} skipped`);
  const verdict = results.some(isFailure) ? 'FAILED' : 'passed';
  return `${s.cases} case${s.cases === 1 ? '' : 's'}: ${parts.join(', ')} (${verdict})`;
}

export interface MachineInfo {
  readonly node: string;
  readonly platform: string;
  readonly arch: string;
  readonly cpus: { readonly count: number; readonly model: string };
  readonly memoryBytes: number;
}

/** The machine the benchmark ran on. */
export function machineInfo(): MachineInfo {
  const list = cpus();
  return {
    node: process.version,
    platform: process.platform,
    arch: process.arch,
    cpus: { count: list.length, model: list[0]?.model.trim() ?? 'unknown' },
    memoryBytes: totalmem(),
  };
}

/** Whether and how the PyTorch baseline ran. */
export type BaselineStatus =
  | { readonly status: 'not-run' }
  | { readonly status: 'unavailable'; readonly reason: string }
  | {
      readonly status: 'ok';
      readonly torch?: string;
      readonly cuda?: string | null;
      readonly device?: string;
      readonly settings?: Readonly<Record<string, unknown>>;
    };

export function baselineStatus(output: BaselineOutput): BaselineStatus {
  return {
    status: 'ok',
    ...(output.torch === undefined ? {} : { torch: output.torch }),
    ...(output.cuda === undefined ? {} : { cuda: output.cuda }),
    ...(output.device === undefined ? {} : { device: output.device }),
    ...(output.settings === undefined ? {} : { settings: output.settings }),
  };
}

export interface ReportInput extends ReportContext {
  readonly date: Date;
  readonly mode: SuiteMode;
  readonly filter?: string;
  readonly machine: MachineInfo;
  readonly unavailable: readonly BackendStatus[];
  readonly baseline: BaselineStatus;
  readonly results: readonly CaseResult[];
}

export interface JsonResult {
  readonly backend: string;
  readonly case: string;
  readonly family: string;
  readonly kernel: string;
  readonly status: CaseResult['status'];
  readonly message?: string;
  readonly bound: CaseBound;
  readonly x: number;
  /** `device` or `host`; null when not timed. */
  readonly timer: Timer | null;
  /** Input sets cycled through; null when not timed. */
  readonly sets: number | null;
  /** Calls behind each sample (several per submission on a coarse device clock; a batch's kernels). */
  readonly callsPerSample: number | null;
  /** Milliseconds per call (per kernel for a batch); null when not timed. */
  readonly timeMs: TimingStats | null;
  readonly flops: number | null;
  readonly bytes: number | null;
  readonly gflops: number | null;
  readonly gbps: number | null;
  readonly ceiling: CeilingFraction | null;
  readonly torch: {
    readonly medianMs: number;
    readonly timeRatio: number;
    readonly throughputRatio: number;
  } | null;
}

export interface JsonBackend extends BackendInfo {
  /** The measured copy bandwidth, GB/s; null when the copy was not timed. */
  readonly ceilingGbps: number | null;
  readonly peakTflops: number | null;
}

export interface JsonReport {
  readonly schema: 'rayo-bench/2';
  readonly date: string;
  readonly mode: SuiteMode;
  readonly filter: string | null;
  readonly machine: MachineInfo;
  readonly backends: readonly JsonBackend[];
  readonly unavailable: readonly { readonly name: string; readonly reason: string }[];
  readonly baseline: BaselineStatus;
  readonly summary: Summary;
  readonly results: readonly JsonResult[];
}

function finite(x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : x;
}

export function buildReport(input: ReportInput): JsonReport {
  const ceilings = ceilingsOf(input.results);
  return {
    schema: 'rayo-bench/2',
    date: input.date.toISOString(),
    mode: input.mode,
    filter: input.filter ?? null,
    machine: input.machine,
    backends: input.backends.map((b) => ({
      name: b.name,
      device: b.device,
      kind: b.kind,
      limits: { ...b.limits },
      features: [...b.features],
      ceilingGbps: finite(ceilings.get(b.name)?.gbps),
      peakTflops: finite(peakTflopsFor(input.peakTflops, b.name, b.kind)),
    })),
    unavailable: input.unavailable.map((u) => ({ name: u.name, reason: u.reason ?? 'unavailable' })),
    baseline: input.baseline,
    summary: summarizeResults(input.results),
    results: annotate(input.results, input).map(({ result: r, ceiling, torch }) => ({
      backend: r.backend,
      case: r.id,
      family: r.family,
      kernel: r.kernel,
      status: r.status,
      ...(r.message === undefined ? {} : { message: r.message }),
      bound: r.bound,
      x: r.x,
      timer: r.timer ?? null,
      sets: r.sets ?? null,
      callsPerSample: r.callsPerSample ?? null,
      timeMs: r.timing ?? null,
      flops: finite(r.cost?.flops),
      bytes: finite(r.cost?.bytes),
      gflops: finite(gflops(r)),
      gbps: finite(gbps(r)),
      ceiling: ceiling ?? null,
      torch: torch
        ? { medianMs: torch.torchMs, timeRatio: torch.timeRatio, throughputRatio: torch.throughputRatio }
        : null,
    })),
  };
}

export function formatJson(report: JsonReport): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}
