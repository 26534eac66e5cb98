import {
  BackendUnavailableError,
  DeviceLostError,
  InvalidArgumentError,
  KernelCompileError,
  OutOfMemoryError,
  type RayoError,
} from '@rayo/core';
import { thrownBy } from '@rayo/core/testing';
import { FakeLibCuda } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { PtxModule } from '../ptx/module.js';
import { CudaDriver } from './driver.js';
import { CU_DEVICE_ATTRIBUTE } from './libcuda.js';

function open(setup: (fake: FakeLibCuda) => void = () => {}) {
  const fake = new FakeLibCuda();
  setup(fake);
  return { fake, driver: new CudaDriver(fake) };
}

/** A module with one entry of the given parameters and an empty body. */
function moduleOf(entry: string, params: Record<string, 'ptr' | 'u32' | 's32' | 'f32' | 'u64' | 's64'>) {
  return () => {
    const m = new PtxModule();
    m.entry(entry, params, () => {});
    return m;
  };
}

describe('CudaDriver: device and context', () => {
  it('initialises, reads the device properties and makes the primary context current', () => {
    const { fake, driver } = open();
    expect(fake.calls.slice(0, 3)).toEqual(['cuInit', 'cuDeviceGetCount', 'cuDeviceGet']);
    expect(fake.calls.slice(-3)).toEqual(['cuDevicePrimaryCtxRetain', 'cuCtxSetCurrent', 'allocHost']);
    expect(driver.device).toMatchObject({
      ordinal: 0,
      name: 'Fake H100',
      computeCapability: [9, 0],
      arch: 'sm_90',
      multiprocessors: 132,
      totalMemory: 80 * 2 ** 30,
      maxThreadsPerBlock: 1024,
      maxGridDim: [2 ** 31 - 1, 65535, 65535],
      sharedMemoryPerBlock: 48 * 1024,
      sharedMemoryPerBlockOptin: 227 * 1024,
      warpSize: 32,
    });
    expect(fake.contextRefs).toBe(1);
    // Making the same context current again costs no call.
    const mark = fake.calls.length;
    driver.activate();
    expect(fake.since(mark)).toEqual([]);
  });

  it('reports no device, a failing cuInit or a bad ordinal with the reason', () => {
    const none = thrownBy(() => open((f) => (f.deviceCount = 0)));
    expect(none).toBeInstanceOf(BackendUnavailableError);
    expect((none as Error).message).toContain('the CUDA driver reports no device');

    const init = thrownBy(() => open((f) => f.fail('cuInit', 100)));
    expect(init).toBeInstanceOf(BackendUnavailableError);
    expect((init as Error).message).toBe(
      'cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected',
    );

    const fake = new FakeLibCuda();
    const ordinal = thrownBy(() => new CudaDriver(fake, 3)) as InvalidArgumentError;
    expect(ordinal).toBeInstanceOf(InvalidArgumentError);
    expect([ordinal.argument, ordinal.expected, ordinal.actual]).toEqual([
      'device',
      'an integer in [0, 0]',
      '3',
    ]);
  });

  it('names errors from its own table when cuGetErrorName cannot', () => {
    const { fake, driver } = open();
    fake.errorNames = false;
    // Refused as a whole segment and as the block alone, before and after releasing the cache.
    fake.fail('cuMemAlloc_v2', 2, 4);
    const e = thrownBy(() => driver.alloc(1024)) as RayoError;
    expect(e).toBeInstanceOf(OutOfMemoryError);
    expect(e.message).toMatch(
      /^cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY \(2\) \(allocating 1024 bytes; \d+ of \d+ bytes free\); 0 bytes allocated and 0 reserved by this backend after releasing its cache and trying again \(expected 1024 bytes free on the device, got out of memory\)$/,
    );
    fake.fail('cuMemcpyDtoD_v2', 4242);
    expect((thrownBy(() => driver.copyDtoD(1n, 2n, 4)) as Error).message).toBe(
      'cuMemcpyDtoD_v2: CUDA_ERROR_4242 (4242)',
    );
  });

  it('reads a failing attribute as an error naming the attribute', () => {
    const e = thrownBy(() =>
      open((f) => f.attributes.delete(CU_DEVICE_ATTRIBUTE.MULTIPROCESSOR_COUNT)),
    ) as Error;
    expect(e.message).toBe(
      'cuDeviceGetAttribute: CUDA_ERROR_INVALID_VALUE (1): invalid argument (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)',
    );
  });
});

