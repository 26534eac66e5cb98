import { BackendUnavailableError } from '@rayo/core';
import { CUDA_SUCCESS, type CUresult, cudaErrorName } from './errors.js';
import {
  firstLine,
  type Koffi,
  loadedOnce,
  type NativeFn,
  type NativeLibrary,
  openNativeLibrary,
  type TypeSpec,
} from './nativeLibrary.js';
import {
  TENSOR_MAP_DTYPE,
  TENSOR_MAP_L2_256B,
  TENSOR_MAP_SWIZZLE,
  type TensorMapTiled,
} from './tensorMap.js';

/**
 * The CUDA driver API functions rayo calls, as plain TypeScript functions:
 * handles and device pointers are bigints (0n is NULL), out-parameters come
 * back as `{ status, value }`, and host buffers are typed arrays. The koffi
 * binding below implements it over `libcuda`; tests use a fake.
 */

/** A call's status and, when it is 0 (success), its out-parameter. */
export interface CuOut<T> {
  readonly status: CUresult;
  readonly value: T;
}

/** What the JIT compiler wrote while loading a module. */
export interface JitLogs {
  readonly error: string;
  readonly info: string;
}

/**
 * Native (C heap) memory the driver reads through pointers, such as the
 * `void*[]` of kernel parameters. `bytes` views the same memory.
 */
export interface HostBlock {
  readonly address: bigint;
  readonly bytes: Uint8Array;
}

export interface LibCuda {
  /** The library file that was loaded, for messages. */
  readonly path: string;

  cuInit(flags: number): CUresult;
  cuDeviceGetCount(): CuOut<number>;
  cuDeviceGet(ordinal: number): CuOut<number>;
  cuDeviceGetName(device: number): CuOut<string>;
  cuDeviceGetAttribute(attribute: number, device: number): CuOut<number>;
  cuDeviceTotalMem_v2(device: number): CuOut<number>;
  cuDevicePrimaryCtxRetain(device: number): CuOut<bigint>;
  cuDevicePrimaryCtxRelease_v2(device: number): CUresult;
  cuCtxSetCurrent(context: bigint): CUresult;
  cuCtxSynchronize(): CUresult;

  /** Loads PTX text; the JIT error and info logs are captured in buffers of `logBytes`. */
  cuModuleLoadDataEx(image: string, logBytes: number): CuOut<bigint> & { readonly logs: JitLogs };
  cuModuleGetFunction(module: bigint, name: string): CuOut<bigint>;
  cuModuleUnload(module: bigint): CUresult;
  cuFuncSetAttribute(fn: bigint, attribute: number, value: number): CUresult;

  cuMemAlloc_v2(bytes: number): CuOut<bigint>;
  cuMemFree_v2(ptr: bigint): CUresult;
  cuMemGetInfo_v2(): CuOut<{ readonly free: number; readonly total: number }>;
  cuMemcpyHtoD_v2(dst: bigint, src: ArrayBufferView, bytes: number): CUresult;
  cuMemcpyDtoH_v2(dst: ArrayBufferView, src: bigint, bytes: number): CUresult;
  cuMemcpyDtoD_v2(dst: bigint, src: bigint, bytes: number): CUresult;
  cuMemcpyHtoDAsync_v2(dst: bigint, src: ArrayBufferView, bytes: number, stream: bigint): CUresult;
  cuMemcpyDtoHAsync_v2(dst: ArrayBufferView, src: bigint, bytes: number, stream: bigint): CUresult;
  cuMemcpyDtoDAsync_v2(dst: bigint, src: bigint, bytes: number, stream: bigint): CUresult;
  cuMemsetD32_v2(dst: bigint, value: number, count: number): CUresult;
  cuMemsetD32Async(dst: bigint, value: number, count: number, stream: bigint): CUresult;

