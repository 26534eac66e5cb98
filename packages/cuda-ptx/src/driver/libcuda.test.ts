import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BackendUnavailableError, KernelCompileError } from '@rayo/core';
import { buildNativeFake, type NativeFake, nativeFakeGate } from '@rayo/cuda-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PtxModule } from '../ptx/module.js';
import { CudaDriver } from './driver.js';
import { defaultLibCudaPath, type LibCuda, loadLibCuda } from './libcuda.js';

describe('loading libcuda', () => {
  it('names the library file of each platform', () => {
    expect(defaultLibCudaPath('linux')).toBe('libcuda.so.1');
    expect(defaultLibCudaPath('win32')).toBe('nvcuda.dll');
    expect(defaultLibCudaPath('darwin')).toBeUndefined();
  });

  it('reports a library that cannot be loaded as BackendUnavailableError with the reason', async () => {
    const missing = join(tmpdir(), 'rayo-no-such-dir', 'libcuda.so.1');
    const error = await loadLibCuda({ path: missing }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendUnavailableError);
    expect((error as Error).message).toContain(`could not load ${missing}`);
  });
});

// The binding itself is checked against a C library with the driver API's
// signatures, built here with the system C compiler where one exists.
const gate = nativeFakeGate();

describe.skipIf(gate.skip)(`the koffi binding against a native fake libcuda (${gate.reason})`, () => {
  let fake: NativeFake | undefined;
  let path: string;
  let lib: LibCuda;
  type Fn = (...args: unknown[]) => unknown;
  let helpers: Record<string, Fn>;

  beforeAll(async () => {
    fake = buildNativeFake('libcuda');
    path = fake.path;
    lib = await loadLibCuda({ path });
    const koffi = (await import('koffi')).default;
    const so = koffi.load(path);
    helpers = {
      expectParams: so.func('void fake_expect_params(int count, const int *sizes)') as Fn,
      lastLaunch: so.func('void fake_last_launch(void *dims, void *values, void *pointers)') as Fn,
      lastStream: so.func('uint64_t fake_last_stream(void)') as Fn,
      currentContext: so.func('uint64_t fake_current_context(void)') as Fn,
      captureMode: so.func('int fake_last_capture_mode(void)') as Fn,
      instantiateFlags: so.func('unsigned long long fake_last_instantiate_flags(void)') as Fn,
      memsetValue: so.func('unsigned int fake_last_memset_value(void)') as Fn,
    };
  });
  afterAll(() => {
    fake?.dispose();
  });

  it('passes plain arguments and reads int, size_t and handle out-parameters', () => {
    expect(lib.path).toBe(path);
    expect(lib.cuInit(0)).toBe(0);
    expect(lib.cuInit(1)).toBe(1);
    expect(lib.cuDeviceGetCount()).toEqual({ status: 0, value: 2 });
    expect(lib.cuDeviceGet(1)).toEqual({ status: 0, value: 11 });
    expect(lib.cuDeviceGet(5).status).toBe(101);
    expect(lib.cuDeviceGetName(3)).toEqual({ status: 0, value: 'Fake GPU 3' });
    expect(lib.cuDeviceGetAttribute(16, 11)).toEqual({ status: 0, value: 16011 });
    expect(lib.cuDeviceTotalMem_v2(11)).toEqual({ status: 0, value: 80 * 2 ** 30 });
    expect(lib.cuMemGetInfo_v2()).toEqual({
      status: 0,
      value: { free: 70 * 2 ** 30, total: 80 * 2 ** 30 },
    });
    const ctx = lib.cuDevicePrimaryCtxRetain(11);
    expect(ctx).toEqual({ status: 0, value: 0xc0de000bn });
    expect(lib.cuCtxSetCurrent(ctx.value)).toBe(0);
    expect(BigInt(helpers.currentContext!() as number)).toBe(0xc0de000bn);
    expect(lib.cuStreamCreate(1)).toEqual({ status: 0, value: 0x5001n });
  });

  it('passes the JIT option arrays and returns both logs', () => {
    const ok = lib.cuModuleLoadDataEx('.version 8.0\n', 4096);
    expect(ok.status).toBe(0);
    expect(ok.value).not.toBe(0n);
    expect(ok.logs.info).toBe('info: 13 bytes of PTX');
    const bad = lib.cuModuleLoadDataEx('BROKEN', 512);
    expect(bad.status).toBe(218);
    expect(bad.logs.error).toBe('ptxas application ptx input, line 3; error: BROKEN (512)');
    expect(lib.cuModuleGetFunction(ok.value, 'abc')).toEqual({ status: 0, value: 0xf003n });
    expect(lib.cuModuleGetFunction(ok.value, 'missing').status).toBe(500);
  });

  it('copies typed arrays to and from device memory, sync and on a stream', () => {
    const p = lib.cuMemAlloc_v2(64);
    expect(p.status).toBe(0);
    const src = new Float32Array([1.5, -2, 3.25, 4]);
    expect(lib.cuMemcpyHtoD_v2(p.value, src, 16)).toBe(0);
    const back = new Float32Array(4);
    expect(lib.cuMemcpyDtoH_v2(back, p.value, 16)).toBe(0);
    expect([...back]).toEqual([1.5, -2, 3.25, 4]);
    expect(lib.cuMemsetD32Async(p.value + 16n, 0xdeadbeef, 4, 0x5001n)).toBe(0);
    expect(helpers.memsetValue!()).toBe(0xdeadbeef);
    expect(BigInt(helpers.lastStream!() as number)).toBe(0x5001n);
    expect(lib.cuMemcpyDtoDAsync_v2(p.value + 32n, p.value, 16, 0x5001n)).toBe(0);
    const all = new Uint32Array(12);
    expect(lib.cuMemcpyDtoHAsync_v2(all, p.value, 48, 0x5001n)).toBe(0);
    const f = new Float32Array(all.buffer);
    expect([...f.subarray(8, 12)]).toEqual([1.5, -2, 3.25, 4]);
    expect([...all.subarray(4, 8)]).toEqual([0xdeadbeef, 0xdeadbeef, 0xdeadbeef, 0xdeadbeef]);
    const small = new Uint8Array(8);
    expect(lib.cuMemcpyHtoDAsync_v2(p.value, new Uint8Array([9, 8, 7]), 3, 0x5001n)).toBe(0);
    expect(lib.cuMemcpyDtoH_v2(small, p.value, 8)).toBe(0);
    expect([...small.subarray(0, 3)]).toEqual([9, 8, 7]);
    expect(lib.cuMemFree_v2(p.value)).toBe(0);
  });

  it('times events through the original symbol when the _v2 one is missing', () => {
    const a = lib.cuEventCreate(0);
    const b = lib.cuEventCreate(0);
    expect(lib.cuEventRecord(a.value, 0x5001n)).toBe(0);
    expect(lib.cuEventElapsedTime(a.value, b.value)).toEqual({ status: 0, value: 1.5 });
  });

  it('passes a stream, an event and flags to cuStreamWaitEvent', () => {
    const a = lib.cuEventCreate(0);
    expect(lib.cuStreamWaitEvent(0x5001n, a.value, 0)).toBe(0);
    expect(lib.cuStreamWaitEvent(0x5001n, a.value, 1)).toBe(400);
  });

  it('reads error names and strings, and unknown codes as failures', () => {
    expect(lib.cuGetErrorName(2)).toEqual({ status: 0, value: 'CUDA_ERROR_OUT_OF_MEMORY' });
    expect(lib.cuGetErrorString(218)).toEqual({ status: 0, value: 'a PTX JIT compilation failed' });
    expect(lib.cuGetErrorName(12345)).toEqual({ status: 1, value: undefined });
  });

  it('marshals kernel parameters through native memory as cuLaunchKernel reads them', () => {
    const driver = new CudaDriver(lib, 1);
    expect(driver.device.name).toBe('Fake GPU 11');
    expect(driver.device.totalMemory).toBe(80 * 2 ** 30);
    const module = () => {
      const m = new PtxModule();
      m.entry('kern', { a: 'ptr', n: 'u32', s: 'f32', big: 's64', i: 's32' }, () => {});
      return m;
    };
    const fn = driver.loadFunction('test/kern', 'kern', module);
    expect(fn.handle).toBe(0xf004n);
    helpers.expectParams!(5, new Int32Array([8, 4, 4, 8, 4]));
    const stream = driver.createStream();
    driver.launch(fn, [3, 2, 1], [128, 1, 1], 256, stream, [0x1234_5678_9abcn, 7, 1.5, -2n, -3]);
    const dims = new Uint32Array(7);
    const values = new Uint8Array(40);
    const pointers = new BigUint64Array(5);
    helpers.lastLaunch!(dims, values, pointers);
    expect([...dims]).toEqual([3, 2, 1, 128, 1, 1, 256]);
    expect(BigInt(helpers.lastStream!() as number)).toBe(stream);
    const v = new DataView(values.buffer);
    expect(v.getBigUint64(0, true)).toBe(0x1234_5678_9abcn);
    expect(v.getUint32(8, true)).toBe(7);
    expect(v.getFloat32(16, true)).toBe(1.5);
    expect(v.getBigInt64(24, true)).toBe(-2n);
    expect(v.getInt32(32, true)).toBe(-3);
    // The values sit in consecutive 8-byte slots right after the 5-entry table.
    for (let i = 1; i < 5; i++) expect(pointers[i]! - pointers[i - 1]!).toBe(8n);
    expect(pointers[0]! % 8n).toBe(0n);

    const exec = driver.capture(stream, () => {});
    expect(exec).toBe(0x7000n);
    expect(helpers.captureMode!()).toBe(2);
    expect(Number(helpers.instantiateFlags!())).toBe(0);
    driver.launchGraph(exec, stream);
    driver.destroyGraph(exec);
    driver.dispose();
  });

  it('encodes a tiled tensor map at a 64-byte aligned address, every argument as the driver declares it', () => {
    const map = new Uint8Array(128);
    const status = lib.cuTensorMapEncodeTiled(map, {
      dtype: 'bf16',
      address: 0x7f00_0000_1000n,
      dims: [4096, 8192, 3],
      strides: [8192, 67108864],
      box: [64, 128, 1],
      swizzle: '128B',
    });
    expect(status).toBe(0);
    const words = new BigUint64Array(map.buffer);
    expect([...words.slice(0, 10)]).toEqual([
      9n, // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
      3n,
      0x7f00_0000_1000n,
      3n,
      67108864n,
      64n,
      1n,
      1n,
      // interleave none, swizzle 128B, L2 promotion 256B, zero fill
      (0n << 48n) | (3n << 32n) | (3n << 16n) | 0n,
      4096n,
    ]);
  });

  it('turns a JIT failure into a KernelCompileError carrying the log', () => {
    const driver = new CudaDriver(lib, 0);
    const broken = () => {
      const m = new PtxModule();
      m.entry('kern', {}, (k) => k.comment('BROKEN'));
      return m;
    };
    let caught: unknown;
    try {
      driver.loadFunction('test/broken', 'kern', broken);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(KernelCompileError);
    const e = caught as KernelCompileError;
    expect(e.operation).toBe('test/broken');
    expect(e.message).toContain(
      'cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218): a PTX JIT compilation failed',
    );
    expect(e.log).toContain('error: BROKEN (65536)');
    driver.dispose();
  });
});
