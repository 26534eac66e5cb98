import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend, registerBackend } from '@rayo/core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  gpt2Workloads,
  main,
  parseOptions,
  QUICK_WORKLOADS,
  withCheckpointing,
  withPrecisions,
} from './trainBench.js';
import type { TrainBenchReport } from './trainBenchReport.js';
import { workloadId } from './workload.js';

describe('train-bench options', () => {
  it('takes the parity pair from the backends, or pairs one backend with cpu', () => {
    const now = new Date('2025-02-03T04:05:06.789Z');
    const full = parseOptions(['--backends', 'wgpu,cuda'], now);
    expect(full.settings.parity).toEqual(['wgpu', 'cuda']);
    expect(full.settings).toMatchObject({ quick: false, warmup: 5, steps: 30, paritySteps: 8 });
    expect(full.baseline).toBe('none');
    expect(full.out).toMatch(/train-bench-results[\\/]2025-02-03T04-05-06$/);
    expect(parseOptions(['--', '--backends', 'cuda', '--quick']).settings).toMatchObject({
      parity: ['cpu', 'cuda'],
      quick: true,
      warmup: 1,
      steps: 3,
      paritySteps: 4,
    });
    expect(parseOptions(['--parity', 'cpu,wgpu', '--steps', '7']).settings).toMatchObject({
      backends: ['cuda', 'wgpu'],
      parity: ['cpu', 'wgpu'],
      steps: 7,
    });
  });

  it('takes the gpt2 suite, its batch, a peak and torch.compile', () => {
    const gpt2 = parseOptions([
      '--suite',
      'gpt2',
      '--gpt2-batch',
      '4',
      '--peak-tflops',
      '989',
      '--torch-compile',
    ]);
    expect(gpt2.settings).toMatchObject({ suite: 'gpt2', gpt2Batch: 4, peakTflops: 989, torchCompile: true });
    expect(parseOptions([]).settings).toMatchObject({
      suite: 'throughput',
      gpt2Batch: 8,
      torchCompile: false,
    });
    expect(parseOptions([]).settings.peakTflops).toBeUndefined();
    expect(() => parseOptions(['--suite', 'gpt3'])).toThrow(/--suite must be throughput or gpt2, got gpt3/);
    expect(() => parseOptions(['--peak-tflops', '0'])).toThrow(/--peak-tflops must be a positive number/);
  });

  it('takes checkpointing policies, each in its canonical spelling', () => {
    expect(parseOptions([]).settings.checkpoint).toEqual(['none']);
    expect(parseOptions(['--checkpoint', 'none,every1,every3']).settings.checkpoint).toEqual([
      'none',
      'blocks',
      'every3',
    ]);
    expect(() => parseOptions(['--checkpoint', 'some'])).toThrow(
      /--checkpoint takes none, blocks or everyN \(N ≥ 1\), got some/,
    );
    expect(() => parseOptions(['--checkpoint', 'every0'])).toThrow(/got every0/);
    expect(() => parseOptions(['--checkpoint', 'blocks,every1'])).toThrow(/names a policy twice/);
    expect(() => parseOptions(['--checkpoint', ','])).toThrow(/at least one policy/);
  });

  it('takes precision policies, each a run of every workload, replacing the suite’s', () => {
    expect(parseOptions([]).settings.precisions).toBeUndefined();
    expect(parseOptions(['--precision', 'f32,f16']).settings.precisions).toEqual(['f32', 'f16']);
    expect(() => parseOptions(['--precision', 'fp16'])).toThrow(
      expect.objectContaining({
        argument: '--precision',
        expected: 'f32 | tf32 | bf16 | f16',
        actual: 'fp16',
      }),
    );
    expect(() => parseOptions(['--precision', 'f16,f16'])).toThrow(/names a policy twice/);
    const runs = withPrecisions(gpt2Workloads(8), ['f32', 'f16']);
    expect(runs.map((w) => w.precision)).toEqual(['f32', 'f16']);
    expect(runs.map(workloadId)).toEqual([
      'transformer-v50257-d768-h12-l12-t1024-b8',
      'transformer-v50257-d768-h12-l12-t1024-b8-f16',
    ]);
  });

  it('rejects what it cannot run', () => {
    expect(() => parseOptions(['--parity', 'cpu'])).toThrow(/--parity needs two backends/);
    expect(() => parseOptions(['--steps', '0'])).toThrow(/--steps must be an integer >= 1, got 0/);
    expect(() => parseOptions(['--baseline', 'jax'])).toThrow(/--baseline must be torch or none/);
    expect(() => parseOptions(['--backends', ','])).toThrow(/at least one backend/);
    expect(() => parseOptions(['--fast'])).toThrow(/--fast/);
  });
});

