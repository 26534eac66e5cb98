import type { BackendInfo } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import type { CaseResult } from './bench.js';
import {
  annotate,
  belowLimit,
  buildReport,
  ceilingsOf,
  formatDuration,
  formatFraction,
  formatJson,
  formatRate,
  formatRatio,
  formatSpread,
  formatSummary,
  formatTable,
  gbps,
  gflops,
  hardwareLimit,
  type MachineInfo,
  memoryLimits,
  peakTflopsFor,
  TABLE_COLUMNS,
  TORCH_COLUMNS,
  tableRows,
} from './report.js';
import { summarize } from './timing.js';

const timing = summarize([2, 2, 2, 2, 2]); // 2 ms per run

const ok: CaseResult = {
  backend: 'cpu',
  id: 'gemm/128x128x128',
  family: 'gemm',
  kernel: 'matmul',
  status: 'ok',
  bound: 'flops',
  x: 128,
  timing,
  timer: 'host',
  sets: 4,
  callsPerSample: 1,
  cost: { flops: 2 * 128 ** 3, bytes: 3 * 128 * 128 * 4 },
};
/** 2 GB moved in 1 ms: 2000 GB/s. */
const copy: CaseResult = {
  backend: 'cpu',
  id: 'copy/1GiB',
  family: 'copy',
  kernel: 'copy',
  status: 'ok',
  bound: 'bytes',
  x: 2 ** 30,
  timing: summarize([1, 1, 1]),
  timer: 'device',
  sets: 1,
  cost: { flops: 0, bytes: 2e9 },
  ceiling: true,
};
/** 1 GB in 1 ms: 1000 GB/s, half the ceiling. */
const softmaxOk: CaseResult = {
  backend: 'cpu',
  id: 'softmax/4096x4096',
  family: 'softmax',
  kernel: 'softmax',
  status: 'ok',
  bound: 'bytes',
  x: 4096 * 4096,
  timing: summarize([1, 1, 1]),
  timer: 'device',
  sets: 1,
  cost: { flops: 5e8, bytes: 1e9 },
};
const failed: CaseResult = {
  backend: 'cpu',
  id: 'softmax/64x4096',
  family: 'softmax',
  kernel: 'softmax',
  status: 'FAILED',
  bound: 'bytes',
  x: 64 * 4096,
  message: "output 'y': 3 of 262144 elements differ",
  cost: { flops: 5 * 64 * 4096, bytes: 2 * 64 * 4096 * 4 },
};
const skipped: CaseResult = {
  backend: 'wgpu',
  id: 'adamw/1e5',
  family: 'adamw',
  kernel: 'adamwStep',
  status: 'skipped',
  bound: 'bytes',
  x: 1e5,
  message: 'wgpu does not implement adamwStep',
};

const cpuInfo: BackendInfo = {
  name: 'cpu',
  device: 'reference (Node 20)',
  kind: 'cpu',
  limits: { maxBufferBytes: 2 ** 31 },
  features: [],
};

describe('formatting numbers', () => {
  it.each([
    [0.0123, '12.3 µs'],
    [0.0004, '400 ns'],
    [0.5, '500 µs'],
    [1.5, '1.50 ms'],
    [250, '250 ms'],
    [12_345, '12.3 s'],
    [Number.NaN, '-'],
  ])('picks ns, µs, ms or s: %s ms is %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it.each([
    [1234.4, '1234'],
    [12.345, '12.3'],
    [0.1234, '0.12'],
    [0.001234, '0.0012'],
    [0, '0.00'],
    [undefined, '-'],
    [Number.NaN, '-'],
  ])('formats rates with about three digits: %s as %s', (rate, text) => {
    expect(formatRate(rate)).toBe(text);
  });

  it('shows the spread as ± percent of the median', () => {
    expect(formatSpread(timing)).toBe('±0.0%');
    // p10 9.4, p90 10.6: ±0.6 around 10
    expect(formatSpread(summarize([9, 10, 10, 10, 11]))).toBe('±6.0%');
  });

  it('formats ratios and fractions', () => {
    expect(formatRatio(1.523)).toBe('1.52x');
    expect(formatRatio(0.25)).toBe('0.25x');
    expect(formatRatio(undefined)).toBe('-');
    expect(formatFraction(0.823, 'bandwidth')).toBe('82% bw');
    expect(formatFraction(0.0345, 'flops')).toBe('3.5% fp');
    expect(formatFraction(0.5)).toBe('50%');
    expect(formatFraction(undefined)).toBe('-');
  });
});

