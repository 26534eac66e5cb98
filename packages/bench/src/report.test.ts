import type { BackendInfo } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import type { CaseResult } from './bench.js';
import {
  buildReport,
  formatDuration,
  formatJson,
  formatRate,
  formatSpread,
  formatSummary,
  formatTable,
  gbps,
  gflops,
  type MachineInfo,
  TABLE_COLUMNS,
  tableRows,
} from './report.js';
import { summarize } from './timing.js';

const timing = summarize([2, 2, 2, 2, 2]); // 2 ms per run

const ok: CaseResult = {
  backend: 'cpu',
  id: 'gemm/128x128x128',
  kernel: 'matmul',
  status: 'ok',
  timing,
  cost: { flops: 2 * 128 ** 3, bytes: 3 * 128 * 128 * 4 },
};
const failed: CaseResult = {
  backend: 'cpu',
  id: 'softmax/64x4096',
  kernel: 'softmax',
  status: 'FAILED',
  message: "output 'y': 3 of 262144 elements differ",
  cost: { flops: 5 * 64 * 4096, bytes: 2 * 64 * 4096 * 4 },
};
const skipped: CaseResult = {
  backend: 'wgpu',
  id: 'adamw/1e5',
  kernel: 'adamwStep',
  status: 'skipped',
  message: 'wgpu does not implement adamwStep',
};

describe('formatting numbers', () => {
  it('picks µs, ms or s', () => {
    expect(formatDuration(0.0123)).toBe('12.3 µs');
    expect(formatDuration(0.0004)).toBe('0.40 µs');
    expect(formatDuration(0.5)).toBe('500 µs');
    expect(formatDuration(1.5)).toBe('1.50 ms');
    expect(formatDuration(250)).toBe('250 ms');
    expect(formatDuration(12_345)).toBe('12.3 s');
    expect(formatDuration(Number.NaN)).toBe('-');
  });

  it('formats rates with about three digits', () => {
    expect(formatRate(1234.4)).toBe('1234');
    expect(formatRate(12.345)).toBe('12.3');
    expect(formatRate(0.1234)).toBe('0.12');
    expect(formatRate(0.001234)).toBe('0.0012');
    expect(formatRate(0)).toBe('0.00');
    expect(formatRate(undefined)).toBe('-');
    expect(formatRate(Number.NaN)).toBe('-');
  });

  it('shows the spread as ± percent of the median', () => {
    expect(formatSpread(timing)).toBe('±0.0%');
    // p10 9.4, p90 10.6: ±0.6 around 10
    expect(formatSpread(summarize([9, 10, 10, 10, 11]))).toBe('±6.0%');
  });
});

describe('GFLOP/s and GB/s', () => {
  it('divide the cost by the median time', () => {
    // 2·128³ flops in 2 ms
    expect(gflops(ok)).toBeCloseTo((2 * 128 ** 3) / 2e-3 / 1e9);
    expect(gflops(ok)).toBeCloseTo(2.097152);
    expect(gbps(ok)).toBeCloseTo((3 * 128 * 128 * 4) / 2e-3 / 1e9);
  });

  it('are unknown without a time or a cost', () => {
    expect(gflops(failed)).toBeUndefined();
    expect(gbps(skipped)).toBeUndefined();
    expect(gflops({ ...ok, cost: undefined })).toBeUndefined();
  });
});

