import {
  type AnyKernelSpec,
  add,
  BackendMismatchError,
  copy,
  createCpuBackend,
  DeviceLostError,
  DisposedTensorError,
  InvalidArgumentError,
  KERNELS,
  RayoError,
  relu,
  scale,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { thrownBy } from '@rayo/core/testing';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CudaBackend } from './backend.js';
import type { CudaCommandBatch } from './batch.js';
import { CudaDriver } from './driver/driver.js';
import { backendProvider } from './index.js';
import { CUDA_KERNELS } from './kernels/index.js';

function setup() {
  const fake = new FakeLibCuda();
  new PtxInterpreter(fake).attach();
  const backend = new CudaBackend(new CudaDriver(fake));
  return { fake, backend };
}

describe('CudaBackend', () => {
  it('describes the device and supports exactly the specs it has kernels for', () => {
    const { backend } = setup();
    expect(backend.info).toMatchObject({ name: 'cuda', kind: 'gpu', device: 'Fake H100 (sm_90, 132 SMs)' });
    expect(backend.info.features).toEqual([
      'sm_90',
      'cuda-graphs',
      'events',
      'half-operand-pass',
      'gated-product-tiles',
    ]);
    const implemented = new Set(CUDA_KERNELS.map((k) => k.spec.name));
    for (const spec of KERNELS)
      expect(backend.supports(spec.name), spec.name).toBe(implemented.has(spec.name));
    expect([...implemented].sort()).toEqual(KERNELS.map((s) => s.name).sort());
    backend.dispose();
  });

  it('rejects a spec without a CUDA kernel by name, before allocating anything', () => {
    const { backend } = setup();
    using a = backend.upload([1, 2, 3, 4], [2, 2]);
    const before = backend.memory();
    const unknown: AnyKernelSpec = { ...relu, name: 'notAKernel' };
    const e = thrownBy(() => backend.run(unknown, [a])) as UnsupportedOnBackendError;
    expect(e).toBeInstanceOf(UnsupportedOnBackendError);
    expect(e.operation).toBe('notAKernel');
    expect(e.message).toContain("no PTX implementation of 'notAKernel'");
    const impostor = { ...relu };
    const i = thrownBy(() => backend.run(impostor, [a])) as UnsupportedOnBackendError;
    expect(i).toBeInstanceOf(UnsupportedOnBackendError);
    expect(i.message).toContain('another spec object of the same name');
    expect(backend.memory()).toEqual(before);
    backend.dispose();
  });

  it('uploads and reads every dtype on its stream', async () => {
    const { fake, backend } = setup();
    const mark = fake.calls.length;
    using f = backend.upload([1.5, -2, 3], [3]);
    expect(fake.since(mark)).toEqual(['cuMemAlloc_v2', 'cuMemcpyHtoDAsync_v2']);
    using i = backend.upload(new Int32Array([-7, 2 ** 31 - 1]), [2], 'i32');
    using u = backend.upload([0, 2 ** 32 - 1], [2], 'u32');
    using h = backend.upload([1, 2, 3], [3], 'f16');
    using e = backend.upload([], [0, 4]);
    expect([...(await f.read())]).toEqual([1.5, -2, 3]);
    expect([...(await i.read())]).toEqual([-7, 2 ** 31 - 1]);
    expect([...(await u.read())]).toEqual([0, 2 ** 32 - 1]);
    expect([...(await h.read())]).toEqual([0x3c00, 0x4000, 0x4200]);
    expect((await e.read()).length).toBe(0);
    expect(fake.calls.filter((c) => c === 'cuMemcpyDtoHAsync_v2')).toHaveLength(4);
    backend.dispose();
  });

  it('writes one word with a memset of its bits, longer data with a copy', async () => {
    const { fake, backend } = setup();
    using i = backend.zeros([1], 'i32');
    using f = backend.zeros([1]);
    using nan = backend.zeros([1]);
    using h = backend.zeros([2], 'bf16');
    using wide = backend.zeros([2]);
    const mark = fake.calls.length;
    backend.write(i, Int32Array.of(-7));
    backend.write(f, [1.5]);
    // A signalling NaN keeps its bits (a trip through a JS number would quiet it).
    backend.write(nan, new Float32Array(Uint32Array.of(0x7f800001).buffer));
    // Two halves at an odd element of their array: the word is read from its bytes.
    backend.write(h, new Uint16Array([0, 0x3f80, 0xc000]).subarray(1));
    backend.write(wide, [1, 2]);
    expect(fake.since(mark)).toEqual([
      'cuMemsetD32Async',
      'cuMemsetD32Async',
      'cuMemsetD32Async',
      'cuMemsetD32Async',
      'cuMemcpyHtoDAsync_v2',
    ]);
    expect([...(await i.read())]).toEqual([-7]);
    expect([...(await f.read())]).toEqual([1.5]);
    expect([...new Uint32Array((await nan.read()).buffer)]).toEqual([0x7f800001]);
    expect([...(await h.read())]).toEqual([0x3f80, 0xc000]);
    expect([...(await wide.read())]).toEqual([1, 2]);
    backend.dispose();
  });

  it('validates uploads like the other backends', () => {
    const { backend } = setup();
    const shape = thrownBy(() => backend.upload([1, 2, 3], [2, 2])) as RayoError;
    expect([shape.operation, shape.argument]).toEqual(['upload', 'data']);
    const dtype = thrownBy(() => backend.upload(new Float32Array(2), [2], 'i32')) as RayoError;
    expect(dtype.argument).toBe('data');
    expect((thrownBy(() => backend.empty([-1])) as RayoError).argument).toBe('shape');
    backend.dispose();
  });

  it('zeros with a memset and reuses pooled memory after dispose', async () => {
    const { fake, backend } = setup();
    const a = backend.upload(new Float32Array(67).fill(9), [67]);
    a.dispose();
    const mark = fake.calls.length;
    using z = backend.zeros([67]);
    expect(fake.since(mark)).toEqual(['cuMemsetD32Async']);
    expect([...(await z.read())]).toEqual(new Array(67).fill(0));
    expect(backend.counts()).toMatchObject({ allocations: 1, reusedAllocations: 1 });
    backend.dispose();
  });

  it('slices a tensor as a buffer at a later address: kernels, copies and reads see its range', async () => {
    const { backend } = setup();
    const flat = backend.upload([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [10]);
    const middle = flat.slice(3, 4);
    expect(backend.operand(middle).ptr - backend.operand(flat).ptr).toBe(12n);
    expect(Array.from(await middle.read())).toEqual([4, 5, 6, 7]);
    const sums = backend.upload([0, 0, 0, 0, 0, 0], [6]);
    backend.run(add, [middle, flat.slice(0, 4)], {}, { out: [sums.slice(1, 4)] });
    backend.copy(backend.upload([-1, -2], [2]), flat.slice(8, 2));
    expect(Array.from(await sums.read())).toEqual([0, 5, 7, 9, 11, 0]);
    expect(Array.from(await flat.read())).toEqual([1, 2, 3, 4, 5, 6, 7, 8, -1, -2]);
    // Nothing is allocated for a slice, and it ends with its base.
    const live = backend.memory().liveTensors;
    const more = flat.slice(1, 1);
    expect(backend.memory().liveTensors).toBe(live);
    flat.dispose();
    expect(more.disposed).toBe(true);
  });

  it('rejects reads of disposed tensors and tensors of another backend', async () => {
    const { backend } = setup();
    const t = backend.upload([1], [1]);
    t.dispose();
    await expect(t.read()).rejects.toBeInstanceOf(DisposedTensorError);
    const cpu = createCpuBackend();
    using other = cpu.upload([1], [1]);
    await expect(backend.read(other)).rejects.toBeInstanceOf(BackendMismatchError);
    expect(thrownBy(() => backend.run(add, [other, other]))).toBeInstanceOf(BackendMismatchError);
    backend.dispose();
  });

  it('runs kernels, and warm runs load no module and allocate nothing', async () => {
    const { fake, backend } = setup();
    using x = backend.upload([-1, 2, -3, 4], [4]);
    using y = backend.empty([4]);
    backend.run(relu, [x], {}, { out: [y] });
    const warm = backend.counts();
    const mark = fake.calls.length;
    backend.run(relu, [x], {}, { out: [y] });
    expect(fake.since(mark)).toEqual(['cuLaunchKernel']);
    expect(backend.counts()).toEqual({ ...warm, moduleHits: warm.moduleHits + 1 });
    expect([...(await y.read())]).toEqual([0, 2, 0, 4]);
    using c = backend.copy(x);
    expect([...(await c.read())]).toEqual([-1, 2, -3, 4]);
    backend.dispose();
  });

  it('frees fresh outputs when recording fails', () => {
    const { fake, backend } = setup();
    using x = backend.upload([1, 2], [2]);
    fake.jitFailure = { status: 218, log: 'bad' };
    const before = backend.memory();
    expect(thrownBy(() => backend.run(scale, [x], { alpha: 2 }))).toBeInstanceOf(RayoError);
    expect(backend.memory().liveTensors).toBe(before.liveTensors);
    backend.dispose();
  });
});

describe('CudaBackend batches', () => {
  it('captures a graph on the first submit and replays it on later ones', async () => {
    const { fake, backend } = setup();
    using a = backend.upload([1, 2, 3], [3]);
    using b = backend.upload([10, 20, 30], [3]);
    const batch = backend.batch() as CudaCommandBatch;
    const [s] = batch.run(add, [a, b]);
    const [t] = batch.run(add, [s!, a]);
    expect(batch.size).toBe(2);
    // Recording enqueues nothing.
    expect(fake.launches).toHaveLength(0);
    let mark = fake.calls.length;
    await batch.submit();
    const first = fake.since(mark);
    expect(first.filter((c) => c.startsWith('cu') && !c.startsWith('cuStreamQuery'))).toEqual([
      'cuStreamBeginCapture_v2',
      'cuLaunchKernel',
      'cuLaunchKernel',
      'cuStreamEndCapture',
      'cuGraphInstantiateWithFlags',
      'cuGraphDestroy',
      'cuGraphLaunch',
    ]);
    expect([...(await t!.read())]).toEqual([12, 24, 36]);
    // The replay writes into the same outputs from the new inputs.
    backend.writeHost(a, [100, 200, 300]);
    mark = fake.calls.length;
    const replay = batch.submit();
    // Submit returns once the graph is launched: the first poll waits for the next turn.
    expect(fake.since(mark)).toEqual(['cuGraphLaunch']);
    await replay;
    expect(fake.since(mark).filter((c) => c !== 'cuStreamQuery')).toEqual(['cuGraphLaunch']);
    expect([...(await t!.read())]).toEqual([210, 420, 630]);
    s!.dispose();
    t!.dispose();
    batch.dispose();
    expect(fake.liveGraphs).toEqual({ graphs: 0, execs: 0 });
    backend.dispose();
  });

  it('captures again after more is recorded', async () => {
    const { fake, backend } = setup();
    using a = backend.upload([1, 2], [2]);
    const batch = backend.batch() as CudaCommandBatch;
    batch.run(relu, [a]);
    await batch.submit();
    const [y] = batch.run(scale, [a], { alpha: 3 });
    expect(fake.liveGraphs.execs).toBe(0);
    await batch.submit();
    expect(fake.calls.filter((c) => c === 'cuStreamBeginCapture_v2')).toHaveLength(2);
    expect([...(await y!.read())]).toEqual([3, 6]);
    batch.dispose();
    backend.dispose();
  });

  it('refuses to replay a batch whose tensors were disposed, naming the argument', async () => {
    const { backend } = setup();
    const a = backend.upload([1, 2], [2]);
    const batch = backend.batch();
    const [y] = batch.run(relu, [a]);
    await batch.submit();
    a.dispose();
    const e = await batch.submit().catch((error: unknown) => error);
    expect(e).toBeInstanceOf(DisposedTensorError);
    expect([(e as RayoError).operation, (e as RayoError).argument]).toEqual(['relu', 'x']);
    y!.dispose();
    backend.dispose();
  });

  it('submits an empty batch (or one of empty tensors) without a graph', async () => {
    const { fake, backend } = setup();
    await backend.batch().submit();
    using e = backend.empty([0]);
    const batch = backend.batch();
    batch.run(relu, [e])[0]!.dispose();
    expect(batch.size).toBe(1);
    await expect(batch.submit()).rejects.toBeInstanceOf(DisposedTensorError);
    expect(fake.calls).not.toContain('cuStreamBeginCapture_v2');
    backend.dispose();
  });
});

describe('CudaBackend timing, weight cache and lifetime', () => {
  it('measures device time between two events around one graph of the work', async () => {
    const { fake, backend } = setup();
    using x = backend.upload([1, 2, 3], [3]);
    backend.run(relu, [x])[0]!.dispose();
    const mark = fake.calls.length;
    const ms = await backend.deviceTime((runner) => {
      for (let i = 0; i < 3; i++) runner.run(relu, [x])[0]!.dispose();
    });
    expect(ms).toBe(0.25);
    const calls = fake.since(mark).filter((c) => c !== 'cuStreamQuery');
    expect(calls[0]).toBe('cuEventCreate');
    // The kernels are captured (no launch of its own each), then the graph runs between the events.
    const begin = calls.indexOf('cuStreamBeginCapture_v2');
    const end = calls.indexOf('cuStreamEndCapture');
    expect(calls.slice(begin + 1, end)).toEqual(new Array(3).fill('cuLaunchKernel'));
    expect(calls.slice(calls.indexOf('cuGraphDestroy') + 1)).toEqual([
      'cuEventRecord',
      'cuGraphLaunch',
      'cuEventRecord',
      'cuEventElapsedTime',
      'cuGraphExecDestroy',
    ]);
    // The result is the same as eager runs give.
    const [y] = backend.run(relu, [x]);
    expect(Array.from(await y!.read())).toEqual([1, 2, 3]);
    y!.dispose();
    backend.dispose();
  });

  it('multiplies by cached weights, read in place as [out, in]', async () => {
    const { backend } = setup();
    const cache = backend.createWeightCache();
    cache.upload('w', [1, 2, 3, -1, 0, 1], [2, 3]);
    expect([cache.weightCount, cache.weightBytes, cache.has('w')]).toEqual([1, 24, true]);
    using x = backend.upload([1, 2, 3], [1, 3]);
    using y = cache.matmul('w', x, { alpha: 2 });
    expect(Array.from(await y.read())).toEqual([28, 4]);
    const host = await cache.matmulHost('w', new Float32Array([1, 2, 3, 0, 1, 0]), 2);
    expect(Array.from(host)).toEqual([14, 2, 2, 0]);
    const missing = await cache.matmulHost('nope', new Float32Array(3), 1).catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(InvalidArgumentError);
    expect((missing as InvalidArgumentError).argument).toBe('name');
    expect(cache.delete('w')).toBe(true);
    cache.dispose();
    backend.dispose();
  });

  it('reports a lost context on every later call', async () => {
    const { fake, backend } = setup();
    using x = backend.upload([1], [1]);
    fake.fail('cuStreamQuery', 719);
    await expect(backend.sync()).rejects.toBeInstanceOf(DeviceLostError);
    expect(thrownBy(() => backend.run(relu, [x]))).toBeInstanceOf(DeviceLostError);
    await expect(x.read()).rejects.toBeInstanceOf(DeviceLostError);
    backend.dispose();
    expect(fake.contextRefs).toBe(0);
  });

  it('releases everything on dispose and refuses use afterwards', () => {
    const { fake, backend } = setup();
    const t = backend.upload([1, 2], [2]);
    backend.dispose();
    backend.dispose();
    expect(fake.contextRefs).toBe(0);
    expect(fake.calls).toContain('cuStreamDestroy_v2');
    t.dispose();
    const e = thrownBy(() => backend.upload([1], [1])) as RayoError;
    expect(e.message).toContain('backend was disposed');
    expect(thrownBy(() => backend.run(copy, [t]))).toBeInstanceOf(RayoError);
  });
});

describe('backendProvider', () => {
  it('says why CUDA cannot run here, or nothing where it can', async () => {
    const reason = await backendProvider.probe();
    expect(reason === undefined || reason.length > 0).toBe(true);
    if (reason !== undefined) expect(reason).toMatch(/libcuda|nvcuda|CUDA|koffi|cuInit|device/);
  });
});