  cuStreamCreate(flags: number): CuOut<bigint>;
  cuStreamDestroy_v2(stream: bigint): CUresult;
  cuStreamSynchronize(stream: bigint): CUresult;
  /** 0 when the stream is idle, CUDA_ERROR_NOT_READY (600) while work is pending. */
  cuStreamQuery(stream: bigint): CUresult;
  cuEventCreate(flags: number): CuOut<bigint>;
  cuEventRecord(event: bigint, stream: bigint): CUresult;
  cuEventSynchronize(event: bigint): CUresult;
  cuEventQuery(event: bigint): CUresult;
  /** Milliseconds between two completed events. */
  cuEventElapsedTime(start: bigint, end: bigint): CuOut<number>;
  cuEventDestroy_v2(event: bigint): CUresult;
  /** Work enqueued on `stream` after this call waits for the event's last record. */
  cuStreamWaitEvent(stream: bigint, event: bigint, flags: number): CUresult;

  /** `kernelParams` is the address of a `void*[]` with one pointer per kernel parameter. */
  cuLaunchKernel(
    fn: bigint,
    gridX: number,
    gridY: number,
    gridZ: number,
    blockX: number,
    blockY: number,
    blockZ: number,
    sharedBytes: number,
    stream: bigint,
    kernelParams: bigint,
  ): CUresult;

  /**
   * `cuLaunchKernelEx`: `config` is the address of a CUlaunchConfig with its
   * attributes (launchConfig.ts), `kernelParams` as for cuLaunchKernel.
   * Optional: a library without it launches every kernel plainly.
   */
  cuLaunchKernelEx?(config: bigint, fn: bigint, kernelParams: bigint): CUresult;

  /** Encodes a tiled tensor map (no interleave, zero fill, L2 256-byte promotion) into `map` (128 bytes). */
  cuTensorMapEncodeTiled(map: Uint8Array, tensor: TensorMapTiled): CUresult;

  cuStreamBeginCapture_v2(stream: bigint, mode: number): CUresult;
  cuStreamEndCapture(stream: bigint): CuOut<bigint>;
  cuGraphInstantiateWithFlags(graph: bigint, flags: number): CuOut<bigint>;
  cuGraphLaunch(exec: bigint, stream: bigint): CUresult;
  cuGraphExecDestroy(exec: bigint): CUresult;
  cuGraphDestroy(graph: bigint): CUresult;

  /** The code's name, e.g. `CUDA_ERROR_OUT_OF_MEMORY`; a non-zero status for unknown codes. */
  cuGetErrorName(code: CUresult): CuOut<string | undefined>;
  cuGetErrorString(code: CUresult): CuOut<string | undefined>;

  /** Allocates native memory that stays at one address until `freeHost`. */
  allocHost(bytes: number): HostBlock;
  freeHost(block: HostBlock): void;
}

// ---- driver API constants (from cuda.h) ----------------------------------------

export const CU_DEVICE_ATTRIBUTE = {
  MAX_THREADS_PER_BLOCK: 1,
  MAX_BLOCK_DIM_X: 2,
  MAX_BLOCK_DIM_Y: 3,
  MAX_BLOCK_DIM_Z: 4,
  MAX_GRID_DIM_X: 5,
  MAX_GRID_DIM_Y: 6,
  MAX_GRID_DIM_Z: 7,
  MAX_SHARED_MEMORY_PER_BLOCK: 8,
  WARP_SIZE: 10,
  MULTIPROCESSOR_COUNT: 16,
  L2_CACHE_SIZE: 38,
  MAX_THREADS_PER_MULTIPROCESSOR: 39,
  COMPUTE_CAPABILITY_MAJOR: 75,
  COMPUTE_CAPABILITY_MINOR: 76,
  MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 97,
} as const;

export const CU_JIT_INFO_LOG_BUFFER = 3;
export const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
export const CU_JIT_ERROR_LOG_BUFFER = 5;
export const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
export const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
/** A stream that does not synchronise with the legacy NULL stream. */
export const CU_STREAM_NON_BLOCKING = 1;
export const CU_EVENT_DEFAULT = 0;
/** An event only for ordering (cuStreamWaitEvent, cuEventQuery): cheaper to record and wait on, no timestamps. */
export const CU_EVENT_DISABLE_TIMING = 2;
/**
 * Capture that lets the capturing thread make other driver calls (a module
 * load, an allocation) without invalidating the capture; rayo records before
 * it captures, so none happen, but a stray one must not break the graph.
 */