describe('CudaDriver: memory', () => {
  it('carves allocations from a cached segment and counts real allocations', () => {
    const { fake, driver } = open();
    const a = driver.alloc(1000);
    expect(a.bytes).toBe(1024);
    driver.free(a);
    const b = driver.alloc(900);
    expect(b.ptr).toBe(a.ptr);
    const c = driver.alloc(100);
    expect(c.ptr).toBe(a.ptr + 1024n);
    expect(driver.counts()).toMatchObject({
      allocations: 1,
      reusedAllocations: 2,
      pooledBytes: 2 * 2 ** 20 - 1024 - 512,
    });
    expect(fake.calls.filter((call) => call === 'cuMemAlloc_v2')).toHaveLength(1);
    expect(driver.allocatorStats()).toMatchObject({ allocatedBytes: 1536, reservedBytes: 2 * 2 ** 20 });
  });

  it('gives cached memory back and retries once before reporting out of memory', () => {
    const { fake, driver } = open((f) => (f.memoryLimit = 1 << 20));
    // A 2 MiB segment does not fit in 1 MiB: the block alone is asked for.
    const a = driver.alloc(600 * 1024);
    driver.free(a);
    const mark = fake.calls.length;
    const b = driver.alloc(700 * 1024);
    const memoryCalls = fake.since(mark).filter((c) => /^cu(MemAlloc|MemFree|CtxSynchronize)/.test(c));
    expect(memoryCalls).toEqual([
      'cuMemAlloc_v2',
      'cuMemAlloc_v2',
      'cuCtxSynchronize',
      'cuMemFree_v2',
      'cuMemAlloc_v2',
      'cuMemAlloc_v2',
    ]);
    expect(fake.liveAllocations).toBe(1);
    const e = thrownBy(() => driver.alloc(900 * 1024)) as OutOfMemoryError;
    expect(e).toBeInstanceOf(OutOfMemoryError);
    expect(e.message).toBe(
      'cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory (allocating 921600 bytes; 331776 of 1048576 bytes free); 716800 bytes allocated and 716800 reserved by this backend after releasing its cache and trying again (expected 921600 bytes free on the device, got out of memory)',
    );
    expect(driver.allocatorStats()).toMatchObject({ allocationRetries: 2, outOfMemoryErrors: 1 });
    driver.free(b);
  });

  it('copies through the driver, with the stream on the asynchronous forms', () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    const buf = driver.alloc(16);
    driver.copyHtoDAsync(buf.ptr, new Float32Array([1, 2, 3, 4]), 16, stream);
    driver.memsetD32Async(buf.ptr + 8n, 0x3f800000, 1, stream);
    const out = new Float32Array(4);
    driver.copyDtoHAsync(out, buf.ptr, 16, stream);
    expect([...out]).toEqual([1, 2, 1, 4]);
    fake.fail('cuMemcpyHtoDAsync_v2', 1);
    expect(() => driver.copyHtoDAsync(buf.ptr, out, 16, stream)).toThrow(
      'cuMemcpyHtoDAsync_v2: CUDA_ERROR_INVALID_VALUE (1): invalid argument',
    );
  });
});

describe('CudaDriver: tensor maps', () => {
  it('encodes a map once for the same fields, again for another address or box', () => {
    const { fake, driver } = open();
    const tensor = {
      dtype: 'bf16',
      address: 0x10000n,
      dims: [64, 128, 1],
      strides: [128, 128 * 128],
      box: [64, 64, 1],
      swizzle: '128B',
    } as const;
    const encodes = () => fake.calls.filter((c) => c === 'cuTensorMapEncodeTiled').length;
    const first = driver.encodeTensorMap(tensor);
    expect(driver.encodeTensorMap({ ...tensor, dims: [...tensor.dims] })).toEqual(first);
    expect(encodes()).toBe(1);
    const moved = driver.encodeTensorMap({ ...tensor, address: 0x20000n });
    expect(moved).not.toEqual(first);
    driver.encodeTensorMap({ ...tensor, box: [64, 32, 1] });
    expect(encodes()).toBe(3);
  });
});