describe('GFLOP/s and GB/s', () => {
  it('divide the cost by the median time', () => {
    // 2·128³ flops in 2 ms
    expect(gflops(ok)).toBeCloseTo((2 * 128 ** 3) / 2e-3 / 1e9);
    expect(gflops(ok)).toBeCloseTo(2.097152);
    expect(gbps(ok)).toBeCloseTo((3 * 128 * 128 * 4) / 2e-3 / 1e9);
  });

  it('are unknown without a time, a cost, or any arithmetic', () => {
    expect(gflops(failed)).toBeUndefined();
    expect(gbps(skipped)).toBeUndefined();
    expect(gflops({ ...ok, cost: undefined })).toBeUndefined();
    expect(gflops(copy)).toBeUndefined();
    expect(gbps(copy)).toBeCloseTo(2000);
  });
});

describe('ceilings', () => {
  it('are each backend’s timed copy', () => {
    const ceilings = ceilingsOf([ok, copy, softmaxOk]);
    expect([...ceilings.keys()]).toEqual(['cpu']);
    expect(ceilings.get('cpu')).toMatchObject({ case: 'copy/1GiB', timer: 'device' });
    expect(ceilings.get('cpu')!.gbps).toBeCloseTo(2000);
    expect(ceilingsOf([{ ...copy, status: 'FAILED', timing: undefined }]).size).toBe(0);
  });

  it('hold memory-bound cases to the bandwidth and FLOP-bound ones to the peak', () => {
    // 1 GB at 2000 GB/s takes 0.5 ms; rayo took 1 ms, PyTorch 0.625 ms
    expect(hardwareLimit(softmaxOk, 2000, undefined, 0.625)).toEqual({
      of: 'bandwidth',
      ms: 0.5,
      fraction: 0.5,
      torchFraction: 0.8,
    });
    expect(hardwareLimit(softmaxOk, 2000, undefined)).not.toHaveProperty('torchFraction');
    expect(hardwareLimit(softmaxOk, undefined, 50)).toBeUndefined();
    // 2.097 GFLOP/s of a 0.01 TFLOP/s peak
    expect(hardwareLimit(ok, 2000, 0.01)!.fraction).toBeCloseTo(0.2097152);
    expect(hardwareLimit(ok, 2000, 0.01)!.ms).toBeCloseTo(((2 * 128 ** 3) / 1e10) * 1e3);
    expect(hardwareLimit(ok, 2000, undefined)).toBeUndefined();
    expect(hardwareLimit({ ...ok, bound: 'latency' }, 2000, 50)).toBeUndefined();
    expect(hardwareLimit(failed, 2000, 50)).toBeUndefined();
  });

  it('share the fastest copy on one GPU among its backends and PyTorch; a cpu backend keeps its own', () => {
    const gpuCopy = (backend: string, ms: number): CaseResult => ({
      ...copy,
      backend,
      id: 'copy/256MiB',
      timing: summarize([ms]),
    });
    const infos = [
      { name: 'wgpu', kind: 'gpu' as const },
      { name: 'cuda', kind: 'gpu' as const },
      { name: 'cpu', kind: 'cpu' as const },
    ];
    // 2e9 bytes: wgpu 1 ms = 2000 GB/s, cuda 0.8 ms = 2500 GB/s, cpu 1000 GB/s
    const results = [gpuCopy('wgpu', 1), gpuCopy('cuda', 0.8), { ...copy, timing: summarize([2]) }];
    const limits = memoryLimits(results, infos);
    expect(limits.get('wgpu')).toEqual({ gbps: 2500, source: 'cuda copy/256MiB' });
    expect(limits.get('cuda')).toEqual({ gbps: 2500, source: 'cuda copy/256MiB' });
    expect(limits.get('cpu')).toEqual({ gbps: 1000, source: 'cpu copy/1GiB' });
    // PyTorch's copy of the same case on the GPU, faster still, raises the GPU limit
    const withTorch = memoryLimits(results, infos, new Map([['copy/256MiB', { ms: 0.5 }]]));
    expect(withTorch.get('wgpu')).toEqual({ gbps: 4000, source: 'PyTorch copy/256MiB' });
    expect(withTorch.get('cpu')!.gbps).toBe(1000);
  });

  it('take a plain peak for GPU backends and a named one for any', () => {
    expect(peakTflopsFor({ all: 50 }, 'wgpu', 'gpu')).toBe(50);
    expect(peakTflopsFor({ all: 50 }, 'cpu', 'cpu')).toBeUndefined();
    expect(peakTflopsFor({ all: 50, byBackend: { cpu: 0.1, wgpu: 26 } }, 'cpu', 'cpu')).toBe(0.1);
    expect(peakTflopsFor({ all: 50, byBackend: { wgpu: 26 } }, 'wgpu', 'gpu')).toBe(26);
    expect(peakTflopsFor(undefined, 'wgpu', 'gpu')).toBeUndefined();
  });
});

