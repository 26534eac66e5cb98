import { add, DeviceLostError, DisposedTensorError, KernelCompileError, scale, sum } from '@rayo/core';
import { Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';
import { PipelineCache } from './pipelines.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

needsAdapter(`wgpu backend${unavailable ? ` (no adapter: ${unavailable})` : ''}`, () => {
  let backend: WgpuBackend;
  beforeAll(async () => {
    backend = await WgpuBackend.create({ enableToggles: ['allow_unsafe_apis'] });
  });
  afterAll(() => backend.dispose());

  it('caches pipelines by kernel identity and specialisation', async () => {
    using a = backend.upload([1, 2, 3], [3]);
    const before = { ...backend.pipelines.stats };
    backend.run(add, [a, a])[0]!.dispose();
    backend.run(add, [a, a])[0]!.dispose();
    const after = backend.pipelines.stats;
    expect(after.compiles - before.compiles).toBeLessThanOrEqual(1);
    expect(after.hits - before.hits).toBeGreaterThanOrEqual(1);
    await backend.sync();
  });

  const created = () => {
    const { pipelines, ...rest } = backend.objectCounts();
    return { compiles: pipelines.compiles, ...rest };
  };

  it('a warm batch creates no pipelines or buffers, and its replay no bind groups', async () => {
    using x = backend.upload(new Float32Array(1000).fill(0.5), [1000]);
    using s = backend.empty([1000]);
    using y = backend.empty([1000]);
    const dispatches = 400;
    const record = () => {
      const batch = backend.batch();
      for (let i = 0; i < dispatches / 2; i++) {
        batch.run(scale, [x], { alpha: 1.5, beta: i }, { out: [s] });
        batch.run(add, [x, s], {}, { out: [y] });
      }
      return batch;
    };
    await record().submit();
    const warm = created();
    const batch = record();
    await batch.submit();
    // The first submit makes one bind group per dispatch, and nothing else.
    const first = created();
    expect(first).toEqual({ ...warm, bindGroups: warm.bindGroups + dispatches });
    await batch.submit();
    await batch.submit();
    expect(created()).toEqual(first);
    const values = await y.read();
    expect(values[0]).toBeCloseTo(0.5 + (1.5 * 0.5 + 199), 4);
  });

  it('submits a batch in command buffers of growing size, with the same results as one', async () => {
    const rng = new Rng(7);
    const data = Float32Array.from({ length: 333 }, () => rng.normal());
    const chain = (b: WgpuBackend) => {
      const batch = b.batch();
      let t = b.upload(data, [333]);
      const made = [t];
      // 21 dependent kernels: parts of 4, 8 and 9 commands.
      for (let i = 0; i < 21; i++) {
        t = batch.run(scale, [t], { alpha: 1.01, beta: i % 3 })[0]!;
        made.push(t);
      }
      return { batch, out: t, made };
    };
    const inParts = await WgpuBackend.create({ device: backend.device, batchFirstPart: 4 });
    const parted = chain(inParts);
    const before = inParts.commandBuffersSubmitted;
    await parted.batch.submit();
    expect(inParts.commandBuffersSubmitted - before).toBe(3);
    // The default: one command buffer.
    const whole = await WgpuBackend.create({ device: backend.device });
    try {
      const single = chain(whole);
      const start = whole.commandBuffersSubmitted;
      await single.batch.submit();
      expect(whole.commandBuffersSubmitted - start).toBe(1);
      expect(await parted.out.read()).toEqual(await single.out.read());
      // A replay goes in parts too, and gives the same values again.
      const replayedFrom = inParts.commandBuffersSubmitted;
      await parted.batch.submit();
      expect(inParts.commandBuffersSubmitted - replayedFrom).toBe(3);
      let expected = Array.from(data);
      for (let i = 0; i < 21; i++) expected = expected.map((v) => v * 1.01 + (i % 3));
      const replayed = await parted.out.read();
      expect(Array.from(replayed)).toEqual(Array.from(await single.out.read()));
      for (const [i, v] of replayed.entries()) expect(v).toBeCloseTo(expected[i]!, 3);
      for (const t of single.made) t.dispose();
    } finally {
      for (const t of parted.made) t.dispose();
      whole.dispose();
      inParts.dispose();
    }
  });

  it('refuses a batchFirstPart that is not a whole number', async () => {
    await expect(WgpuBackend.create({ device: backend.device, batchFirstPart: -1 })).rejects.toThrow(
      /batchFirstPart/,
    );
  });

  it('a replay writes its parameters again where other work overwrote them', async () => {
    using x = backend.upload([1, 2, 3, 4], [4]);
    using y = backend.empty([4]);
    const batch = backend.batch();
    batch.run(scale, [x], { alpha: 2, beta: 1 }, { out: [y] });
    await batch.submit();
    // Each eager run holds a parameter chunk until it finished: together they
    // take every chunk, the batch's included, and write other values there.
    const chunks = created().paramBuffers;
    for (let i = 0; i < chunks; i++) backend.run(scale, [x], { alpha: 0, beta: -7 }, { out: [y] });
    await backend.sync();
    expect(created().paramBuffers).toBe(chunks);
    expect(Array.from(await y.read())).toEqual([-7, -7, -7, -7]);
    const { bindGroups } = created();
    await batch.submit();
    expect(created().bindGroups).toBe(bindGroups);
    expect(Array.from(await y.read())).toEqual([3, 5, 7, 9]);
  });

  it('replays kernels with scratch buffers, also with submissions of the batch in flight together', async () => {
    const n = 1 << 16;
    using x = backend.upload(new Float32Array(n).fill(0.25), [n]);
    using total = backend.empty([]);
    const batch = backend.batch();
    // Long enough to be split over workgroups through a scratch buffer.
    batch.run(sum, [x], { axis: 'all' }, { out: [total] });
    await batch.submit();
    const before = created();
    await batch.submit();
    expect(created()).toEqual(before);
    expect((await total.read())[0]).toBe(n / 4);
    // Two submissions of the batch in flight at once share its recording: queue order keeps them apart.
    await Promise.all([batch.submit(), batch.submit()]);
    expect(created()).toEqual(before);
    expect((await total.read())[0]).toBe(n / 4);
  });

  it('reads the values as of the call, with the next replay of the batch already in flight', async () => {
    using x = backend.upload([1, 2, 3], [3]);
    using y = backend.empty([3]);
    const batch = backend.batch();
    batch.run(scale, [x], { alpha: 2, beta: 1 }, { out: [y] });
    await batch.submit();
    const steps = async () => {
      const reads: Promise<ArrayLike<number>>[] = [];
      const submits: Promise<void>[] = [];
      for (let step = 0; step < 4; step++) {
        backend.write(x, [step, step + 1, -step]);
        submits.push(batch.submit());
        // Enqueued now: the write and replay of the next step come after it.
        reads.push(backend.read(y));
      }
      await Promise.all(submits);
      return (await Promise.all(reads)).map((v) => Array.from(v));
    };
    const expected = [0, 1, 2, 3].map((s) => [2 * s + 1, 2 * s + 3, -2 * s + 1]);
    const { bindGroups } = created();
    expect(await steps()).toEqual(expected);
    // Reads in flight together each map a staging buffer of their own; the replays made no bind groups.
    expect(created().bindGroups).toBe(bindGroups);
    const warm = created();
    expect(await steps()).toEqual(expected);
    expect(created()).toEqual(warm);
  });

  it('a replay refuses a tensor disposed since recording', async () => {
    const x = backend.upload([1, 2], [2]);
    const batch = backend.batch();
    const [y] = batch.run(scale, [x], { alpha: 2, beta: 0 });
    await batch.submit();
    x.dispose();
    await expect(batch.submit()).rejects.toBeInstanceOf(DisposedTensorError);
    y!.dispose();
  });

  it('uploads of 1 MiB and more go through reused staging buffers, in queue order', async () => {
    const random = (n: number, seed: number) => {
      const rng = new Rng(seed);
      return Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
    };
    const n = 3 * 2 ** 18 + 5; // 3 MiB and 20 bytes
    const first = random(n, 1);
    const second = random(n, 2);
    const before = backend.objectCounts().uploadStagingBuffers;
    using a = backend.upload(first, [n]);
    using b = backend.upload(second, [n]); // the first staging buffer is still in flight
    expect(backend.objectCounts().uploadStagingBuffers - before).toBe(2);
    await backend.sync(); // both mapped again
    using c = backend.upload(second, [n]);
    using small = backend.upload(first.subarray(0, 1000), [1000]);
    expect(backend.objectCounts().uploadStagingBuffers - before).toBe(2);
    // A kernel after the upload sees the uploaded data.
    const [summed] = backend.run(add, [a, c]);
    expect(await a.read()).toEqual(first);
    expect(await b.read()).toEqual(second);
    expect(await small.read()).toEqual(first.subarray(0, 1000));
    const sums = (await summed!.read()) as Float32Array;
    for (const i of [0, 1, n >> 1, n - 1]) expect(sums[i]).toBe(Math.fround(first[i]! + second[i]!));
    summed!.dispose();
  });

  it('cuts a large upload into pieces of one staging size; pieces with every buffer in flight take writeBuffer', async () => {
    // A 3 MiB budget: pieces of 3 MiB, one staging buffer.
    const pieces = await WgpuBackend.create({ uploadStagingBytes: 3 * 2 ** 20 });
    try {
      const n = 7 * 2 ** 18 + 5; // 7 MiB and 20 bytes: three pieces
      const rng = new Rng(3);
      const data = Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
      using t = pieces.upload(data, [n]);
      expect(pieces.objectCounts().uploadStagingBuffers).toBe(1);
      expect(await t.read()).toEqual(data);
      using again = pieces.upload(data.subarray(0, 2 ** 18 + 1), [2 ** 18 + 1]);
      expect(pieces.objectCounts().uploadStagingBuffers).toBe(1);
      expect(await again.read()).toEqual(data.subarray(0, 2 ** 18 + 1));
    } finally {
      pieces.dispose();
    }
  });

  it('with no staging budget, large uploads take writeBuffer', async () => {
    const plain = await WgpuBackend.create({ uploadStagingBytes: 0 });
    try {
      const data = Float32Array.from({ length: 2 ** 19 }, (_, i) => Math.sin(i));
      using t = plain.upload(data, [2 ** 19]);
      expect(await t.read()).toEqual(data);
      expect(plain.objectCounts().uploadStagingBuffers).toBe(0);
    } finally {
      plain.dispose();
    }
  });

  it('measures device time with timestamp queries', async () => {
    using x = backend.upload(new Float32Array(4096).fill(1), [4096]);
    const ms = await backend.deviceTime((runner) => {
      for (let i = 0; i < 10; i++) runner.run(add, [x, x])[0]!.dispose();
    });
    if (backend.gpu.features.has('timestamp-query')) {
      expect(ms).toBeGreaterThan(0);
      expect(ms).toBeLessThan(10_000);
    } else {
      expect(ms).toBeUndefined();
    }
  });

  it('imports an external GPUBuffer without a copy, at an aligned offset', async () => {
    const at = backend.device.limits.minStorageBufferOffsetAlignment;
    const buffer = backend.device.createBuffer({
      size: at + 8,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    backend.device.queue.writeBuffer(buffer, at, new Float32Array([3, 4]));
    expect(() => backend.importBuffer(buffer, [2], 'f32', 8)).toThrow(/multiple of/);
    const t = backend.importBuffer(buffer, [2], 'f32', at);
    const [y] = backend.run(add, [t, t]);
    expect(Array.from(await y!.read())).toEqual([6, 8]);
    // The tensor is a view: later writes by the owner show through it.
    backend.device.queue.writeBuffer(buffer, at, new Float32Array([5, 6]));
    const [z] = backend.run(add, [t, t]);
    expect(Array.from(await z!.read())).toEqual([10, 12]);
    for (const x of [t, y!, z!]) x.dispose();
    // Disposing the tensor left the caller's buffer alone.
    backend.device.queue.writeBuffer(buffer, 0, new Float32Array([1]));
    await backend.sync();
    buffer.destroy();
  });

  it('turns WGSL compile errors into KernelCompileErrors carrying the compiler messages', async () => {
    const cache = new PipelineCache(backend.device);
    cache.get({
      key: 'test/broken',
      kernel: 'broken',
      code: () => '@compute @workgroup_size(1) fn main() { let x: f32 = 1u; }',
    });
    const error = await cache.settle().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(KernelCompileError);
    expect((error as KernelCompileError).operation).toBe('broken');
    expect((error as KernelCompileError).log).toMatch(/error/i);
  });
});

needsAdapter('wgpu device loss', () => {
  it('rejects pending and later work with DeviceLostError instead of hanging', async () => {
    const lostBackend = await WgpuBackend.create();
    using t = lostBackend.upload([1, 2, 3], [3]);
    lostBackend.device.destroy();
    await expect(lostBackend.gpu.lost).rejects.toBeInstanceOf(DeviceLostError);
    await expect(t.read()).rejects.toBeInstanceOf(DeviceLostError);
    expect(() => lostBackend.upload([1], [1])).toThrow(DeviceLostError);
    lostBackend.dispose();
  });
});
