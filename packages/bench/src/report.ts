import { cpus, totalmem } from 'node:os';
import type { BackendInfo, BackendStatus } from '@rayo/core';
import type { BaselineOutput, BaselineTime, TorchComparison } from './baseline.js';
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

/**
 * The memory bandwidth a backend's memory-bound cases are held to: the
 * fastest device copy measured on its device in this run. Every GPU backend
 * of a run shares the GPU, so they share one limit (the best of their copies
 * and PyTorch's); a cpu backend keeps its own.
 */
export interface MemoryLimit {
  readonly gbps: number;
  /** Who measured it: `wgpu copy/256MiB`, `PyTorch copy/256MiB`. */
  readonly source: string;
}

export function memoryLimits(
  results: readonly CaseResult[],
  backends: readonly Pick<BackendInfo, 'name' | 'kind'>[],
  torchTimes: ReadonlyMap<string, BaselineTime> = new Map(),
): Map<string, MemoryLimit> {
  const ceilings = ceilingsOf(results);
  let gpu: MemoryLimit | undefined;
  const offer = (limit: MemoryLimit) => {
    if (!gpu || limit.gbps > gpu.gbps) gpu = limit;
  };
  for (const b of backends) {
    const c = ceilings.get(b.name);
    if (b.kind === 'gpu' && c) offer({ gbps: c.gbps, source: `${b.name} ${c.case}` });
  }
  for (const r of results) {
    const torch = torchTimes.get(r.id);
    if (r.ceiling && r.cost && torch && backends.some((b) => b.name === r.backend && b.kind === 'gpu')) {
      offer({ gbps: perSecondGiga(r.cost.bytes, torch.ms), source: `PyTorch ${r.id}` });
    }
  }
  const limits = new Map<string, MemoryLimit>();
  for (const b of backends) {
    const own = ceilings.get(b.name);
    if (b.kind === 'gpu' && gpu) limits.set(b.name, gpu);
    else if (own) limits.set(b.name, { gbps: own.gbps, source: `${b.name} ${own.case}` });
  }
  return limits;
}

/**
 * What a perfect kernel would do: move the case's bytes at the measured
 * bandwidth (memory-bound cases) or do its FLOPs at the given peak
 * (FLOP-bound cases). Latency-bound cases have no limit.
 */
export interface HardwareLimit {
  readonly of: 'bandwidth' | 'flops';
  /** Milliseconds per call at the limit. */
  readonly ms: number;
  /** Limit time / rayo's time: 1 is at the limit. */
  readonly fraction: number;
  /** Limit time / PyTorch's time, where PyTorch ran the case. */
  readonly torchFraction?: number;
}

export function hardwareLimit(
  r: CaseResult,
  limitGbps: number | undefined,
  peakTflops: number | undefined,
  torchMs?: number,
): HardwareLimit | undefined {
  if (!r.timing || !r.cost || !(r.timing.median > 0)) return undefined;
  let of: HardwareLimit['of'];
  let ms: number;
  if (r.bound === 'bytes' && limitGbps && limitGbps > 0) {
    of = 'bandwidth';
    ms = (r.cost.bytes / (limitGbps * 1e9)) * 1e3;
  } else if (r.bound === 'flops' && peakTflops && peakTflops > 0 && r.cost.flops > 0) {
    of = 'flops';
    ms = (r.cost.flops / (peakTflops * 1e12)) * 1e3;
  } else {
    return undefined;
  }
  return {
    of,
    ms,
    fraction: ms / r.timing.median,
    ...(torchMs !== undefined && torchMs > 0 ? { torchFraction: ms / torchMs } : {}),
  };
}

/** `85% bw`, `40% fp`; `-` when there is no limit. */
export function formatFraction(fraction: number | undefined, of?: HardwareLimit['of']): string {
  if (fraction === undefined || !Number.isFinite(fraction)) return '-';
  const pct = fraction * 100;
  const suffix = of === undefined ? '' : of === 'bandwidth' ? ' bw' : ' fp';
  return `${pct >= 10 ? pct.toFixed(0) : pct.toPrecision(2)}%${suffix}`;
}

/** A result with everything the reports show beside its own numbers. */
export interface AnnotatedResult {
  readonly result: CaseResult;
  readonly limit?: HardwareLimit;
  readonly torch?: TorchComparison;
}

export interface ReportContext {
  /** Backend infos (for the kind a plain `--peak-tflops` applies to). */
  readonly backends: readonly BackendInfo[];
  readonly peakTflops?: PeakTflops;
  /** PyTorch's time per call by case id. */
  readonly torchTimes?: ReadonlyMap<string, BaselineTime>;
}

export function annotate(results: readonly CaseResult[], context: ReportContext): AnnotatedResult[] {
  const limits = memoryLimits(results, context.backends, context.torchTimes);
  const kinds = new Map(context.backends.map((b) => [b.name, b.kind]));
  return results.map((result) => {
    const peak = peakTflopsFor(context.peakTflops, result.backend, kinds.get(result.backend) ?? 'gpu');
    const torchTime = context.torchTimes?.get(result.id);
    const torch = compareWithTorch(result.timing?.median, torchTime);
    const limit = hardwareLimit(result, limits.get(result.backend)?.gbps, peak, torch?.torchMs);
    return { result, ...(limit ? { limit } : {}), ...(torch ? { torch } : {}) };
  });
}

