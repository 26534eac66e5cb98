import { type Backend, createBackend, createCpuBackend, type KernelRunner, probeBackends } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { compareRuns, parityGate } from './parity.js';

const cpu = (): Backend => createCpuBackend();

describe('parityGate', () => {
  it('passes for two instances of one backend, with identical numbers', async () => {
    for (const model of ['mlp', 'transformer'] as const) {
      const report = await parityGate(cpu, cpu, { model, steps: 4 });
      expect(report.failures).toEqual([]);
      expect(report.passed).toBe(true);
      expect(report.backends).toEqual(['cpu', 'cpu']);
      expect(report.maxLossDiff).toBe(0);
      expect(report.steps).toHaveLength(4);
      expect(report.steps[3]!.lossA).toBeLessThan(report.steps[0]!.lossA);
      expect(report.kernels).toContain('multiTensorAdamw');
      expect(report.kernels).toContain(model === 'mlp' ? 'biasActivationBackward' : 'flashAttentionBackward');
    }
  });

  it('reports the steps where a backend differs', async () => {
    // A backend whose matmul is off by 20%, as a broken kernel would be.
    const skewed = (): Backend => {
      const backend = createCpuBackend();
      const batch = backend.batch.bind(backend);
      backend.batch = () => {
        const inner = batch();
        const run: KernelRunner['run'] = (spec, inputs, attrs, options) =>
          inner.run(
            spec,
            inputs,
            spec.name === 'matmul' ? ({ ...attrs, alpha: 1.2 } as unknown as typeof attrs) : attrs,
            options,
          );
        return { run, submit: () => inner.submit(), dispose: () => inner.dispose(), size: inner.size };
      };
      return backend;
    };
    const report = await parityGate(cpu, skewed, { steps: 2 });
    expect(report.passed).toBe(false);
    expect(report.failures.length).toBeGreaterThan(0);
    expect(report.failures[0]).toMatch(/^step 1: (loss|gradient norm)/);
  });

  it('names the kernels a backend lacks before training on it', async () => {
    const partial = (): Backend => {
      const backend = createCpuBackend();
      backend.supports = (name) => name !== 'multiTensorAdamw' && name !== 'biasActivationBackward';
      return backend;
    };
    await expect(parityGate(cpu, partial)).rejects.toThrow(
      /lacks kernels .*: biasActivationBackward, multiTensorAdamw/,
    );
    // Either side may be the one that lacks kernels (a GPU backend as the reference).
    await expect(parityGate(partial, partial)).rejects.toThrow(
      /'makeBackendA, makeBackendB': backend 'cpu' lacks .*multiTensorAdamw; backend 'cpu' lacks .*multiTensorAdamw$/,
    );
  });
});

describe('compareRuns', () => {
  const tolerances = { lossTolerance: 1e-3, gradNormTolerance: 0.05 };
  const run = (...pairs: [number, number][]) => pairs.map(([loss, gradNorm]) => ({ loss, gradNorm }));

  it('passes within both tolerances and reports the largest differences', () => {
    const verdict = compareRuns(run([2, 10], [1.5, 8]), run([2.0005, 10.4], [1.5, 8]), tolerances);
    expect(verdict.passed).toBe(true);
    expect(verdict.maxLossDiff).toBeCloseTo(5e-4, 9);
    expect(verdict.maxGradNormRelDiff).toBeCloseTo(0.04, 9);
    expect(verdict.steps[0]).toMatchObject({
      step: 1,
      lossA: 2,
      lossB: 2.0005,
      gradNormA: 10,
      gradNormB: 10.4,
    });
  });

  it('names each step outside a tolerance, relative to run A', () => {
    const verdict = compareRuns(run([2, 10], [1.5, 8]), run([2.01, 10], [1.5, 8.5]), tolerances);
    expect(verdict.passed).toBe(false);
    expect(verdict.failures).toHaveLength(2);
    expect(verdict.failures[0]).toMatch(/^step 1: loss 2 vs 2.01/);
    expect(verdict.failures[1]).toMatch(/^step 2: gradient norm 8 vs 8.5 \(relative 0.0625 > 0.05\)/);
  });

  it('fails NaN and runs of different lengths', () => {
    const nan = compareRuns(run([2, 10]), run([Number.NaN, 10]), tolerances);
    expect(nan.passed).toBe(false);
    expect(nan.maxLossDiff).toBe(Number.POSITIVE_INFINITY);
    const short = compareRuns(run([2, 10], [1, 1]), run([2, 10]), tolerances);
    expect(short.passed).toBe(false);
    expect(short.failures[0]).toBe('run A has 2 steps, run B 1');
  });
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)('parityGate cpu vs wgpu', () => {
  for (const model of ['mlp', 'transformer'] as const) {
    it(`${model}: losses within 1e-3 and gradient norms within 5% over 8 steps`, async () => {
      const report = await parityGate(cpu, () => createBackend('wgpu'), { model, steps: 8 });
      expect(report.failures).toEqual([]);
      expect(report.passed).toBe(true);
    }, 120_000);
  }
});
