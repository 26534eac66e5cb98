import { DeviceLostError, OutOfMemoryError, RayoError, relu, scale } from '@rayo/core';
import { extendFaultSuite, FAULT_SCENARIOS, runFaultScenarios } from '@rayo/core/testing';
import { describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { wgpuFaultSuite } from './faults.js';
import { backendProvider } from './index.js';
import { workInFlight } from './workInFlight.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

/** What `promise` settles to within `ms`, or 'pending'. */
function settledWithin(promise: Promise<unknown>, ms: number): Promise<unknown> {
  return Promise.race([
    promise.then(
      () => 'resolved',
      (error: unknown) => error,
    ),
    new Promise((resolve) => setTimeout(() => resolve('pending'), ms)),
  ]);
}

needsAdapter('wgpu backend under faults', () => {
  it('a memory budget refuses an allocation at the call, and frees pooled memory to recover', async () => {
    const mib = 2 ** 20;
    const backend = await WgpuBackend.create({ memoryBudgetBytes: 8 * mib, uploadStagingBytes: 0 });
    try {
      const held = [];
      let error: unknown;
      try {
        for (let i = 0; i < 16; i++) held.push(backend.zeros([mib / 4]));
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(OutOfMemoryError);
      expect((error as OutOfMemoryError).operation).toBe('zeros');
      expect(held.length).toBe(8);
      for (const t of held) t.dispose();
      // Other sizes than the pooled ones: the pool gives its memory back.
      using x = backend.upload(new Float32Array(mib / 2).fill(-1), [mib / 2]);
      using y = backend.run(relu, [x])[0]!;
      expect((await y.read()).every((v) => v === 0)).toBe(true);
      expect(backend.deviceMemory().usedBytes).toBeLessThanOrEqual(8 * mib);
    } finally {
      backend.dispose();
    }
  });

  it('turns Dawn errors into RayoErrors at the next sync instead of printing them', async () => {
    const backend = await WgpuBackend.create();
    try {
      let printed: boolean | undefined;
      backend.device.addEventListener('uncapturederror', (event) => {
        printed = !event.defaultPrevented;
      });
      backend.device.createBuffer({ size: 4, usage: 0 });
      await expect(backend.sync()).rejects.toThrow(
        /WebGPU reported 1 error\(s\): Buffer usages must not be 0/,
      );
      expect(printed).toBe(false);
      // Reported once; the backend goes on.
      await backend.sync();
    } finally {
      backend.dispose();
    }
  });

  it('a device lost mid-batch rejects pending submits and reads within a second, and later calls say so', async () => {
    const backend = await WgpuBackend.create();
    const { x, submitted, read } = workInFlight(backend, 1 << 16, 200);
    backend.device.destroy();
    for (const pending of [submitted, read]) {
      const outcome = await settledWithin(pending, 1000);
      expect(outcome).toBeInstanceOf(DeviceLostError);
    }
    expect(() => backend.upload([1], [1])).toThrow(DeviceLostError);
    expect(() => backend.run(scale, [x], { alpha: 2 })).toThrow(DeviceLostError);
    expect(() => backend.batch()).toThrow(DeviceLostError);
    await expect(backend.sync()).rejects.toBeInstanceOf(DeviceLostError);
    await expect(x.read()).rejects.toBeInstanceOf(RayoError);
    backend.dispose();
  });
});

needsAdapter('fault suite on wgpu', () => {
  it('survives every scenario that fits a software adapter', async () => {
    const scenarios = [...FAULT_SCENARIOS, ...(wgpuFaultSuite.scenarios ?? [])];
    extendFaultSuite(wgpuFaultSuite);
    const results = await runFaultScenarios(scenarios, {
      backendName: 'wgpu',
      create: (options) => WgpuBackend.create(options),
      soakKernels: 2000,
    });
    expect(results.filter((r) => r.status !== 'survived').map((r) => `${r.scenario}: ${r.outcome}`)).toEqual(
      [],
    );
    expect(results.find((r) => r.scenario.startsWith('soak'))?.outcome).toContain('pipelineCompiles');
  });
});