describe('formatTable', () => {
  const table = formatTable([ok, failed, skipped]);
  const lines = table.split('\n');

  it('has the columns in order and a rule', () => {
    expect(TABLE_COLUMNS).toEqual(['backend', 'case', 'median', 'spread', 'GFLOP/s', 'GB/s', 'status']);
    expect(lines[0]!.split(/\s+/)).toEqual([...TABLE_COLUMNS]);
    expect(lines[1]).toMatch(/^-+( {2}-+){6}$/);
  });

  it('has one aligned row per result', () => {
    const rows = tableRows([ok, failed, skipped]);
    expect(rows[0]).toEqual(['cpu', 'gemm/128x128x128', '2.00 ms', '±0.0%', '2.10', '0.098', 'ok']);
    expect(rows[1]).toEqual(['cpu', 'softmax/64x4096', '-', '-', '-', '-', 'FAILED']);
    expect(rows[2]).toEqual(['wgpu', 'adamw/1e5', '-', '-', '-', '-', 'skipped']);
    const body = lines.slice(2, 5);
    expect(body[0]!.split(/\s{2,}/)).toEqual(rows[0]);
    // every line ends its columns at the same place: the status column starts together
    const statusAt = lines[0]!.indexOf('status');
    for (const line of body) expect(line.slice(statusAt).trim()).toMatch(/^(ok|FAILED|skipped)$/);
  });

  it('notes why cases failed or were skipped', () => {
    expect(table).toContain("FAILED cpu softmax/64x4096: output 'y': 3 of 262144 elements differ");
    expect(table).toContain('skipped wgpu adamw/1e5: wgpu does not implement adamwStep');
    expect(table.endsWith('\n')).toBe(true);
  });

  it('summarizes', () => {
    expect(formatSummary([ok, failed, skipped])).toBe('3 cases: 1 ok, 1 failed, 1 skipped (FAILED)');
    expect(formatSummary([ok])).toBe('1 case: 1 ok, 0 failed (passed)');
  });
});

describe('JSON report', () => {
  const machine: MachineInfo = {
    node: 'v20.0.0',
    platform: 'linux',
    arch: 'x64',
    cpus: { count: 8, model: 'Some CPU' },
    memoryBytes: 2 ** 34,
  };
  const info: BackendInfo = {
    name: 'cpu',
    device: 'reference (Node 20)',
    kind: 'cpu',
    limits: { maxBufferBytes: 2 ** 31, maxBindingBytes: 2 ** 31 },
    features: [],
  };
  const report = buildReport({
    date: new Date('2025-01-02T03:04:05Z'),
    mode: 'quick',
    machine,
    backends: [info],
    unavailable: [{ name: 'cuda', available: false, reason: 'no NVIDIA driver' }],
    results: [ok, failed],
  });

  it('holds the machine, backends and one entry per result', () => {
    const parsed = JSON.parse(formatJson(report));
    expect(Object.keys(parsed)).toEqual([
      'schema',
      'date',
      'mode',
      'machine',
      'backends',
      'unavailable',
      'summary',
      'results',
    ]);
    expect(parsed.schema).toBe('rayo-bench/1');
    expect(parsed.date).toBe('2025-01-02T03:04:05.000Z');
    expect(parsed.mode).toBe('quick');
    expect(parsed.machine).toEqual(machine);
    expect(parsed.backends).toEqual([info]);
    expect(parsed.unavailable).toEqual([{ name: 'cuda', reason: 'no NVIDIA driver' }]);
    expect(parsed.summary).toEqual({ cases: 2, ok: 1, failed: 1, errors: 0, skipped: 0 });
    expect(parsed.results).toHaveLength(2);
  });

  it('gives numbers for timed cases and null for the others', () => {
    const [a, b] = JSON.parse(formatJson(report)).results;
    expect(a).toMatchObject({ backend: 'cpu', case: 'gemm/128x128x128', kernel: 'matmul', status: 'ok' });
    expect(a.timeMs).toMatchObject({ samples: 5, median: 2, min: 2, max: 2, p10: 2, p90: 2, mad: 0 });
    expect(a.flops).toBe(2 * 128 ** 3);
    expect(a.gflops).toBeCloseTo(2.097152);
    expect(a.gbps).toBeCloseTo(0.098304);
    expect(a.message).toBeUndefined();
    expect(b).toMatchObject({ status: 'FAILED', timeMs: null, gflops: null, gbps: null });
    expect(b.message).toContain('elements differ');
  });
});