export const CU_STREAM_CAPTURE_MODE_RELAXED = 2;

// ---- the koffi binding -----------------------------------------------------------

export interface LoadLibCudaOptions {
  /** The library to load instead of `libcuda.so.1` / `nvcuda.dll`. */
  readonly path?: string;
}

/** The driver library's file name on this platform, or undefined where CUDA does not exist. */
export function defaultLibCudaPath(platform: string = process.platform): string | undefined {
  if (platform === 'linux') return 'libcuda.so.1';
  if (platform === 'win32') return 'nvcuda.dll';
  return undefined;
}

/**
 * Loads `libcuda` through koffi (see nativeLibrary.ts). Throws
 * BackendUnavailableError with the reason when either cannot be loaded.
 */
export async function loadLibCuda(options: LoadLibCudaOptions = {}): Promise<LibCuda> {
  const path = options.path ?? defaultLibCudaPath();
  if (path === undefined) {
    throw new BackendUnavailableError(`CUDA does not exist on ${process.platform}`, {
      operation: 'loadLibCuda',
    });
  }
  const { koffi, library } = await openNativeLibrary(path, 'loadLibCuda', 'is the NVIDIA driver installed?');
  return bindLibCuda(koffi, library, path);
}

/** `libcuda` from the default location, loaded once per process (a failure is retried next time). */
export const libCuda: () => Promise<LibCuda> = loadedOnce(() => loadLibCuda());