describe('annotate', () => {
  it('adds the hardware limit and the PyTorch ratios', () => {
    const torchTimes = new Map([
      ['softmax/4096x4096', { ms: 0.5, method: 'graph' as const, impl: 'torch.softmax', eagerMs: 0.6 }],
      ['gemm/128x128x128', { ms: 4 }],
    ]);
    const [g, c, s] = annotate([ok, copy, softmaxOk], {
      backends: [cpuInfo],
      peakTflops: { byBackend: { cpu: 0.01 } },
      torchTimes,
    });
    expect(c!.limit).toEqual({ of: 'bandwidth', ms: 1, fraction: 1 });
    expect(c!.torch).toBeUndefined();
    expect(s!.limit).toEqual({ of: 'bandwidth', ms: 0.5, fraction: 0.5, torchFraction: 1 });
    // rayo 1 ms, torch 0.5 ms: twice the time, half the throughput
    expect(s!.torch).toEqual({
      torchMs: 0.5,
      via: 'graph torch.softmax',
      eagerMs: 0.6,
      timeRatio: 2,
      throughputRatio: 0.5,
    });
    expect(g!.torch).toEqual({ torchMs: 4, timeRatio: 0.5, throughputRatio: 2 });
    expect(g!.limit!.of).toBe('flops');
  });

  it('lists the cases under half of their limit, worst first', () => {
    const slow = { ...softmaxOk, id: 'softmax/slow', timing: summarize([4]) };
    const annotated = annotate([ok, copy, softmaxOk, slow], {
      backends: [cpuInfo],
      peakTflops: { byBackend: { cpu: 0.01 } },
    });
    // gemm at 21% of its peak, softmax/slow at 12.5%; softmax at exactly 50% is not below
    expect(belowLimit(annotated).map((a) => [a.result.id, a.limit!.fraction])).toEqual([
      ['softmax/slow', 0.125],
      ['gemm/128x128x128', expect.closeTo(0.2097152)],
    ]);
  });
});