describe('CudaDriver: modules', () => {
  it('loads a module once per key and answers later lookups from the cache', () => {
    const { fake, driver } = open();
    let builds = 0;
    const build = () => {
      builds++;
      const m = new PtxModule();
      m.entry('first', { n: 'u32' }, () => {});
      m.entry('second', {}, () => {});
      return m;
    };
    const f1 = driver.loadFunction('family/k/config1', 'first', build);
    const f2 = driver.loadFunction('family/k/config1', 'first', build);
    expect(f2).toBe(f1);
    expect(f1.params).toEqual([{ name: 'n', type: 'u32', bytes: 4 }]);
    const g = driver.loadFunction('family/k/config1', 'second', build);
    expect(g.handle).not.toBe(f1.handle);
    driver.loadFunction('family/k/config2', 'first', build);
    expect(builds).toBe(2);
    expect(fake.calls.filter((c) => c === 'cuModuleLoadDataEx')).toHaveLength(2);
    expect(driver.counts()).toMatchObject({ moduleLoads: 2, moduleHits: 1 });
  });

  it('reports an entry the module lacks', () => {
    const { driver } = open();
    const e = thrownBy(() => driver.loadFunction('k', 'nope', moduleOf('yes', {}))) as InvalidArgumentError;
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect([e.operation, e.argument, e.expected, e.actual]).toEqual(['k', 'entry', "'yes'", "'nope'"]);
  });

  it('carries the JIT error log into KernelCompileError and retries the load next time', () => {
    const { fake, driver } = open();
    fake.jitFailure = {
      status: 218,
      log: "ptxas application ptx input, line 12; error   : Unknown symbol 'x'",
    };
    const e = thrownBy(() => driver.loadFunction('broken/key', 'k', moduleOf('k', {}))) as KernelCompileError;
    expect(e).toBeInstanceOf(KernelCompileError);
    expect(e.operation).toBe('broken/key');
    expect(e.log).toBe("ptxas application ptx input, line 12; error   : Unknown symbol 'x'");
    expect(e.message).toContain(
      'broken/key: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218): a PTX JIT compilation failed (.target sm_75 on sm_90)',
    );
    expect(driver.loadFunction('broken/key', 'k', moduleOf('k', {})).entry).toBe('k');
  });

  it('opts a function into large dynamic shared memory once', () => {
    const { fake, driver } = open();
    const fn = driver.loadFunction('k', 'k', moduleOf('k', {}));
    driver.allowDynamicShared(fn, 32 * 1024);
    expect(fake.funcAttributes.get(fn.handle)).toBeUndefined();
    driver.allowDynamicShared(fn, 100 * 1024);
    driver.allowDynamicShared(fn, 64 * 1024);
    expect(fake.funcAttributes.get(fn.handle)).toEqual(new Map([[8, 100 * 1024]]));
    expect(fake.calls.filter((c) => c === 'cuFuncSetAttribute')).toHaveLength(1);
  });
});

