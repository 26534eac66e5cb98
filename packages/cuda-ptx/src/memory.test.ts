import { createCpuBackend, InvalidArgumentError, OutOfMemoryError, sum } from '@rayo/core';
import { thrownBy } from '@rayo/core/testing';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CudaBackend } from './backend.js';
import type { CudaCommandBatch } from './batch.js';
import { CudaDriver } from './driver/driver.js';

const MIB = 2 ** 20;

function setup(memoryLimit = 2 ** 30, maxCachedBytes?: number) {
  const fake = new FakeLibCuda();
  fake.memoryLimit = memoryLimit;
  new PtxInterpreter(fake).attach();
  const backend = new CudaBackend(new CudaDriver(fake, 0, maxCachedBytes));
  return { fake, backend };
}

describe('CudaBackend: caching allocator', () => {
  it('reports allocated, reserved and peak bytes, and emptyCache gives idle segments back', () => {
    const { fake, backend } = setup();
    const small = [backend.zeros([100]), backend.zeros([300])];
    // Carved from one 2 MiB segment.
    expect(fake.liveAllocations).toBe(1);
    expect(backend.memory()).toMatchObject({
      liveTensors: 2,
      liveBytes: 1600,
      allocatedBytes: 512 + 1536,
      reservedBytes: 2 * MIB,
    });
    for (const t of small) t.dispose();
    expect(backend.memory()).toMatchObject({
      allocatedBytes: 0,
      reservedBytes: 2 * MIB,
      peakAllocatedBytes: 2048,
    });
    backend.emptyCache();
    expect(fake.liveAllocations).toBe(0);
    expect(backend.memory()).toMatchObject({ reservedBytes: 0, peakReservedBytes: 2 * MIB });
    backend.dispose();
    // After dispose there is nothing to give back, and no error.
    backend.emptyCache();
  });

  it('releases its cache and retries once when cuMemAlloc runs out of memory', async () => {
    const { fake, backend } = setup(8 * MIB);
    backend.zeros([(5 * MIB) / 4]).dispose();
    // 5 MiB idle in the cache + 6 MiB do not fit in 8 MiB: released, then granted.
    using big = backend.zeros([(6 * MIB) / 4]);
    expect(backend.memory()).toMatchObject({
      allocationRetries: 1,
      outOfMemoryErrors: 0,
      reservedBytes: 6 * MIB,
    });
    // An injected refusal of every attempt (segment and block, before and after the release).
    fake.fail('cuMemAlloc_v2', 2, 4);
    const e = thrownBy(() => backend.empty([1000])) as OutOfMemoryError;
    expect(e).toBeInstanceOf(OutOfMemoryError);
    expect(e.operation).toBe('empty');
    expect(e.message).toContain('the device could not allocate f32[1000]');
    expect(e.message).toContain('after releasing its cache and trying again');
    expect(backend.memory()).toMatchObject({ allocationRetries: 2, outOfMemoryErrors: 1, liveTensors: 1 });
    // A single injected refusal is absorbed by the retry.
    fake.fail('cuMemAlloc_v2', 2, 2);
    using after = backend.upload([1, 2, 3], [3]);
    expect([...(await after.read())]).toEqual([1, 2, 3]);
    expect(backend.memory()).toMatchObject({ allocationRetries: 3, outOfMemoryErrors: 1 });
    expect(big.size).toBe((6 * MIB) / 4);
    backend.dispose();
  });

  it('keeps at most maxCachedBytes idle', () => {
    const { fake, backend } = setup(2 ** 30, 16 * MIB);
    const tensors = [12, 14].map((m) => backend.empty([(m * MIB) / 4]));
    for (const t of tensors) t.dispose();
    // 26 MiB idle is over the cap: the larger segment went back to the device.
    expect(fake.liveAllocations).toBe(1);
    expect(backend.memory().reservedBytes).toBe(12 * MIB);
    backend.dispose();
  });

  it('refuses a maxCachedBytes that is not a non-negative number', async () => {
    const fake = new FakeLibCuda();
    await expect(CudaDriver.open({ lib: fake, maxCachedBytes: -1 })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
  });

  it('gives a batch one scratch arena that its calls reuse in order', async () => {
    const { backend } = setup();
    const n = 8192;
    const data = Float32Array.from({ length: n }, (_, i) => ((i * 7919) % 101) / 50 - 1);
    using x = backend.upload(data, [n]);
    const scratchOf = (calls: number) => {
      const batch = backend.batch() as CudaCommandBatch;
      const outputs = Array.from({ length: calls }, () => batch.run(sum, [x], { axis: 'all' })[0]!);
      return { batch, outputs, bytes: batch.scratchBytes };
    };
    const one = scratchOf(1);
    const ten = scratchOf(10);
    // A split reduction takes scratch; ten of them in a batch share the first one's.
    expect(one.bytes).toBeGreaterThan(0);
    expect(ten.bytes).toBe(one.bytes);
    await ten.batch.submit();
    const want = data.reduce((a, b) => a + b, 0);
    for (const y of ten.outputs) expect((await y.read())[0]).toBeCloseTo(want, 3);
    const held = backend.memory().allocatedBytes;
    ten.batch.dispose();
    expect(backend.memory().allocatedBytes).toBe(held - ten.bytes);
    for (const y of [...one.outputs, ...ten.outputs]) y.dispose();
    one.batch.dispose();
    backend.dispose();
  });

  it('lets batches that run one after another share one scratch arena, freed with the last of them', async () => {
    const { backend } = setup();
    const data = Float32Array.from({ length: 8192 }, (_, i) => ((i * 31) % 17) / 8 - 1);
    using x = backend.upload(data, [data.length]);
    const first = backend.batch() as CudaCommandBatch;
    const a = first.run(sum, [x], { axis: 'all' })[0]!;
    const second = backend.batch({ scratchFrom: first }) as CudaCommandBatch;
    const b = second.run(sum, [x], { axis: 'all' })[0]!;
    // The second batch's reduction took the first one's scratch: only its output is new.
    const scratch = first.scratchBytes;
    expect(scratch).toBeGreaterThan(0);
    expect(second.scratchBytes).toBe(scratch);
    await first.submit();
    await second.submit();
    const want = data.reduce((s, v) => s + v, 0);
    expect([(await a.read())[0], (await b.read())[0]].map((v) => Math.round(v! * 1000))).toEqual([
      Math.round(want * 1000),
      Math.round(want * 1000),
    ]);
    const held = backend.memory().allocatedBytes;
    first.dispose();
    expect(backend.memory().allocatedBytes).toBe(held);
    second.dispose();
    expect(backend.memory().allocatedBytes).toBe(held - scratch);
    expect(() => backend.batch({ scratchFrom: createCpuBackend().batch() })).toThrow(/shares scratch only/);
    backend.dispose();
  });
});