describe('formatTable', () => {
  const table = formatTable([ok, failed, skipped]);
  const lines = table.split('\n');

  it('has the columns in order and a rule', () => {
    expect(TABLE_COLUMNS.join(' | ')).toBe(
      'backend | case | median | spread | timer | GFLOP/s | GB/s | limit | of limit | status',
    );
    expect(lines[0]!.split(/\s{2,}/)).toEqual([...TABLE_COLUMNS]);
    expect(lines[1]).toMatch(/^-+( {2}-+){9}$/);
  });

  it('has one aligned row per result', () => {
    const rows = tableRows([{ result: ok }, { result: failed }, { result: skipped }]);
    expect(rows[0]).toEqual([
      'cpu',
      'gemm/128x128x128',
      '2.00 ms',
      '±0.0%',
      'host',
      '2.10',
      '0.098',
      '-',
      '-',
      'ok',
    ]);
    expect(rows[1]).toEqual(['cpu', 'softmax/64x4096', '-', '-', '-', '-', '-', '-', '-', 'FAILED']);
    expect(rows[2]).toEqual(['wgpu', 'adamw/1e5', '-', '-', '-', '-', '-', '-', '-', 'skipped']);
    const body = lines.slice(2, 5);
    expect(body[0]!.split(/\s{2,}/)).toEqual(rows[0]);
    // every line ends its columns at the same place: the status column starts together
    const statusAt = lines[0]!.indexOf('status');
    for (const line of body) expect(line.slice(statusAt).trim()).toMatch(/^(ok|FAILED|skipped)$/);
  });

  it('adds PyTorch columns when a baseline time exists', () => {
    const annotated = annotate([copy, softmaxOk], {
      backends: [cpuInfo],
      torchTimes: new Map([
        ['softmax/4096x4096', { ms: 0.5, method: 'graph' as const, impl: 'torch.softmax' }],
      ]),
    });
    const text = formatTable(annotated);
    const header = text.split('\n')[0]!.split(/\s{2,}/);
    expect(header).toEqual([...TABLE_COLUMNS.slice(0, -1), ...TORCH_COLUMNS, 'status']);
    expect(text).toMatch(
      /softmax\/4096x4096 .* 500 µs\s+50% bw\s+500 µs\s+graph torch.softmax\s+100% bw\s+2.00x\s+0.50x\s+ok/,
    );
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
  const report = buildReport({
    date: new Date('2025-01-02T03:04:05Z'),
    mode: 'quick',
    machine,
    backends: [cpuInfo],
    unavailable: [{ name: 'cuda', available: false, reason: 'no NVIDIA driver' }],
    baseline: { status: 'ok', torch: '2.5.1', cuda: '12.4', device: 'NVIDIA H100' },
    peakTflops: { byBackend: { cpu: 0.01 } },
    torchTimes: new Map([
      ['softmax/4096x4096', { ms: 0.5, method: 'eager' as const, impl: 'torch.softmax' }],
    ]),
    results: [copy, ok, softmaxOk, failed],
  });

  it('holds the run, the machine, backends with ceilings, the baseline and one entry per result', () => {
    const parsed = JSON.parse(formatJson(report));
    expect(Object.keys(parsed)).toEqual([
      'schema',
      'date',
      'mode',
      'filter',
      'machine',
      'backends',
      'unavailable',
      'baseline',
      'summary',
      'belowHalfOfLimit',
      'results',
    ]);
    expect(parsed.schema).toBe('rayo-bench/3');
    expect(parsed.date).toBe('2025-01-02T03:04:05.000Z');
    expect(parsed.mode).toBe('quick');
    expect(parsed.filter).toBeNull();
    expect(parsed.machine).toEqual(machine);
    expect(parsed.backends).toHaveLength(1);
    expect(parsed.backends[0]).toMatchObject({ ...cpuInfo, peakTflops: 0.01 });
    expect(parsed.backends[0].ceilingGbps).toBeCloseTo(2000);
    expect(parsed.backends[0].memoryLimit).toEqual({ gbps: 2000, source: 'cpu copy/1GiB' });
    // gemm at 21% of the 0.01 TFLOP/s peak; softmax at exactly half is not below
    expect(parsed.belowHalfOfLimit).toEqual([
      { backend: 'cpu', case: 'gemm/128x128x128', of: 'flops', fraction: expect.closeTo(0.2097152) },
    ]);
    expect(parsed.unavailable).toEqual([{ name: 'cuda', reason: 'no NVIDIA driver' }]);
    expect(parsed.baseline).toEqual({ status: 'ok', torch: '2.5.1', cuda: '12.4', device: 'NVIDIA H100' });
    expect(parsed.summary).toEqual({ cases: 4, ok: 3, failed: 1, errors: 0, skipped: 0 });
    expect(parsed.results).toHaveLength(4);
  });

  it('gives every result the same keys, with numbers where timed and null elsewhere', () => {
    const results = JSON.parse(formatJson(report)).results;
    const keys = [
      'backend',
      'case',
      'family',
      'kernel',
      'status',
      'bound',
      'x',
      'timer',
      'sets',
      'callsPerSample',
      'timeMs',
      'flops',
      'bytes',
      'gflops',
      'gbps',
      'limit',
      'torch',
    ];
    for (const r of results) expect(Object.keys(r).filter((k) => k !== 'message')).toEqual(keys);
    const [c, a, s, f] = results;
    expect(c).toMatchObject({
      case: 'copy/1GiB',
      gflops: null,
      limit: { of: 'bandwidth', ms: 1, fraction: 1 },
    });
    expect(a).toMatchObject({ backend: 'cpu', case: 'gemm/128x128x128', kernel: 'matmul', status: 'ok' });
    expect(a).toMatchObject({ family: 'gemm', bound: 'flops', x: 128, timer: 'host', sets: 4, torch: null });
    expect(a.callsPerSample).toBe(1);
    expect(c.callsPerSample).toBeNull();
    expect(a.timeMs).toMatchObject({ samples: 5, median: 2, min: 2, max: 2, p10: 2, p90: 2, mad: 0 });
    expect(a.flops).toBe(2 * 128 ** 3);
    expect(a.gflops).toBeCloseTo(2.097152);
    expect(a.gbps).toBeCloseTo(0.098304);
    expect(a.limit.of).toBe('flops');
    expect(a.message).toBeUndefined();
    expect(s.torch).toEqual({
      medianMs: 0.5,
      via: 'eager torch.softmax',
      eagerMs: null,
      timeRatio: 2,
      throughputRatio: 0.5,
    });
    expect(s.limit).toEqual({ of: 'bandwidth', ms: 0.5, fraction: 0.5, torchFraction: 1 });
    expect(f).toMatchObject({
      status: 'FAILED',
      timeMs: null,
      timer: null,
      gflops: null,
      gbps: null,
      torch: null,
    });
    expect(f.message).toContain('elements differ');
  });
});