/** Cases whose rayo time is under `threshold` of their hardware limit (worst first). */
export function belowLimit(annotated: readonly AnnotatedResult[], threshold = 0.5): AnnotatedResult[] {
  return annotated
    .filter((a) => a.limit !== undefined && a.limit.fraction < threshold)
    .sort((a, b) => a.limit!.fraction - b.limit!.fraction);
}

export const TABLE_COLUMNS = [
  'backend',
  'case',
  'median',
  'spread',
  'timer',
  'GFLOP/s',
  'GB/s',
  'limit',
  'of limit',
  'status',
] as const;
/**
 * Added when a baseline ran: PyTorch's time, how it ran, its fraction of the
 * same limit, rayo/torch time and rayo/torch throughput.
 */
export const TORCH_COLUMNS = ['torch', 'torch via', 'torch of limit', 't/torch', 'thru/torch'] as const;
export const NUMERIC_COLUMNS: ReadonlySet<string> = new Set([
  'median',
  'spread',
  'GFLOP/s',
  'GB/s',
  'limit',
  'of limit',
  'torch',
  'torch of limit',
  't/torch',
  'thru/torch',
]);

/** The table's header, with the PyTorch columns before the status when a baseline ran. */
export function tableColumns(withTorch: boolean): string[] {
  return withTorch ? [...TABLE_COLUMNS.slice(0, -1), ...TORCH_COLUMNS, 'status'] : [...TABLE_COLUMNS];
}

/** One row of cells per result, in `tableColumns()` order. */
export function tableRows(annotated: readonly AnnotatedResult[], withTorch = false): string[][] {
  return annotated.map(({ result: r, limit, torch }) => [
    r.backend,
    r.id,
    r.timing ? formatDuration(r.timing.median) : '-',
    r.timing ? formatSpread(r.timing) : '-',
    r.timer ?? '-',
    formatRate(gflops(r)),
    formatRate(gbps(r)),
    limit ? formatDuration(limit.ms) : '-',
    formatFraction(limit?.fraction, limit?.of),
    ...(withTorch
      ? [
          torch ? formatDuration(torch.torchMs) : '-',
          torch?.via ?? '-',
          formatFraction(limit?.torchFraction, limit?.of),
          formatRatio(torch?.timeRatio),
          formatRatio(torch?.throughputRatio),
        ]
      : []),
    r.status,
  ]);
}

/** Annotated results without limits or a baseline (tests, quick looks). */
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
  const header = tableColumns(withTorch);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) =>
        NUMERIC_COLUMNS.has(header[i]!) ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!),
      )
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
  /** The hardware limit and the fractions of it rayo and PyTorch reached; null for latency-bound cases. */
  readonly limit: HardwareLimit | null;
  readonly torch: {
    readonly medianMs: number;
    /** `graph` or `eager`, then the PyTorch call. */
    readonly via: string | null;
    /** The fastest eager PyTorch time, for comparison. */
    readonly eagerMs: number | null;
    readonly timeRatio: number;
    readonly throughputRatio: number;
  } | null;
}

export interface JsonBackend extends BackendInfo {
  /** The backend's own measured copy bandwidth, GB/s; null when the copy was not timed. */
  readonly ceilingGbps: number | null;
  /** The bandwidth its memory-bound cases are held to (the fastest copy on its device), and who measured it. */
  readonly memoryLimit: MemoryLimit | null;
  readonly peakTflops: number | null;
}

export interface JsonReport {
  readonly schema: 'rayo-bench/3';
  readonly date: string;
  readonly mode: SuiteMode;
  readonly filter: string | null;
  readonly machine: MachineInfo;
  readonly backends: readonly JsonBackend[];
  readonly unavailable: readonly { readonly name: string; readonly reason: string }[];
  readonly baseline: BaselineStatus;
  readonly summary: Summary;
  /** Timed cases under half their hardware limit, worst first. */
  readonly belowHalfOfLimit: readonly {
    readonly backend: string;
    readonly case: string;
    readonly of: HardwareLimit['of'];
    readonly fraction: number;
  }[];
  readonly results: readonly JsonResult[];
}

function finite(x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : x;
}

export function buildReport(input: ReportInput): JsonReport {
  const ceilings = ceilingsOf(input.results);
  const limits = memoryLimits(input.results, input.backends, input.torchTimes);
  const annotated = annotate(input.results, input);
  return {
    schema: 'rayo-bench/3',
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
      memoryLimit: limits.get(b.name) ?? null,
      peakTflops: finite(peakTflopsFor(input.peakTflops, b.name, b.kind)),
    })),
    unavailable: input.unavailable.map((u) => ({ name: u.name, reason: u.reason ?? 'unavailable' })),
    baseline: input.baseline,
    summary: summarizeResults(input.results),
    belowHalfOfLimit: belowLimit(annotated).map(({ result, limit }) => ({
      backend: result.backend,
      case: result.id,
      of: limit!.of,
      fraction: limit!.fraction,
    })),
    results: annotated.map(({ result: r, limit, torch }) => ({
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
      limit: limit ?? null,
      torch: torch
        ? {
            medianMs: torch.torchMs,
            via: torch.via ?? null,
            eagerMs: torch.eagerMs ?? null,
            timeRatio: torch.timeRatio,
            throughputRatio: torch.throughputRatio,
          }
        : null,
    })),
  };
}

export function formatJson(report: JsonReport): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}
