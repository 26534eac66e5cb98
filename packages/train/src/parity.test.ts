import { type Backend, createBackend, createCpuBackend, type KernelRunner, probeBackends } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { parityGate } from './parity.js';

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
      expect(report.kernels).toContain('adamwStep');
      expect(report.kernels).toContain(model === 'mlp' ? 'geluBackward' : 'batchedMatmul');
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
        return { run, submit: () => inner.submit(), size: inner.size };
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
      backend.supports = (name) => name !== 'adamwStep' && name !== 'geluBackward';
      return backend;
    };
    await expect(parityGate(cpu, partial)).rejects.toThrow(/lacks kernels .*: adamwStep, geluBackward/);
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