describe('train-bench program', () => {
  let out: string;
  beforeAll(async () => {
    out = await mkdtemp(join(tmpdir(), 'train-bench-'));
    // A backend that lacks AdamW, as a GPU backend still being written does.
    registerBackend({
      name: 'partial',
      probe: async () => undefined,
      create: async () => {
        const backend = createCpuBackend();
        backend.supports = (kernel) => kernel !== 'multiTensorAdamw';
        return backend;
      },
    });
  });
  afterAll(async () => {
    await rm(out, { recursive: true, force: true });
  });

  it('reports what each backend lacks, runs the others, and writes both reports', async () => {
    const stdout: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => stdout.push(String(chunk)) > 0);
    vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    const python = process.env.PYTHON;
    process.env.PYTHON = join(out, 'no-such-python');
    let code: number;
    try {
      code = await main([
        '--backends',
        'cpu,partial',
        '--quick',
        '--checkpoint',
        'none,blocks',
        '--baseline',
        'torch',
        '--out',
        out,
      ]);
    } finally {
      vi.restoreAllMocks();
      if (python === undefined) delete process.env.PYTHON;
      else process.env.PYTHON = python;
    }
    expect(code).toBe(0);
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8')) as TrainBenchReport;
    expect(report.parity.map((p) => [p.model, p.status])).toEqual([
      ['mlp', 'skipped'],
      ['transformer', 'skipped'],
    ]);
    expect(report.parity[0]).toMatchObject({
      reason: expect.stringMatching(/'cpu' lacks .*: multiTensorAdamw$/),
    });
    // The language model twice: keeping its activations, and with its blocks checkpointed.
    const ids = withCheckpointing(QUICK_WORKLOADS, ['none', 'blocks']).map(workloadId);
    expect(ids.filter((id) => id.endsWith('-ckpt-blocks'))).toHaveLength(1);
    // Each workload eagerly and replayed (fed from the device, then from the host); a backend that lacks kernels runs none.
    expect(report.throughput.map((t) => [t.backend, t.workload, t.mode, t.status])).toEqual([
      ...ids.flatMap((id) => [
        ['cpu', id, 'eager', 'ok'],
        ['cpu', id, 'replayed', 'ok'],
        ['cpu', id, 'replayed-host', 'ok'],
      ]),
      ...ids.map((id) => ['partial', id, undefined, 'unsupported']),
    ]);
    expect(report.throughput[3 * ids.length]).toMatchObject({ missing: ['multiTensorAdamw'] });
    // Replayed and eager steps train alike: the same first loss, however the batch is fed.
    const [eager, replayed, hostFed] = report.throughput;
    if (eager?.status !== 'ok' || replayed?.status !== 'ok' || hostFed?.status !== 'ok')
      throw new Error('cpu throughput did not run');
    expect(Math.abs(replayed.result.firstLoss - eager.result.firstLoss)).toBeLessThan(1e-6);
    expect(hostFed.result.firstLoss).toBe(replayed.result.firstLoss);
    // Every run reports the device memory it reached: at least its parameters, and reserved never below allocated.
    for (const t of report.throughput) {
      if (t.status !== 'ok') continue;
      const m = t.result.memory;
      expect(m?.peakAllocatedBytes).toBeGreaterThan(0);
      expect(m!.peakReservedBytes).toBeGreaterThanOrEqual(m!.peakAllocatedBytes);
      // The peaks were reset when the run started: its own, at least what was in use then.
      expect(m!.peakAllocatedBytes).toBeGreaterThanOrEqual(m!.startAllocatedBytes!);
    }
    expect(report.baseline).toEqual({
      status: 'unavailable',
      reason: expect.stringMatching(/was not found/),
    });
    expect(report.comparisons).toEqual([]);
    const md = await readFile(join(out, 'report.md'), 'utf8');
    expect(md).toContain('## Throughput');
    expect(md).toContain('cpu replayed');
    expect(md).toContain('cpu replayed host-fed');
    // The report says what each row copies per step.
    expect(md).toContain('| torch graph | each input device to device');
    expect(md).toContain('## Peak device memory');
    expect(md).toMatch(/\| rayo cpu replayed host-fed \| [\d.]+ \|/);
    expect(stdout.join('')).toMatch(/mlp-784x32x10-b16 on partial: unsupported: lacks multiTensorAdamw/);
    // The trade: each cpu run of the checkpointed model beside its twin.
    expect(md).toContain('## Activation checkpointing');
    expect(md).toMatch(/\| transformer-[^|]+ \| blocks \| rayo cpu replayed \| [\d.]+ \| [\d.]+ \|/);
    const checkpointed = report.throughput.filter((t) => t.workload.endsWith('-ckpt-blocks'));
    const twins = report.throughput.filter((t) => `${t.workload}-ckpt-blocks` === checkpointed[0]?.workload);
    expect(checkpointed.map((t) => t.status)).toEqual(['ok', 'ok', 'ok', 'unsupported']);
    checkpointed.forEach((t, i) => {
      const twin = twins[i]!;
      if (t.status !== 'ok' || twin.status !== 'ok') return;
      // The same training, bit for bit, in less memory.
      expect([t.result.firstLoss, t.result.lastLoss]).toEqual([twin.result.firstLoss, twin.result.lastLoss]);
      expect(t.result.memory!.peakAllocatedBytes).toBeLessThan(twin.result.memory!.peakAllocatedBytes);
    });
  });
});