describe('CudaDriver: launches', () => {
  it('marshals each argument into its slot and points the table at the slots', () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    const fn = driver.loadFunction(
      'k',
      'kern',
      moduleOf('kern', { x: 'ptr', n: 'u32', a: 'f32', i: 's32', q: 's64' }),
    );
    driver.launch(fn, [3, 2, 1], [64, 2, 1], 128, stream, [0x7f00_0000_0100n, 17, 0.1, -5, -(2n ** 40n)]);
    driver.launch(fn, [1, 1, 1], [32, 1, 1], 0, stream, [0x7f00_0000_0200n, 1, 1, 1, 1n]);
    const [first, second] = fake.launches;
    expect(first).toMatchObject({
      entry: 'kern',
      grid: [3, 2, 1],
      block: [64, 2, 1],
      sharedBytes: 128,
      stream,
    });
    expect(first!.args).toEqual({ x: 0x7f00_0000_0100n, n: 17, a: Math.fround(0.1), i: -5, q: -(2n ** 40n) });
    // Table right at kernelParams, value slots after it, 8 bytes apart.
    expect(first!.pointers).toEqual([0, 1, 2, 3, 4].map((i) => first!.kernelParams + 40n + 8n * BigInt(i)));
    expect([...first!.slots[1]!]).toEqual([17, 0, 0, 0, 0, 0, 0, 0]);
    expect([...first!.slots[2]!]).toEqual([0xcd, 0xcc, 0xcc, 0x3d, 0, 0, 0, 0]);
    // The block is reused: one native allocation for every launch.
    expect(second!.kernelParams).toBe(first!.kernelParams);
    expect(second!.args.x).toBe(0x7f00_0000_0200n);
    expect(fake.calls.filter((c) => c === 'allocHost')).toHaveLength(1);
  });

  it('passes NULL kernelParams for an entry without parameters and names the launch in errors', () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    const fn = driver.loadFunction('family/none', 'none', moduleOf('none', {}));
    driver.launch(fn, [1, 1, 1], [1, 1, 1], 0, stream, []);
    expect(fake.launches[0]!.kernelParams).toBe(0n);
    fake.fail('cuLaunchKernel', 701);
    const e = thrownBy(() => driver.launch(fn, [2, 1, 1], [1024, 1, 1], 0, stream, [])) as RayoError;
    expect(e.message).toBe(
      "family/none: cuLaunchKernel: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701): too many resources requested for launch (entry 'none', grid [2, 1, 1], block [1024, 1, 1], 0 bytes of dynamic shared memory)",
    );
  });

  it('enqueues recorded commands in order and skips empty copies', () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    const a = driver.alloc(16);
    const b = driver.alloc(16);
    const fn = driver.loadFunction('k', 'k', moduleOf('k', { n: 'u32' }));
    const mark = fake.calls.length;
    driver.enqueue(
      [
        { kind: 'fill32', dst: a.ptr, word: 7, count: 4 },
        { kind: 'copy', src: a.ptr, dst: b.ptr, bytes: 16 },
        { kind: 'copy', src: a.ptr, dst: b.ptr, bytes: 0 },
        { kind: 'launch', fn, grid: [1, 1, 1], block: [32, 1, 1], sharedBytes: 0, values: [3] },
      ],
      stream,
    );
    expect(fake.since(mark)).toEqual(['cuMemsetD32Async', 'cuMemcpyDtoDAsync_v2', 'cuLaunchKernel']);
    expect([...fake.memory.u32(b.ptr, 4)]).toEqual([7, 7, 7, 7]);
  });
});

