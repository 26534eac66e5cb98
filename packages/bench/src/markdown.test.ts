import type { BackendInfo } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import type { CaseResult } from './bench.js';
import { formatMarkdown, markdownCell, markdownTable } from './markdown.js';
import { annotate, memoryLimits, TABLE_COLUMNS, TORCH_COLUMNS } from './report.js';
import { FULL_TIMING, QUICK_TIMING, summarize } from './timing.js';

const info: BackendInfo = {
  name: 'wgpu',
  device: 'NVIDIA H200 (Vulkan)',
  kind: 'gpu',
  limits: { maxBufferBytes: 2 ** 31 },
  features: ['timestamp-query'],
};

/** A bytes-bound wgpu case of `family` timed once at `ms` on the device clock. */
function deviceTimed(
  family: string,
  id: string,
  kernel: string,
  x: number,
  ms: number,
  cost: CaseResult['cost'],
): CaseResult {
  return {
    backend: 'wgpu',
    id: `${family}/${id}`,
    family,
    kernel,
    status: 'ok',
    bound: 'bytes',
    x,
    timing: summarize([ms]),
    timer: 'device',
    sets: 1,
    cost,
  };
}

const results: CaseResult[] = [
  { ...deviceTimed('copy', '256MiB', 'copy', 2 ** 28, 0.5, { flops: 0, bytes: 2 ** 29 }), ceiling: true },
  deviceTimed('attention', 'h32-d128-t4096', 'incrementalAttention', 2 ** 27, 0.2, {
    flops: 6.7e7,
    bytes: 2 ** 27,
  }),
  {
    backend: 'wgpu',
    id: 'adamw/1e6',
    family: 'adamw',
    kernel: 'adamwStep',
    status: 'FAILED',
    bound: 'bytes',
    x: 1e6,
    message: "output 'param': 2 of 1000000 elements differ | first at [3]",
  },
];

const machine = {
  node: 'v20.20.2',
  platform: 'linux',
  arch: 'x64',
  cpus: { count: 16, model: 'Some CPU' },
  memoryBytes: 128 * 2 ** 30,
};

describe('markdownTable', () => {
  it('writes a header, an alignment row and escaped cells', () => {
    expect(
      markdownTable(
        ['a', 'n'],
        [
          ['x|y', '1'],
          ['z\nw', '22'],
        ],
        new Set(['n']),
      ),
    ).toBe(['| a | n |', '| --- | ---: |', '| x\\|y | 1 |', '| z w | 22 |'].join('\n'));
    expect(markdownCell('a\\|b')).toBe('a\\\\\\|b');
  });
});

