import { OutOfMemoryError, sum } from '@rayo/core';
import { afterAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

const KIB = 1024;

needsAdapter('WgpuBackend: caching allocator', () => {
  let backend: WgpuBackend;
  afterAll(() => backend?.dispose());

  it('reuses a freed buffer of the same size class, reports it in memory(), and emptyCache destroys it', async () => {
    backend ??= await WgpuBackend.create();
    const start = backend.memory();
    backend.zeros([100]).dispose();
    // 400 bytes take a 512-byte buffer, kept after the dispose.
    expect(backend.memory()).toMatchObject({
      allocatedBytes: start.allocatedBytes,
      reservedBytes: start.reservedBytes + 512,
      segmentsAllocated: start.segmentsAllocated + 1,
    });
    using again = backend.zeros([120]);
    expect(backend.memory().segmentsAllocated).toBe(start.segmentsAllocated + 1);
    expect(Array.from(await again.read())).toEqual(new Array(120).fill(0));
    again.dispose();
    const held = backend.deviceMemory().usedBytes;
    backend.emptyCache();
    expect(backend.memory().reservedBytes).toBe(start.reservedBytes);
    expect(backend.deviceMemory().usedBytes).toBeLessThanOrEqual(held - 512);
  });

  it('starts the peaks of memory() again from what is in use and held at resetPeakMemory()', async () => {
    backend ??= await WgpuBackend.create();
    backend.zeros([64 * KIB]).dispose();
    backend.emptyCache();
    const before = backend.memory();
    expect(before.peakAllocatedBytes).toBeGreaterThanOrEqual(before.allocatedBytes + 256 * KIB);
    backend.resetPeakMemory();
    const reset = backend.memory();
    expect(reset).toMatchObject({
      peakAllocatedBytes: before.allocatedBytes,
      peakReservedBytes: before.reservedBytes,
      peakBytes: before.liveBytes,
    });
    backend.zeros([100]).dispose();
    expect(backend.memory()).toMatchObject({
      peakAllocatedBytes: before.allocatedBytes + 512,
      peakReservedBytes: before.reservedBytes + 512,
      peakBytes: before.liveBytes + 400,
    });
  });

  it('gives a batch one scratch arena: ten split reductions create the scratch of one', async () => {
    backend ??= await WgpuBackend.create();
    const n = 40_000;
    const data = Float32Array.from({ length: n }, (_, i) => ((i * 7919) % 101) / 50 - 1);
    using x = backend.upload(data, [n]);
    const before = backend.objectCounts().scratchBuffers;
    const batch = backend.batch();
    const outputs = Array.from({ length: 10 }, () => batch.run(sum, [x], { axis: 'all' })[0]!);
    await batch.submit();
    const made = backend.objectCounts().scratchBuffers - before;
    expect(made).toBeGreaterThan(0);
    // The split's partial sums of every call share the first call's buffer.
    expect(made).toBeLessThanOrEqual(2);
    const want = data.reduce((a, b) => a + b, 0);
    for (const y of outputs) expect((await y.read())[0]).toBeCloseTo(want, 2);
    // A replay takes the same buffers back: nothing new.
    await batch.submit();
    expect(backend.objectCounts().scratchBuffers - before).toBe(made);
    batch.dispose();
    for (const y of outputs) y.dispose();
  });

  it('keeps no idle buffer with maxCachedBytes 0, and counts a budget refusal after one retry', async () => {
    const capped = await WgpuBackend.create({ maxCachedBytes: 0, memoryBudgetBytes: 1024 * KIB });
    try {
      capped.empty([(600 * KIB) / 4]).dispose();
      expect(capped.memory().reservedBytes).toBe(0);
      using held = capped.empty([(700 * KIB) / 4]);
      let error: unknown;
      try {
        capped.zeros([(500 * KIB) / 4]);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(OutOfMemoryError);
      expect((error as OutOfMemoryError).operation).toBe('zeros');
      expect(capped.memory()).toMatchObject({ allocationRetries: 1, outOfMemoryErrors: 1, liveTensors: 1 });
      expect(held.size).toBe((700 * KIB) / 4);
    } finally {
      capped.dispose();
    }
    await expect(WgpuBackend.create({ maxCachedBytes: -1 })).rejects.toThrow(/maxCachedBytes/);
  });
});
