import { add, RayoError, relu, type Tensor } from '@rayo/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

needsAdapter('errors WebGPU reports later name the call that caused them', () => {
  let gpu: WgpuBackend;
  beforeAll(async () => {
    gpu = await WgpuBackend.create();
  });
  afterAll(() => gpu?.dispose());

  /** A tensor over a buffer of its own that the test destroys: submitting work on it is a validation error. */
  function destroyedTensor(): Tensor {
    const buffer = gpu.device.createBuffer({
      size: 16,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    const tensor = gpu.importBuffer(buffer, [4]);
    buffer.destroy();
    return tensor;
  }

  it('an eager call: the next sync names the kernel and its number since the last sync', async () => {
    await gpu.sync();
    using x = gpu.upload([1, -2, 3, -4], [4]);
    using ok = gpu.run(relu, [x])[0]!;
    const bad = destroyedTensor();
    using y = gpu.run(add, [x, bad])[0]!;
    const error = await gpu.sync().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RayoError);
    expect((error as RayoError).message).toMatch(
      /WebGPU reported 1 error\(s\): add \(call 2 since the last sync\): /,
    );
    // The original cause is kept, and its text is in the message.
    const cause = (error as RayoError).cause as GPUError;
    expect(cause.message.length).toBeGreaterThan(0);
    expect((error as RayoError).message).toContain(cause.message);
    // Reported once; the count starts again after a sync.
    await gpu.sync();
    using z = gpu.run(relu, [bad])[0]!;
    await expect(z.read()).rejects.toThrow(/relu \(call 1 since the last sync\)/);
    expect(Array.from(await ok.read())).toEqual([1, 0, 3, 0]);
    expect(y.size).toBe(4);
  });

  it('a batch: its submit rejects, naming the batch and its kernels', async () => {
    await gpu.sync();
    using x = gpu.upload([1, 2, 3, 4], [4]);
    const bad = destroyedTensor();
    const batch = gpu.batch();
    try {
      using a = batch.run(relu, [x])[0]!;
      using _b = batch.run(add, [a, bad])[0]!;
      await expect(batch.submit()).rejects.toThrow(
        /batch submit of 2 kernel\(s\) \(relu, add\) \(call 1 since the last sync\)/,
      );
    } finally {
      batch.dispose();
    }
    await gpu.sync();
  });
});
