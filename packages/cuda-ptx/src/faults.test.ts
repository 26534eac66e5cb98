import { DeviceLostError, relu, scale } from '@rayo/core';
import { FAULT_SCENARIOS, runFaultScenarios } from '@rayo/core/testing';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CudaBackend } from './backend.js';
import { CudaDriver } from './driver/driver.js';
import { cudaFaultSuite, launchStoreToAddress, STORE_TO_ADDRESS_KEY } from './faults.js';

function setup() {
  const fake = new FakeLibCuda();
  new PtxInterpreter(fake).attach();
  fake.faults.set('store_to_address', 700);
  return { fake, backend: new CudaBackend(new CudaDriver(fake)) };
}

async function rejection(promise: Promise<unknown>): Promise<DeviceLostError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(DeviceLostError);
  return error as DeviceLostError;
}

describe('GPU faults on cuda', () => {
  it('names the faulting kernel, then refuses every call saying how to recover', async () => {
    const { fake, backend } = setup();
    using x = backend.upload([1, -2], [2]);
    launchStoreToAddress(backend, 0x10n);
    const fault = await rejection(backend.sync());
    expect(fault.operation).toBe(STORE_TO_ADDRESS_KEY);
    expect(fault.message).toContain(`cuStreamQuery: CUDA_ERROR_ILLEGAL_ADDRESS (700)`);
    expect(fault.message).toContain(
      `a fault in kernel '${STORE_TO_ADDRESS_KEY}' enqueued since the stream was last idle`,
    );
    for (const [api, call] of [
      ['upload', () => backend.upload([1], [1])],
      ['relu', () => backend.run(relu, [x])],
      ['batch', () => backend.batch()],
    ] as const) {
      expect(call, api).toThrow(DeviceLostError);
      expect(call, api).toThrow(
        new RegExp(`^${api}: the CUDA context is unusable after an earlier error: .*create a new one`),
      );
    }
    expect((await rejection(backend.read(x))).operation).toBe('read');
    backend.dispose();
    expect(fake.contextRefs).toBe(0);
    // Once every user released the context, a new backend gets a fresh one.
    const fresh = new CudaBackend(new CudaDriver(fake));
    using y = fresh.run(relu, [fresh.upload([-1, 5], [2])])[0]!;
    expect(Array.from(await y.read())).toEqual([0, 5]);
    fresh.dispose();
  });

  it('names the kernels of a batch when one of them faults during its graph', async () => {
    const { fake, backend } = setup();
    using x = backend.upload([1, 2], [2]);
    backend.run(scale, [x], { alpha: 2 })[0]!.dispose();
    await backend.sync();
    const entry = fake.launches.at(-1)!.entry;
    fake.faults.set(entry, 719);
    const batch = backend.batch();
    batch.run(relu, [x]);
    batch.run(scale, [x], { alpha: 3 });
    const fault = await rejection(batch.submit());
    expect(fault.message).toContain('CUDA_ERROR_LAUNCH_FAILED (719)');
    expect(fault.message).toMatch(/a fault in one of the 2 kernels '[^']*relu[^']*', '[^']*scale[^']*'/);
    backend.dispose();
  });

  it('names the kernels of a replayed graph that faults', async () => {
    const { fake, backend } = setup();
    using x = backend.upload([1, 2], [2]);
    const batch = backend.batch();
    batch.run(relu, [x]);
    batch.run(scale, [x], { alpha: 3 });
    await batch.submit();
    fake.faults.set(fake.launches.at(-1)!.entry, 719);
    const fault = await rejection(batch.submit());
    expect(fault.message).toMatch(/a fault in one of the 2 kernels '[^']*relu[^']*', '[^']*scale[^']*'/);
    backend.dispose();
  });

  it('survives the fault-suite scenarios on an emulated device', async () => {
    const fake = new FakeLibCuda();
    fake.memoryLimit = 2 ** 30;
    new PtxInterpreter(fake).attach();
    fake.faults.set('store_to_address', 700);
    const scenarios = [...FAULT_SCENARIOS, ...(cudaFaultSuite.scenarios ?? [])].filter(
      // Filling an emulated device takes host memory for nothing.
      (s) => !s.name.startsWith('out of memory'),
    );
    const results = await runFaultScenarios(scenarios, {
      backendName: 'cuda',
      create: async () => new CudaBackend(new CudaDriver(fake)),
      soakKernels: 200,
    });
    expect(results.filter((r) => r.status !== 'survived').map((r) => `${r.scenario}: ${r.outcome}`)).toEqual(
      [],
    );
    expect(results.at(-1)?.outcome).toContain('a new backend works');
  });
});
