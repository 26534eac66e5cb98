import { cpus, totalmem } from 'node:os';
import type { BackendInfo, BackendStatus } from '@rayo/core';
import { type CaseResult, isFailure } from './bench.js';
import type { SuiteMode } from './suite.js';
import { perSecondGiga, relativeSpread, type TimingStats } from './timing.js';

/** About three significant digits, without exponent notation. */
function sig(x: number): string {
  const abs = Math.abs(x);
  if (abs >= 100) return x.toFixed(0);
  if (abs >= 10) return x.toFixed(1);
  if (abs >= 1 || abs === 0) return x.toFixed(2);
  return x.toPrecision(2);
}

/** A duration given in milliseconds, in µs, ms or s. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '-';
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

/** GFLOP/s at the median time, when the work and the time are known. */
export function gflops(result: CaseResult): number | undefined {
  if (!result.timing || !result.cost) return undefined;
  return perSecondGiga(result.cost.flops, result.timing.median);
}

/** GB/s at the median time, when the bytes and the time are known. */
export function gbps(result: CaseResult): number | undefined {
  if (!result.timing || !result.cost) return undefined;
  return perSecondGiga(result.cost.bytes, result.timing.median);
}

export const TABLE_COLUMNS = ['backend', 'case', 'median', 'spread', 'GFLOP/s', 'GB/s', 'status'] as const;
const RIGHT_ALIGNED = new Set<string>(['median', 'spread', 'GFLOP/s', 'GB/s']);

/** One row of cells per result, in `TABLE_COLUMNS` order. */
export function tableRows(results: readonly CaseResult[]): string[][] {
  return results.map((r) => [
    r.backend,
    r.id,
    r.timing ? formatDuration(r.timing.median) : '-',
    r.timing ? formatSpread(r.timing) : '-',
    formatRate(gflops(r)),
    formatRate(gbps(r)),
    r.status,
  ]);
}

/**
 * The terminal table: a header, a rule and one line per result, then one note
 * per case that failed, errored or was skipped.
 */
export function formatTable(results: readonly CaseResult[]): string {
  const rows = tableRows(results);
  const header = [...TABLE_COLUMNS];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (RIGHT_ALIGNED.has(header[i]!) ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const out = [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)];
  const notes = results.filter((r) => r.status !== 'ok' && r.message);
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

export interface ReportInput {
  readonly date: Date;
  readonly mode: SuiteMode;
  readonly machine: MachineInfo;
  readonly backends: readonly BackendInfo[];
  readonly unavailable: readonly BackendStatus[];
  readonly results: readonly CaseResult[];
}

export interface JsonResult {
  readonly backend: string;
  readonly case: string;
  readonly kernel: string;
  readonly status: CaseResult['status'];
  readonly message?: string;
  /** Milliseconds per run; null when not timed. */
  readonly timeMs: TimingStats | null;
  readonly flops: number | null;
  readonly bytes: number | null;
  readonly gflops: number | null;
  readonly gbps: number | null;
}

export interface JsonReport {
  readonly schema: 'rayo-bench/1';
  readonly date: string;
  readonly mode: SuiteMode;
  readonly machine: MachineInfo;
  readonly backends: readonly BackendInfo[];
  readonly unavailable: readonly { readonly name: string; readonly reason: string }[];
  readonly summary: Summary;
  readonly results: readonly JsonResult[];
}

function finite(x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : x;
}

export function buildReport(input: ReportInput): JsonReport {
  return {
    schema: 'rayo-bench/1',
    date: input.date.toISOString(),
    mode: input.mode,
    machine: input.machine,
    backends: input.backends.map((b) => ({
      name: b.name,
      device: b.device,
      kind: b.kind,
      limits: { ...b.limits },
      features: [...b.features],
    })),
    unavailable: input.unavailable.map((u) => ({ name: u.name, reason: u.reason ?? 'unavailable' })),
    summary: summarizeResults(input.results),
    results: input.results.map((r) => ({
      backend: r.backend,
      case: r.id,
      kernel: r.kernel,
      status: r.status,
      ...(r.message === undefined ? {} : { message: r.message }),
      timeMs: r.timing ?? null,
      flops: finite(r.cost?.flops),
      bytes: finite(r.cost?.bytes),
      gflops: finite(gflops(r)),
      gbps: finite(gbps(r)),
    })),
  };
}

export function formatJson(report: JsonReport): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}
