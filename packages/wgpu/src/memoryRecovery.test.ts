import { OutOfMemoryError, relu } from '@rayo/core';
import { FAULT_SCENARIOS, runFaultScenarios } from '@rayo/core/testing';
import { describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

/**
 * A real device seen through a wrapper that gives tensor buffers only
 * `capacity` bytes and frees like Dawn on a GPU: a destroyed buffer's memory
 * returns once a submission made after the destroy has completed. A refused
 * buffer is invalid, as Dawn's is, and its scope reports out of memory.
 */
function deferringDevice(real: GPUDevice, capacity: number, maxBufferSize?: number) {
  const state = { free: capacity, refused: 0, submits: 0 };
  const deferred: { bytes: number; serial: number }[] = [];
  const scopes: boolean[] = [];
  const queue = new Proxy(real.queue, {
    get(target, prop) {
      if (prop === 'submit')
        return (buffers: GPUCommandBuffer[]) => {
          state.submits++;
          target.submit(buffers);
        };
      if (prop === 'onSubmittedWorkDone')
        return async () => {
          const done = state.submits;
          await target.onSubmittedWorkDone();
          for (let i = deferred.length - 1; i >= 0; i--) {
            if (deferred[i]!.serial <= done) state.free += deferred.splice(i, 1)[0]!.bytes;
          }
        };
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const createBuffer = (d: GPUBufferDescriptor): GPUBuffer => {
    if (d.label !== 'rayo tensor') return real.createBuffer(d);
    if (d.size > state.free) {
      state.refused++;
      scopes[scopes.length - 1] = true;
      // An invalid buffer, as a refused allocation gives; its own error is not the point.
      real.pushErrorScope('validation');
      const invalid = real.createBuffer({ ...d, usage: 0 });
      void real.popErrorScope();
      return invalid;
    }
    state.free -= d.size;
    const buffer = real.createBuffer(d);
    const destroy = buffer.destroy.bind(buffer);
    let destroyed = false;
    Object.defineProperty(buffer, 'destroy', {
      value: () => {
        if (!destroyed) deferred.push({ bytes: d.size, serial: state.submits + 1 });
        destroyed = true;
        destroy();
      },
    });
    return buffer;
  };
  const limits = new Proxy(real.limits, {
    get: (target, prop) =>
      prop === 'maxBufferSize' && maxBufferSize ? maxBufferSize : Reflect.get(target, prop, target),
  });
  const device = new Proxy(real, {
    get(target, prop) {
      if (prop === 'queue') return queue;
      if (prop === 'limits') return limits;
      // Not a software adapter: the fault suite fills this device.
      if (prop === 'adapterInfo') return { description: 'a device that frees like Dawn on a GPU' };
      if (prop === 'createBuffer') return createBuffer;
      if (prop === 'pushErrorScope')
        return (filter: GPUErrorFilter) => {
          scopes.push(false);
          target.pushErrorScope(filter);
        };
      if (prop === 'popErrorScope')
        return async () => {
          const refused = scopes.pop();
          const error = await target.popErrorScope();
          return refused ? ({ message: 'VK_ERROR_OUT_OF_DEVICE_MEMORY' } as GPUError) : error;
        };
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { device, state };
}

const MIB = 2 ** 20;

needsAdapter('wgpu memory after the device refused an allocation', () => {
  async function filled() {
    const owner = await WgpuBackend.create();
    const { device, state } = deferringDevice(owner.device, 8 * MIB);
    const backend = await WgpuBackend.create({ device, uploadStagingBytes: 0 });
    const held = Array.from({ length: 9 }, () => backend.zeros([MIB / 4]));
    const refused = await backend.sync().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OutOfMemoryError);
    expect((refused as OutOfMemoryError).operation).toBe('zeros');
    expect(state.refused).toBe(1);
    for (const t of held) t.dispose();
    return {
      backend,
      state,
      dispose() {
        backend.dispose();
        owner.dispose();
      },
    };
  }

  it('retries fresh allocations refused before the frees reached the driver, and they hold zeros', async () => {
    const { backend, state, dispose } = await filled();
    try {
      // At once, no await: the freed memory is still the driver's.
      const again = Array.from({ length: 2 }, () => backend.zeros([(3 * MIB) / 4]));
      expect(state.refused).toBe(3);
      await backend.sync();
      expect(backend.deviceMemory().recovery).toMatchObject({ retried: 2, recovered: 2 });
      expect(backend.deviceMemory().recovery.waits).toBeGreaterThanOrEqual(2);
      for (const t of again) expect((await t.read()).every((v) => v === 0)).toBe(true);
      using x = backend.upload([-2, 3, -4, 5], [4]);
      using y = backend.run(relu, [x])[0]!;
      expect(Array.from(await y.read())).toEqual([0, 3, 0, 5]);
      for (const t of again) t.dispose();
      expect(backend.describeMemoryRecovery()).toMatch(/2 refused allocation\(s\) retried, 2 granted/);
    } finally {
      dispose();
    }
  });

  it('a sync after the frees pushes them to the driver, so the next allocations are granted at once', async () => {
    const { backend, state, dispose } = await filled();
    try {
      await backend.sync();
      const again = Array.from({ length: 2 }, () => backend.zeros([(3 * MIB) / 4]));
      await backend.sync();
      expect(state.refused).toBe(1);
      expect(backend.deviceMemory().recovery).toMatchObject({ releases: 1, retried: 0 });
      for (const t of again) t.dispose();
    } finally {
      dispose();
    }
  });

  it('an upload refused before the frees reached the driver stays an OutOfMemoryError; the next one works', async () => {
    const { backend, state, dispose } = await filled();
    try {
      const written = backend.upload(new Float32Array(MIB / 4).fill(1), [MIB / 4]);
      expect(state.refused).toBe(2);
      const error = await backend.sync().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutOfMemoryError);
      expect((error as OutOfMemoryError).operation).toBe('upload');
      expect(backend.deviceMemory().recovery.retried).toBe(0);
      written.dispose();
      using x = backend.upload(new Float32Array(MIB / 4).fill(2), [MIB / 4]);
      expect((await x.read()).every((v) => v === 2)).toBe(true);
      expect(state.refused).toBe(2);
    } finally {
      dispose();
    }
  });
});

needsAdapter('fault suite on a device that frees like Dawn on a GPU', () => {
  it('survives out of memory, then recovery once memory is freed, and says what recovery took', async () => {
    const owner = await WgpuBackend.create();
    const backends: WgpuBackend[] = [];
    try {
      const scenario = FAULT_SCENARIOS.find((s) => s.name.startsWith('out of memory'))!;
      const [result] = await runFaultScenarios([scenario], {
        backendName: 'wgpu',
        create: async () => {
          const { device } = deferringDevice(owner.device, 256 * MIB, 64 * MIB);
          const backend = await WgpuBackend.create({ device, uploadStagingBytes: 0 });
          backends.push(backend);
          return backend;
        },
        soakKernels: 0,
      });
      expect(result?.status, result?.outcome).toBe('survived');
      // Some of the allocations made at once after the frees were refused and granted on a retry.
      const counts =
        /recovery: (\d+) release\(s\) of freed memory in (\d+) queue wait\(s\); (\d+) refused allocation\(s\) retried, (\d+) granted/.exec(
          result?.outcome ?? '',
        );
      expect(counts, result?.outcome).not.toBeNull();
      const [, releases, waits, retried, granted] = counts!.map(Number);
      expect(releases).toBeGreaterThanOrEqual(1);
      expect(waits).toBe(2 * releases!);
      expect(retried).toBeGreaterThanOrEqual(1);
      expect(granted).toBe(retried);
    } finally {
      for (const b of backends) b.dispose();
      owner.dispose();
    }
  });
});