describe('formatMarkdown', () => {
  const torchTimes = new Map([
    ['attention/h32-d128-t4096', { ms: 0.11, method: 'graph' as const, impl: 'sdpa[efficient_attention]' }],
  ]);
  const annotated = annotate(results, { backends: [info], torchTimes });
  const text = formatMarkdown({
    date: new Date('2025-01-02T03:04:05Z'),
    mode: 'full',
    filter: 'attention|adamw',
    machine,
    backends: [info],
    unavailable: [{ name: 'cuda', reason: 'no NVIDIA driver' }],
    baseline: { status: 'ok', torch: '2.5.1', cuda: '12.4', device: 'NVIDIA H200' },
    results: annotated,
    timing: FULL_TIMING,
    memoryLimits: memoryLimits(results, [info], torchTimes),
    charts: new Map([['attention', 'charts/attention.svg']]),
  });
  const lines = text.split('\n');

  it('describes the run, the machine, the baseline and the backends with their limits', () => {
    expect(lines[0]).toBe('# rayo-bench results');
    expect(text).toContain('- **mode**: full (filter `attention|adamw`)');
    expect(text).toContain('- **machine**: linux x64, 16 × Some CPU, 128 GiB, Node v20.20.2');
    expect(text).toContain(
      '- **PyTorch baseline**: PyTorch 2.5.1, CUDA 12.4, on NVIDIA H200; fp32 with TF32 off',
    );
    expect(text).toContain('- **cuda** unavailable: no NVIDIA driver');
    expect(text).toContain('- **result**: 3 cases: 2 ok, 1 failed (FAILED)');
    // 2²⁹ bytes in 0.5 ms
    expect(text).toContain('| wgpu | NVIDIA H200 (Vulkan) | gpu | 1074 | 1074 | wgpu copy/256MiB | - |');
  });

  it('states one timing method for both sides, from the timing rules in force', () => {
    expect(text).toContain('## How it was timed');
    expect(text).toContain('grows until a sample lasts 2 ms, at most 1024');
    expect(text).toContain('captured into one CUDA graph and replayed between CUDA events (`graph`)');
    expect(text).toContain('the same warm-up (3 runs, fewer once they took 0.5 s)');
    expect(text).toContain('at least 5, until 0.5 s of timing, at most 2000');
    const quick = formatMarkdown({
      date: new Date(0),
      mode: 'quick',
      machine,
      backends: [info],
      unavailable: [],
      baseline: { status: 'not-run' },
      results: [],
      timing: QUICK_TIMING,
    });
    expect(quick).toContain('grows until a sample lasts 1 ms, at most 1024');
    expect(quick).toContain('the same warm-up (1 runs, fewer once they took 0.1 s)');
  });

  it('lists the cases below half of their hardware limit', () => {
    const section = text.slice(text.indexOf('## Below half of the hardware limit'));
    // attention: 2²⁷ bytes at 1074 GB/s is 125 µs, rayo took 200 µs (63%): not below half
    expect(section).toMatch(
      /^## Below half of the hardware limit\n\nNo timed case with a limit is below 50% of it\./,
    );
    const slow = annotate([results[0]!, { ...results[1]!, timing: summarize([0.5]) }], {
      backends: [info],
      torchTimes,
    });
    const listed = formatMarkdown({
      date: new Date(0),
      mode: 'full',
      machine,
      backends: [info],
      unavailable: [],
      baseline: { status: 'not-run' },
      results: slow,
      timing: FULL_TIMING,
    });
    expect(listed).toContain('| wgpu | `attention/h32-d128-t4096` | 25% bw | 114% bw |');
  });

  it('has a section per family, in suite order, with its chart and a table', () => {
    const sections = lines.filter((l) => l.startsWith('## '));
    expect(sections).toEqual([
      '## Backends',
      '## How it was timed',
      '## Below half of the hardware limit',
      '## copy: Device copy (the bandwidth ceiling)',
      '## attention: Incremental attention (one decode step)',
      '## adamw: AdamW step',
      '## Not timed',
    ]);
    expect(text).toContain('![attention](charts/attention.svg)');
    expect(text).not.toContain('![adamw]');
    const header = `| ${[...TABLE_COLUMNS.slice(0, -1), ...TORCH_COLUMNS, 'status'].join(' | ')} |`;
    expect(lines.filter((l) => l === header)).toHaveLength(3);
    const row = lines.find((l) => l.startsWith('| wgpu | attention/h32-d128-t4096 |'))!;
    // 2²⁷ bytes in 0.2 ms is 671 GB/s: 62.5% of the 1074 GB/s copy (125 µs); PyTorch 110 µs
    expect(row.split(' | ').slice(2)).toEqual([
      '200 µs',
      '±0.0%',
      'device',
      '335',
      '671',
      '125 µs',
      '63% bw',
      '110 µs',
      'graph sdpa[efficient_attention]',
      '114% bw',
      '1.82x',
      '0.55x',
      'ok |',
    ]);
  });

  it('lists the cases that were not timed, with escaped messages', () => {
    expect(text).toContain(
      "- **FAILED** wgpu `adamw/1e6`: output 'param': 2 of 1000000 elements differ \\| first at [3]",
    );
    expect(text.endsWith('\n')).toBe(true);
  });

  it('says when the baseline did not run', () => {
    const without = formatMarkdown({
      date: new Date(0),
      mode: 'quick',
      machine,
      backends: [info],
      unavailable: [],
      baseline: { status: 'unavailable', reason: 'python3 was not found' },
      results: annotate(results.slice(0, 1), { backends: [info] }),
      timing: QUICK_TIMING,
    });
    expect(without).toContain('- **PyTorch baseline**: not available: python3 was not found');
    expect(without).toContain(`| ${TABLE_COLUMNS.join(' | ')} |`);
  });
});