function bindLibCuda(koffi: Koffi, library: NativeLibrary, path: string): LibCuda {
  // Declares the first symbol of `names` the library exports.
  const fn = (names: string | readonly string[], result: string, args: TypeSpec[]): NativeFn => {
    const list = typeof names === 'string' ? [names] : names;
    let lastError: unknown;
    for (const name of list) {
      try {
        return library.func(name, result, args) as NativeFn;
      } catch (error) {
        lastError = error;
      }
    }
    throw new BackendUnavailableError(
      `${path} lacks ${list.join(' / ')} (a CUDA 12.0 or newer driver is needed): ${firstLine(lastError)}`,
      { operation: 'loadLibCuda', cause: lastError },
    );
  };
  // A function the backend can do without: undefined where the library lacks it.
  const optionalFn = (name: string, result: string, args: TypeSpec[]): NativeFn | undefined => {
    try {
      return library.func(name, result, args) as NativeFn;
    } catch {
      return undefined;
    }
  };
  const launchKernelEx = optionalFn('cuLaunchKernelEx', 'int', ['void *', 'void *', 'void *', 'void *']);
  const outPtr = koffi.out(koffi.pointer('void *'));
  const outInt = koffi.out(koffi.pointer('int'));
  const outSize = koffi.out(koffi.pointer('size_t'));
  const outU64 = koffi.out(koffi.pointer('uint64_t'));
  const outFloat = koffi.out(koffi.pointer('float'));
  const outStr = koffi.out(koffi.pointer('const char *'));

  const f = {
    cuInit: fn('cuInit', 'int', ['uint']),
    cuDeviceGetCount: fn('cuDeviceGetCount', 'int', [outInt]),
    cuDeviceGet: fn('cuDeviceGet', 'int', [outInt, 'int']),
    cuDeviceGetName: fn('cuDeviceGetName', 'int', ['void *', 'int', 'int']),
    cuDeviceGetAttribute: fn('cuDeviceGetAttribute', 'int', [outInt, 'int', 'int']),
    cuDeviceTotalMem_v2: fn('cuDeviceTotalMem_v2', 'int', [outSize, 'int']),
    cuDevicePrimaryCtxRetain: fn('cuDevicePrimaryCtxRetain', 'int', [outPtr, 'int']),
    cuDevicePrimaryCtxRelease_v2: fn('cuDevicePrimaryCtxRelease_v2', 'int', ['int']),
    cuCtxSetCurrent: fn('cuCtxSetCurrent', 'int', ['void *']),
    cuCtxSynchronize: fn('cuCtxSynchronize', 'int', []),
    cuModuleLoadDataEx: fn('cuModuleLoadDataEx', 'int', [outPtr, 'const char *', 'uint', 'void *', 'void *']),
    cuModuleGetFunction: fn('cuModuleGetFunction', 'int', [outPtr, 'void *', 'const char *']),
    cuModuleUnload: fn('cuModuleUnload', 'int', ['void *']),
    cuFuncSetAttribute: fn('cuFuncSetAttribute', 'int', ['void *', 'int', 'int']),
    cuMemAlloc_v2: fn('cuMemAlloc_v2', 'int', [outU64, 'size_t']),
    cuMemFree_v2: fn('cuMemFree_v2', 'int', ['uint64_t']),
    cuMemGetInfo_v2: fn('cuMemGetInfo_v2', 'int', [outSize, outSize]),
    cuMemcpyHtoD_v2: fn('cuMemcpyHtoD_v2', 'int', ['uint64_t', 'const void *', 'size_t']),
    cuMemcpyDtoH_v2: fn('cuMemcpyDtoH_v2', 'int', ['void *', 'uint64_t', 'size_t']),
    cuMemcpyDtoD_v2: fn('cuMemcpyDtoD_v2', 'int', ['uint64_t', 'uint64_t', 'size_t']),
    cuMemcpyHtoDAsync_v2: fn('cuMemcpyHtoDAsync_v2', 'int', ['uint64_t', 'const void *', 'size_t', 'void *']),
    cuMemcpyDtoHAsync_v2: fn('cuMemcpyDtoHAsync_v2', 'int', ['void *', 'uint64_t', 'size_t', 'void *']),
    cuMemcpyDtoDAsync_v2: fn('cuMemcpyDtoDAsync_v2', 'int', ['uint64_t', 'uint64_t', 'size_t', 'void *']),
    cuMemsetD32_v2: fn('cuMemsetD32_v2', 'int', ['uint64_t', 'uint', 'size_t']),
    cuMemsetD32Async: fn('cuMemsetD32Async', 'int', ['uint64_t', 'uint', 'size_t', 'void *']),
    cuStreamCreate: fn('cuStreamCreate', 'int', [outPtr, 'uint']),
    cuStreamDestroy_v2: fn('cuStreamDestroy_v2', 'int', ['void *']),
    cuStreamSynchronize: fn('cuStreamSynchronize', 'int', ['void *']),
    cuStreamQuery: fn('cuStreamQuery', 'int', ['void *']),
    cuEventCreate: fn('cuEventCreate', 'int', [outPtr, 'uint']),
    cuEventRecord: fn('cuEventRecord', 'int', ['void *', 'void *']),
    cuEventSynchronize: fn('cuEventSynchronize', 'int', ['void *']),
    cuEventQuery: fn('cuEventQuery', 'int', ['void *']),
    // CUDA 12.8 headers rename the call to _v2; older drivers export only the original.
    cuEventElapsedTime: fn(['cuEventElapsedTime_v2', 'cuEventElapsedTime'], 'int', [
      outFloat,
      'void *',
      'void *',
    ]),
    cuEventDestroy_v2: fn('cuEventDestroy_v2', 'int', ['void *']),
    cuStreamWaitEvent: fn('cuStreamWaitEvent', 'int', ['void *', 'void *', 'uint']),
    cuLaunchKernel: fn('cuLaunchKernel', 'int', [
      'void *',
      'uint',
      'uint',
      'uint',
      'uint',
      'uint',
      'uint',
      'uint',
      'void *',
      'void *',
      'void *',
    ]),
    cuTensorMapEncodeTiled: fn('cuTensorMapEncodeTiled', 'int', [
      'void *',
      'int',
      'uint',
      'void *',
      'void *',
      'void *',
      'void *',
      'void *',
      'int',
      'int',
      'int',
      'int',
    ]),
    cuStreamBeginCapture_v2: fn('cuStreamBeginCapture_v2', 'int', ['void *', 'int']),
    cuStreamEndCapture: fn('cuStreamEndCapture', 'int', ['void *', outPtr]),
    cuGraphInstantiateWithFlags: fn('cuGraphInstantiateWithFlags', 'int', [outPtr, 'void *', 'uint64_t']),
    cuGraphLaunch: fn('cuGraphLaunch', 'int', ['void *', 'void *']),
    cuGraphExecDestroy: fn('cuGraphExecDestroy', 'int', ['void *']),
    cuGraphDestroy: fn('cuGraphDestroy', 'int', ['void *']),
    cuGetErrorName: fn('cuGetErrorName', 'int', ['int', outStr]),
    cuGetErrorString: fn('cuGetErrorString', 'int', ['int', outStr]),
  };

  // koffi hands pointers over as bigints (null for NULL) and 64-bit integers
  // as numbers or bigints depending on their size.
  const handle = (v: unknown): bigint => (v === null || v === undefined ? 0n : BigInt(v as bigint | number));
  const num = (v: unknown): number => Number(v ?? 0);
  // Handles go to koffi as bigints; NULL as null, which koffi passes as a null pointer.
  const ptr = (v: bigint): bigint | null => (v === 0n ? null : v);
  const call = (native: NativeFn, ...args: unknown[]): CUresult => native(...args) as CUresult;
  const withHandle = (native: NativeFn, ...args: unknown[]): CuOut<bigint> => {
    const out: unknown[] = [null];
    const status = native(out, ...args) as CUresult;
    return { status, value: status === 0 ? handle(out[0]) : 0n };
  };
  const withNumber = (native: NativeFn, ...args: unknown[]): CuOut<number> => {
    const out: unknown[] = [0];
    const status = native(out, ...args) as CUresult;
    return { status, value: status === 0 ? num(out[0]) : 0 };
  };
  const withString = (native: NativeFn, code: CUresult): CuOut<string | undefined> => {
    const out: unknown[] = [null];
    const status = native(code, out) as CUresult;
    return { status, value: status === 0 && typeof out[0] === 'string' ? out[0] : undefined };
  };
  const decoder = new TextDecoder();
  const cString = (bytes: Uint8Array): string => {
    const end = bytes.indexOf(0);
    return decoder.decode(bytes.subarray(0, end === -1 ? bytes.length : end));
  };

  return {
    path,
    cuInit: (flags) => call(f.cuInit, flags),
    cuDeviceGetCount: () => withNumber(f.cuDeviceGetCount),
    cuDeviceGet: (ordinal) => withNumber(f.cuDeviceGet, ordinal),
    cuDeviceGetName(device) {
      const name = new Uint8Array(256);
      const status = call(f.cuDeviceGetName, name, name.length, device);
      return { status, value: status === 0 ? cString(name) : '' };
    },
    cuDeviceGetAttribute: (attribute, device) => withNumber(f.cuDeviceGetAttribute, attribute, device),
    cuDeviceTotalMem_v2: (device) => withNumber(f.cuDeviceTotalMem_v2, device),
    cuDevicePrimaryCtxRetain: (device) => withHandle(f.cuDevicePrimaryCtxRetain, device),
    cuDevicePrimaryCtxRelease_v2: (device) => call(f.cuDevicePrimaryCtxRelease_v2, device),
    cuCtxSetCurrent: (context) => call(f.cuCtxSetCurrent, ptr(context)),
    cuCtxSynchronize: () => call(f.cuCtxSynchronize),
    cuModuleLoadDataEx(image, logBytes) {
      // Both log buffers live in native memory: the option values are their
      // addresses, and the sizes are passed as pointer-sized integers.
      const size = Math.max(1, Math.floor(logBytes));
      const errorLog = koffi.alloc('uint8_t', size) as bigint;
      const infoLog = koffi.alloc('uint8_t', size) as bigint;
      try {
        const errorView = new Uint8Array(koffi.view(errorLog, size));
        const infoView = new Uint8Array(koffi.view(infoLog, size));
        errorView[0] = 0;
        infoView[0] = 0;
        const options = new Int32Array([
          CU_JIT_ERROR_LOG_BUFFER,
          CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
          CU_JIT_INFO_LOG_BUFFER,
          CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        ]);
        const values = new BigUint64Array([errorLog, BigInt(size), infoLog, BigInt(size)]);
        const out: unknown[] = [null];
        const status = call(f.cuModuleLoadDataEx, out, image, options.length, options, values);
        return {
          status,
          value: status === 0 ? handle(out[0]) : 0n,
          logs: { error: cString(errorView), info: cString(infoView) },
        };
      } finally {
        koffi.free(errorLog);
        koffi.free(infoLog);
      }
    },
    cuModuleGetFunction: (module, name) => withHandle(f.cuModuleGetFunction, ptr(module), name),
    cuModuleUnload: (module) => call(f.cuModuleUnload, ptr(module)),
    cuFuncSetAttribute: (fnHandle, attribute, value) =>
      call(f.cuFuncSetAttribute, ptr(fnHandle), attribute, value),
    cuMemAlloc_v2(bytes) {
      const out: unknown[] = [0];
      const status = call(f.cuMemAlloc_v2, out, bytes);
      return { status, value: status === 0 ? handle(out[0]) : 0n };
    },
    cuMemFree_v2: (p) => call(f.cuMemFree_v2, p),
    cuMemGetInfo_v2() {
      const free: unknown[] = [0];
      const total: unknown[] = [0];
      const status = call(f.cuMemGetInfo_v2, free, total);
      return { status, value: { free: num(free[0]), total: num(total[0]) } };
    },
    cuMemcpyHtoD_v2: (dst, src, bytes) => call(f.cuMemcpyHtoD_v2, dst, src, bytes),
    cuMemcpyDtoH_v2: (dst, src, bytes) => call(f.cuMemcpyDtoH_v2, dst, src, bytes),
    cuMemcpyDtoD_v2: (dst, src, bytes) => call(f.cuMemcpyDtoD_v2, dst, src, bytes),
    cuMemcpyHtoDAsync_v2: (dst, src, bytes, stream) =>
      call(f.cuMemcpyHtoDAsync_v2, dst, src, bytes, ptr(stream)),
    cuMemcpyDtoHAsync_v2: (dst, src, bytes, stream) =>
      call(f.cuMemcpyDtoHAsync_v2, dst, src, bytes, ptr(stream)),
    cuMemcpyDtoDAsync_v2: (dst, src, bytes, stream) =>
      call(f.cuMemcpyDtoDAsync_v2, dst, src, bytes, ptr(stream)),
    cuMemsetD32_v2: (dst, value, count) => call(f.cuMemsetD32_v2, dst, value >>> 0, count),
    cuMemsetD32Async: (dst, value, count, stream) =>
      call(f.cuMemsetD32Async, dst, value >>> 0, count, ptr(stream)),
    cuStreamCreate: (flags) => withHandle(f.cuStreamCreate, flags),
    cuStreamDestroy_v2: (stream) => call(f.cuStreamDestroy_v2, ptr(stream)),
    cuStreamSynchronize: (stream) => call(f.cuStreamSynchronize, ptr(stream)),
    cuStreamQuery: (stream) => call(f.cuStreamQuery, ptr(stream)),
    cuEventCreate: (flags) => withHandle(f.cuEventCreate, flags),
    cuEventRecord: (event, stream) => call(f.cuEventRecord, ptr(event), ptr(stream)),
    cuEventSynchronize: (event) => call(f.cuEventSynchronize, ptr(event)),
    cuEventQuery: (event) => call(f.cuEventQuery, ptr(event)),
    cuEventElapsedTime: (start, end) => withNumber(f.cuEventElapsedTime, ptr(start), ptr(end)),
    cuEventDestroy_v2: (event) => call(f.cuEventDestroy_v2, ptr(event)),
    cuStreamWaitEvent: (stream, event, flags) => call(f.cuStreamWaitEvent, ptr(stream), ptr(event), flags),
    cuLaunchKernel: (fnHandle, gx, gy, gz, bx, by, bz, shared, stream, params) =>
      call(f.cuLaunchKernel, ptr(fnHandle), gx, gy, gz, bx, by, bz, shared, ptr(stream), ptr(params), null),
    ...(launchKernelEx
      ? {
          cuLaunchKernelEx: (config: bigint, fnHandle: bigint, params: bigint) =>
            call(launchKernelEx, ptr(config), ptr(fnHandle), ptr(params), null),
        }
      : {}),
    cuTensorMapEncodeTiled(map, t) {
      // The driver writes the map at a 64-byte aligned native address; it is copied out after.
      const raw = koffi.alloc('uint8_t', 192) as bigint;
      try {
        const pad = Number((64n - (BigInt(raw) % 64n)) % 64n);
        const rank = t.dims.length;
        const status = call(
          f.cuTensorMapEncodeTiled,
          BigInt(raw) + BigInt(pad),
          TENSOR_MAP_DTYPE[t.dtype],
          rank,
          ptr(t.address),
          new BigUint64Array(t.dims.map(BigInt)),
          new BigUint64Array(t.strides.map(BigInt)),
          new Uint32Array(t.box),
          new Uint32Array(rank).fill(1),
          0,
          TENSOR_MAP_SWIZZLE[t.swizzle],
          TENSOR_MAP_L2_256B,
          0,
        );
        if (status === 0) map.set(new Uint8Array(koffi.view(raw, 192)).subarray(pad, pad + 128));
        return status;
      } finally {
        koffi.free(raw);
      }
    },
    cuStreamBeginCapture_v2: (stream, mode) => call(f.cuStreamBeginCapture_v2, ptr(stream), mode),
    cuStreamEndCapture(stream) {
      const out: unknown[] = [null];
      const status = call(f.cuStreamEndCapture, ptr(stream), out);
      return { status, value: status === 0 ? handle(out[0]) : 0n };
    },
    cuGraphInstantiateWithFlags: (graph, flags) =>
      withHandle(f.cuGraphInstantiateWithFlags, ptr(graph), flags),
    cuGraphLaunch: (exec, stream) => call(f.cuGraphLaunch, ptr(exec), ptr(stream)),
    cuGraphExecDestroy: (exec) => call(f.cuGraphExecDestroy, ptr(exec)),
    cuGraphDestroy: (graph) => call(f.cuGraphDestroy, ptr(graph)),
    cuGetErrorName: (code) => withString(f.cuGetErrorName, code),
    cuGetErrorString: (code) => withString(f.cuGetErrorString, code),
    allocHost(bytes) {
      const address = koffi.alloc('uint8_t', bytes) as bigint;
      return { address, bytes: new Uint8Array(koffi.view(address, bytes)) };
    },
    freeHost: (block) => koffi.free(block.address),
  };
}

/** The library's name of `status`, else the one from the table. */
export function errorNameOf(lib: LibCuda, status: CUresult): string {
  try {
    const r = lib.cuGetErrorName(status);
    if (r.status === CUDA_SUCCESS && r.value) return r.value;
  } catch {
    // An unusable library still gets a named error from the table.
  }
  return cudaErrorName(status);
}

/** The library's description of `status`, if it can give one. */
export function errorStringOf(lib: LibCuda, status: CUresult): string | undefined {
  try {
    const r = lib.cuGetErrorString(status);
    if (r.status === CUDA_SUCCESS && r.value) return r.value;
  } catch {
    // The name alone still identifies the error.
  }
  return undefined;
}