describe('CudaDriver: streams, graphs and lifetime', () => {
  it('captures enqueued work into a graph that replays it on every launch', () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    const buf = driver.alloc(4);
    const fn = driver.loadFunction('k', 'k', moduleOf('k', { n: 'u32' }));
    let runs = 0;
    fake.kernels.set('k', () => runs++);
    const mark = fake.calls.length;
    const exec = driver.capture(stream, () => {
      driver.enqueue(
        [{ kind: 'launch', fn, grid: [1, 1, 1], block: [1, 1, 1], sharedBytes: 0, values: [1] }],
        stream,
      );
      driver.memsetD32Async(buf.ptr, 5, 1, stream);
    });
    expect(fake.since(mark)).toEqual([
      'cuStreamBeginCapture_v2',
      'cuLaunchKernel',
      'cuMemsetD32Async',
      'cuStreamEndCapture',
      'cuGraphInstantiateWithFlags',
      'cuGraphDestroy',
    ]);
    expect(runs).toBe(0);
    driver.launchGraph(exec, stream);
    driver.launchGraph(exec, stream);
    expect(runs).toBe(2);
    expect(fake.memory.u32(buf.ptr, 1)[0]).toBe(5);
    driver.destroyGraph(exec);
    expect(fake.liveGraphs).toEqual({ graphs: 0, execs: 0 });
  });

  it('ends the capture when recording fails, and the stream can capture again', () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    const boom = new Error('recording failed');
    expect(() =>
      driver.capture(stream, () => {
        driver.memsetD32Async(driver.alloc(4).ptr, 1, 1, stream);
        throw boom;
      }),
    ).toThrow(boom);
    expect(fake.calls.slice(-2)).toEqual(['cuStreamEndCapture', 'cuGraphDestroy']);
    expect(fake.liveGraphs).toEqual({ graphs: 0, execs: 0 });
    const exec = driver.capture(stream, () => {});
    expect(exec).not.toBe(0n);
  });

  it('reports a failed instantiation and still destroys the captured graph', () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    fake.fail('cuGraphInstantiateWithFlags', 1);
    expect(() => driver.capture(stream, () => {})).toThrow(
      'cuGraphInstantiateWithFlags: CUDA_ERROR_INVALID_VALUE (1)',
    );
    expect(fake.liveGraphs.graphs).toBe(0);
  });

  it('waits for a stream by polling, without blocking', async () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    fake.busyPolls = 3;
    const mark = fake.calls.length;
    await driver.waitIdle(stream);
    expect(fake.since(mark)).toEqual(['cuStreamQuery', 'cuStreamQuery', 'cuStreamQuery', 'cuStreamQuery']);
  });

  it('remembers an error that poisons the context and reports it on every later use', async () => {
    const { fake, driver } = open();
    const stream = driver.createStream();
    fake.fail('cuStreamQuery', 700);
    const e = await driver.waitIdle(stream).catch((error: unknown) => error);
    expect(e).toBeInstanceOf(DeviceLostError);
    expect((e as Error).message).toContain('cuStreamQuery: CUDA_ERROR_ILLEGAL_ADDRESS (700)');
    expect(driver.lostError).toBe(e);
    expect(() => driver.alloc(4)).toThrow(DeviceLostError);
    expect(() => driver.alloc(4)).toThrow(
      /^alloc: the CUDA context is unusable after an earlier error: cuStreamQuery/,
    );
    driver.dispose();
    expect(fake.contextRefs).toBe(0);
  });

  it('blames a fault on the last 256 kernels enqueued since the stream was idle, graphs included', () => {
    // `launches` of a graph of ten 'b' after one 'a', then a fault.
    const culprits = (launches: number) => {
      const { fake, driver } = open();
      const stream = driver.createStream();
      const a = driver.loadFunction('a', 'a', moduleOf('a', {}));
      const b = driver.loadFunction('b', 'b', moduleOf('b', {}));
      const launch = (fn: typeof a) =>
        ({ kind: 'launch', fn, grid: [1, 1, 1], block: [1, 1, 1], sharedBytes: 0, values: [] }) as const;
      const exec = driver.capture(stream, () => driver.enqueue(new Array(10).fill(launch(b)), stream));
      driver.enqueue([launch(a)], stream);
      for (let i = 0; i < launches; i++) driver.launchGraph(exec, stream);
      fake.fail('cuStreamQuery', 700);
      return (thrownBy(() => driver.isIdle(stream)) as RayoError).operation;
    };
    expect(culprits(25)).toBe('a, b');
    expect(culprits(26)).toBe('b');
  });

  it('times two events', () => {
    const { driver } = open();
    const stream = driver.createStream();
    const a = driver.createEvent();
    const b = driver.createEvent();
    driver.recordEvent(a, stream);
    driver.recordEvent(b, stream);
    expect(driver.elapsedMs(a, b)).toBe(0.25);
    driver.destroyEvent(a);
    driver.destroyEvent(b);
  });

  it('makes events only for ordering streams, without timing, and says when one is reached', () => {
    const { fake, driver } = open();
    const [main, side] = [driver.createStream(), driver.createStream()];
    const order = driver.createEvent({ timing: false });
    const timed = driver.createEvent();
    expect(fake.eventFlags.get(order)).toBe(2);
    expect(fake.eventFlags.get(timed)).toBe(0);
    driver.recordEvent(order, main);
    driver.recordEvent(timed, main);
    driver.waitEvent(side, order);
    expect(driver.eventDone(order)).toBe(true);
    expect(fake.calls).toContain('cuStreamWaitEvent');
    // As the driver: no timestamps on an event made without timing.
    expect(() => driver.elapsedMs(order, timed)).toThrow(/CUDA_ERROR_INVALID_HANDLE/);
    driver.destroyEvent(order);
    driver.destroyEvent(timed);
  });

  it('unloads modules, frees pooled memory and releases the context on dispose', () => {
    const { fake, driver } = open();
    const fn = driver.loadFunction('k', 'k', moduleOf('k', { n: 'u32' }));
    driver.launch(fn, [1, 1, 1], [1, 1, 1], 0, driver.createStream(), [1]);
    driver.free(driver.alloc(64));
    const mark = fake.calls.length;
    driver.dispose();
    driver.dispose();
    expect(fake.since(mark)).toEqual([
      'cuCtxSynchronize',
      'cuCtxSynchronize',
      'cuMemFree_v2',
      'cuModuleUnload',
      'freeHost',
      'cuDevicePrimaryCtxRelease_v2',
    ]);
    expect(fake.contextRefs).toBe(0);
    expect(() => driver.alloc(4)).toThrow('the CUDA driver was disposed');
  });
});
