import {
  type AllocatorStats,
  BackendUnavailableError,
  DeviceLostError,
  InvalidArgumentError,
  RayoError,
  resolveMaxCachedBytes,
} from '@rayo/core';
import type { PtxEntry, PtxModule } from '../ptx/module.js';
import {
  type DeviceCommand,
  type DeviceProperties,
  type Dim3Tuple,
  type DriverCounts,
  type LoadedFunction,
  readDeviceProperties,
} from './device.js';
import {
  CUDA_ERROR_NOT_READY,
  CUDA_SUCCESS,
  type CUresult,
  cudaError,
  type FailureContext,
  isStickyError,
} from './errors.js';
import {
  CU_EVENT_DEFAULT,
  CU_EVENT_DISABLE_TIMING,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
  CU_STREAM_CAPTURE_MODE_RELAXED,
  CU_STREAM_NON_BLOCKING,
  type CuOut,
  errorNameOf,
  errorStringOf,
  type HostBlock,
  type LibCuda,
  type LoadLibCudaOptions,
  loadLibCuda,
} from './libcuda.js';
import { kernelParamBytes, type ParamValue, writeKernelParams } from './params.js';
import { type DeviceBuffer, DevicePool } from './pool.js';
import { type TensorMapTiled, tensorMapProblem } from './tensorMap.js';

export type { DeviceCommand, DeviceProperties, Dim3Tuple, DriverCounts, LoadedFunction } from './device.js';

/** How long a wait polls on every turn of the event loop before it falls back to a millisecond timer. */
const WAIT_SPIN_MS = 20;

export interface CudaDriverOptions extends LoadLibCudaOptions {
  /** Device ordinal; 0 by default. */
  readonly device?: number;
  /** A LibCuda to use instead of loading `libcuda` (tests pass a fake). */
  readonly lib?: LibCuda;
  /**
   * Idle device bytes the caching allocator keeps for reuse at most
   * (default: no cap); past it, wholly idle segments are freed.
   */
  readonly maxCachedBytes?: number;
}

/** Size of each JIT log buffer; ptxas errors for a whole module fit easily. */
const JIT_LOG_BYTES = 64 * 1024;
/** Dynamic shared memory a kernel may use without opting in. */
const DEFAULT_DYNAMIC_SHARED = 48 * 1024;
const PARAM_BLOCK_BYTES = 4096;
/** Kernel names kept to say where an asynchronous fault happened. */
const MAX_IN_FLIGHT = 256;

interface LoadedModule {
  readonly module: bigint;
  readonly entries: readonly PtxEntry[];
  readonly functions: Map<string, LoadedFunction>;
}

// The context each library last made current on this thread (every JS
// thread has its own copy of this module), so that staying costs no call.
const currentContext = new WeakMap<LibCuda, bigint>();

/**
 * One device through the CUDA driver API: its primary context, a module and
 * function cache keyed by kernel identity and configuration, pooled
 * allocations, copies, streams, events, launches and graph capture. Every
 * failing CUresult becomes a RayoError naming the call and the CUDA error.
 */
export class CudaDriver {
  readonly lib: LibCuda;
  readonly device: DeviceProperties;
  readonly context: bigint;
  readonly #deviceHandle: number;
  readonly #pool: DevicePool;
  readonly #modules = new Map<string, LoadedModule>();
  readonly #dynamicShared = new Map<bigint, number>();
  #moduleLoads = 0;
  #moduleHits = 0;
  #params: HostBlock | undefined;
  #lost: DeviceLostError | undefined;
  // Kernels enqueued since the stream was last seen idle: a fault is reported
  // asynchronously, by a later call, and happened in one of them.
  readonly #inFlight: string[] = [];
  #capturing: string[] | undefined;
  readonly #graphKernels = new Map<bigint, readonly string[]>();
  #disposed = false;

  /** Loads `libcuda` (unless a LibCuda is given) and opens the device. */
  static async open(options: CudaDriverOptions = {}): Promise<CudaDriver> {
    const lib = options.lib ?? (await loadLibCuda(options));
    return new CudaDriver(lib, options.device ?? 0, resolveMaxCachedBytes('cuda', options));
  }

  constructor(lib: LibCuda, ordinal = 0, maxCachedBytes = Number.POSITIVE_INFINITY) {
    this.lib = lib;
    this.check('cuInit', lib.cuInit(0));
    const count = this.value('cuDeviceGetCount', lib.cuDeviceGetCount());
    if (count < 1) {
      throw new BackendUnavailableError('the CUDA driver reports no device', {
        operation: 'cuDeviceGetCount',
        expected: 'at least one CUDA device',
        actual: String(count),
      });
    }
    if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= count) {
      throw new InvalidArgumentError('no CUDA device of this ordinal', {
        operation: 'CudaDriver',
        argument: 'device',
        expected: `an integer in [0, ${count - 1}]`,
        actual: String(ordinal),
      });
    }
    const dev = this.value('cuDeviceGet', lib.cuDeviceGet(ordinal));
    this.#deviceHandle = dev;
    this.device = readDeviceProperties(lib, ordinal, dev, this.value.bind(this));
    this.context = this.value('cuDevicePrimaryCtxRetain', lib.cuDevicePrimaryCtxRetain(dev));
    try {
      this.activate();
    } catch (error) {
      lib.cuDevicePrimaryCtxRelease_v2(dev);
      throw error;
    }
    this.#pool = new DevicePool(
      (bytes) => this.#allocate(bytes),
      (ptrs) => this.#release(ptrs),
      maxCachedBytes,
    );
    // Allocated up front so that launches (also those being captured) only write into it.
    this.#params = lib.allocHost(PARAM_BLOCK_BYTES);
  }

  // ------------------------------------------------------------------ errors

  /** The RayoError for a failed call; remembers errors that leave the context unusable. */
  error(call: string, status: CUresult, context: FailureContext = {}): RayoError {
    const culprits = isStickyError(status) && !this.#lost ? [...new Set(this.#inFlight)] : [];
    if (culprits.length > 0) {
      const which = culprits.length === 1 ? 'kernel' : `one of the ${culprits.length} kernels`;
      context = {
        ...context,
        subject: culprits.join(', '),
        detail: `a fault in ${which} ${culprits.map((k) => `'${k}'`).join(', ')} enqueued since the stream was last idle${context.detail ? `; ${context.detail}` : ''}`,
      };
    }
    const error = cudaError(
      {
        call,
        code: status,
        name: errorNameOf(this.lib, status),
        description: errorStringOf(this.lib, status),
      },
      context,
    );
    if (error instanceof DeviceLostError) this.#lost ??= error;
    return error;
  }

  /** Throws the RayoError for `status` unless it is success. */
  check(call: string, status: CUresult, context?: FailureContext): void {
    if (status !== CUDA_SUCCESS) throw this.error(call, status, context);
  }

  /** The out-parameter of a successful call, or the RayoError of a failed one. */
  value<T>(call: string, out: CuOut<T>, context?: FailureContext): T {
    this.check(call, out.status, context);
    return out.value;
  }

  /** Throws if the driver was disposed or the context was lost. */
  live(api: string): void {
    if (this.#lost) {
      throw new DeviceLostError(
        `the CUDA context is unusable after an earlier error: ${this.#lost.message}`,
        {
          operation: api,
          cause: this.#lost,
        },
      );
    }
    if (this.#disposed) {
      throw new RayoError('the CUDA driver was disposed', {
        operation: api,
        expected: 'a live backend',
        actual: 'disposed',
      });
    }
  }

  /** The error that made the context unusable, if one happened. */
  get lostError(): DeviceLostError | undefined {
    return this.#lost;
  }

  /**
   * Makes this device's primary context current on the calling thread; a
   * lookup when it already is. Every call that touches the device does this,
   * so that backends on two devices can take turns on one thread.
   */
  activate(): void {
    if (currentContext.get(this.lib) === this.context) return;
    this.check('cuCtxSetCurrent', this.lib.cuCtxSetCurrent(this.context));
    currentContext.set(this.lib, this.context);
  }

  // ----------------------------------------------------------------- modules

  /**
   * The function `entry` of the module cached under `key`; on the first use
   * of `key`, `build` makes the module, which is JIT-loaded with its error
   * log (a failure is a KernelCompileError carrying the log). The same key
   * always gives the same loaded function: keys name a kernel and its
   * configuration, never an object.
   */
  loadFunction(key: string, entry: string, build: () => PtxModule): LoadedFunction {
    this.live('loadFunction');
    let loaded = this.#modules.get(key);
    const cached = loaded?.functions.get(entry);
    if (cached) {
      this.#moduleHits++;
      return cached;
    }
    if (!loaded) {
      const ptx = build();
      const text = ptx.emit();
      this.activate();
      const r = this.lib.cuModuleLoadDataEx(text, JIT_LOG_BYTES);
      if (r.status !== CUDA_SUCCESS) {
        throw this.error('cuModuleLoadDataEx', r.status, {
          subject: key,
          log: r.logs.error,
          detail: `.target ${ptx.target} on ${this.device.arch}`,
        });
      }
      loaded = { module: r.value, entries: ptx.entries, functions: new Map() };
      this.#modules.set(key, loaded);
      this.#moduleLoads++;
    }
    const info = loaded.entries.find((e) => e.name === entry);
    if (!info) {
      throw new InvalidArgumentError('the module has no entry of this name', {
        operation: key,
        argument: 'entry',
        expected: loaded.entries.map((e) => `'${e.name}'`).join(' | ') || 'an entry of the module',
        actual: `'${entry}'`,
      });
    }
    const handle = this.value('cuModuleGetFunction', this.lib.cuModuleGetFunction(loaded.module, entry), {
      subject: key,
      detail: `entry '${entry}'`,
    });
    const fn: LoadedFunction = { key, entry, handle, params: info.params };
    loaded.functions.set(entry, fn);
    return fn;
  }

  /** The 128 bytes of a tiled tensor map (tensorMap.ts), checked against the driver's limits first. */
  encodeTensorMap(tensor: TensorMapTiled): Uint8Array {
    const problem = tensorMapProblem(tensor);
    if (problem !== undefined) {
      throw new InvalidArgumentError('tensor map cannot be encoded', {
        operation: 'cuTensorMapEncodeTiled',
        argument: 'tensor',
        expected: 'a tensor within the tiled tensor-map limits',
        actual: problem,
      });
    }
    const map = new Uint8Array(128);
    this.check('cuTensorMapEncodeTiled', this.lib.cuTensorMapEncodeTiled(map, tensor), {
      detail: `${tensor.dtype} dims [${tensor.dims.join(', ')}], box [${tensor.box.join(', ')}]`,
    });
    return map;
  }

  /** Lets `fn` use more than 48 KiB of dynamic shared memory (once per function and size). */
  allowDynamicShared(fn: LoadedFunction, bytes: number): void {
    if (bytes <= DEFAULT_DYNAMIC_SHARED || (this.#dynamicShared.get(fn.handle) ?? 0) >= bytes) return;
    this.check(
      'cuFuncSetAttribute',
      this.lib.cuFuncSetAttribute(fn.handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
      { subject: fn.key, detail: `${bytes} bytes of dynamic shared memory` },
    );
    this.#dynamicShared.set(fn.handle, bytes);
  }

  // ------------------------------------------------------------------ memory

  /**
   * A device allocation of at least `bytes` from the caching allocator: an
   * idle block when one fits, else a new segment; when the device refuses
   * one, idle segments are freed and it is tried once more.
   */
  alloc(bytes: number): DeviceBuffer {
    this.live('alloc');
    return this.#pool.acquire(bytes);
  }

  /** Returns an allocation to the pool (stream-ordered reuse; see DevicePool). */
  free(buffer: DeviceBuffer): void {
    if (this.#disposed) return;
    this.#pool.release(buffer);
  }

  /** Frees every idle segment of the caching allocator, after the device finished all work. */
  trim(): void {
    this.#pool.trim();
  }

  /** The caching allocator's figures: allocated, reserved, peaks, retries, refusals. */
  allocatorStats(): AllocatorStats {
    return this.#pool.stats();
  }

  /** The caching allocator's peaks start again from what is in use and held now. */
  resetAllocatorPeaks(): void {
    this.#pool.resetPeaks();
  }

  // A segment may still be used by work in flight: the device finishes it first.
  #release(ptrs: readonly bigint[]): void {
    this.activate();
    this.check('cuCtxSynchronize', this.lib.cuCtxSynchronize());
    for (const ptr of ptrs) this.check('cuMemFree_v2', this.lib.cuMemFree_v2(ptr));
  }

  #allocate(bytes: number): bigint {
    this.activate();
    const r = this.lib.cuMemAlloc_v2(bytes);
    if (r.status !== CUDA_SUCCESS) {
      let detail = `allocating ${bytes} bytes`;
      const info = this.lib.cuMemGetInfo_v2();
      if (info.status === CUDA_SUCCESS) detail += `; ${info.value.free} of ${info.value.total} bytes free`;
      throw this.error('cuMemAlloc_v2', r.status, { detail });
    }
    return r.value;
  }

  /** Free and total device memory in bytes, as the driver sees it. */
  memoryInfo(): { readonly free: number; readonly total: number } {
    this.activate();
    return this.value('cuMemGetInfo_v2', this.lib.cuMemGetInfo_v2());
  }

  // ------------------------------------------------------------------ copies

  copyHtoD(dst: bigint, src: ArrayBufferView, bytes: number): void {
    this.activate();
    this.check('cuMemcpyHtoD_v2', this.lib.cuMemcpyHtoD_v2(dst, src, bytes));
  }

  copyDtoH(dst: ArrayBufferView, src: bigint, bytes: number): void {
    this.activate();
    this.check('cuMemcpyDtoH_v2', this.lib.cuMemcpyDtoH_v2(dst, src, bytes));
  }

  copyDtoD(dst: bigint, src: bigint, bytes: number): void {
    this.activate();
    this.check('cuMemcpyDtoD_v2', this.lib.cuMemcpyDtoD_v2(dst, src, bytes));
  }

  /**
   * Host to device, ordered on `stream`. From pageable memory (every JS
   * array) the driver stages the data before returning, so the array may be
   * changed as soon as this returns.
   */
  copyHtoDAsync(dst: bigint, src: ArrayBufferView, bytes: number, stream: bigint): void {
    this.activate();
    this.check('cuMemcpyHtoDAsync_v2', this.lib.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream));
  }

  /** Device to host, ordered on `stream`; into pageable memory it returns once the copy is done. */
  copyDtoHAsync(dst: ArrayBufferView, src: bigint, bytes: number, stream: bigint): void {
    this.activate();
    this.check('cuMemcpyDtoHAsync_v2', this.lib.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream));
  }

  copyDtoDAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.activate();
    this.check('cuMemcpyDtoDAsync_v2', this.lib.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream));
  }

  memsetD32(dst: bigint, word: number, count: number): void {
    this.activate();
    this.check('cuMemsetD32_v2', this.lib.cuMemsetD32_v2(dst, word, count));
  }

  memsetD32Async(dst: bigint, word: number, count: number, stream: bigint): void {
    this.activate();
    this.check('cuMemsetD32Async', this.lib.cuMemsetD32Async(dst, word, count, stream));
  }

  // ------------------------------------------------------------------ streams

  /** A stream that does not synchronise with the legacy NULL stream (so it can be captured). */
  createStream(): bigint {
    this.activate();
    return this.value('cuStreamCreate', this.lib.cuStreamCreate(CU_STREAM_NON_BLOCKING));
  }

  destroyStream(stream: bigint): void {
    this.activate();
    this.check('cuStreamDestroy_v2', this.lib.cuStreamDestroy_v2(stream));
  }

  /** Blocks until `stream` finished its work. */
  synchronize(stream: bigint): void {
    this.activate();
    this.check('cuStreamSynchronize', this.lib.cuStreamSynchronize(stream));
    this.#inFlight.length = 0;
  }

  /** Whether `stream` has finished all its work (errors of that work are thrown here). */
  isIdle(stream: bigint): boolean {
    this.activate();
    const status = this.lib.cuStreamQuery(stream);
    if (status === CUDA_ERROR_NOT_READY) return false;
    this.check('cuStreamQuery', status);
    this.#inFlight.length = 0;
    return true;
  }

  /**
   * Resolves when `stream` finished its work, polling so that the event loop
   * keeps running meanwhile: on every turn of the loop for the first
   * WAIT_SPIN_MS (a decode step or a kernel finishes within microseconds of
   * its end, not a timer's millisecond later), then once a millisecond.
   */
  async waitIdle(stream: bigint): Promise<void> {
    const start = performance.now();
    while (!this.isIdle(stream)) {
      await new Promise<void>((resolve) => {
        if (performance.now() - start < WAIT_SPIN_MS) setImmediate(resolve);
        else setTimeout(resolve, 1);
      });
      this.live('waitIdle');
    }
  }

  // ------------------------------------------------------------------- events

  /** An event with timestamps (`elapsedMs`), or, with `timing: false`, one only for ordering streams, which costs less. */
  createEvent(options: { readonly timing?: boolean } = {}): bigint {
    this.activate();
    const flags = options.timing === false ? CU_EVENT_DISABLE_TIMING : CU_EVENT_DEFAULT;
    return this.value('cuEventCreate', this.lib.cuEventCreate(flags));
  }

  /** Whether everything before the last record of `event` has finished (errors of that work are thrown here). */
  eventDone(event: bigint): boolean {
    this.activate();
    const status = this.lib.cuEventQuery(event);
    if (status === CUDA_ERROR_NOT_READY) return false;
    this.check('cuEventQuery', status);
    return true;
  }

  recordEvent(event: bigint, stream: bigint): void {
    this.activate();
    this.check('cuEventRecord', this.lib.cuEventRecord(event, stream));
  }

  /** Milliseconds between two completed events. */
  elapsedMs(start: bigint, end: bigint): number {
    this.activate();
    return this.value('cuEventElapsedTime', this.lib.cuEventElapsedTime(start, end));
  }

  destroyEvent(event: bigint): void {
    this.activate();
    this.check('cuEventDestroy_v2', this.lib.cuEventDestroy_v2(event));
  }

  /** Makes work enqueued on `stream` from now on wait for the last record of `event`. */
  waitEvent(stream: bigint, event: bigint): void {
    this.activate();
    this.check('cuStreamWaitEvent', this.lib.cuStreamWaitEvent(stream, event, 0));
  }

  // ----------------------------------------------------------------- launches

  /** Enqueues recorded work on `stream` (or into the graph being captured on it). */
  enqueue(commands: readonly DeviceCommand[], stream: bigint): void {
    this.activate();
    for (const c of commands) {
      switch (c.kind) {
        case 'launch':
          this.launch(c.fn, c.grid, c.block, c.sharedBytes, stream, c.values);
          break;
        case 'copy':
          if (c.bytes > 0) this.copyDtoDAsync(c.dst, c.src, c.bytes, stream);
          break;
        case 'fill32':
          if (c.count > 0) this.memsetD32Async(c.dst, c.word, c.count, stream);
          break;
      }
    }
  }

  /**
   * `cuLaunchKernel` with the values marshalled into a reused native block
   * (see params.ts for its layout); the driver copies them at the call, so
   * the block is free again when this returns.
   */
  launch(
    fn: LoadedFunction,
    grid: Dim3Tuple,
    block: Dim3Tuple,
    sharedBytes: number,
    stream: bigint,
    values: readonly ParamValue[],
  ): void {
    this.activate();
    const n = fn.params.length;
    let address = 0n;
    if (n > 0) {
      const params = this.#paramBlock(kernelParamBytes(fn.params));
      writeKernelParams(fn.params, values, params.bytes, params.address);
      address = params.address;
    }
    const status = this.lib.cuLaunchKernel(
      fn.handle,
      grid[0],
      grid[1],
      grid[2],
      block[0],
      block[1],
      block[2],
      sharedBytes,
      stream,
      address,
    );
    this.check('cuLaunchKernel', status, {
      subject: fn.key,
      detail: `entry '${fn.entry}', grid [${grid.join(', ')}], block [${block.join(', ')}], ${sharedBytes} bytes of dynamic shared memory`,
    });
    this.#enqueued([fn.key]);
  }

  #enqueued(kernels: readonly string[]): void {
    const list = this.#capturing ?? this.#inFlight;
    list.push(...kernels);
    // Enough to name the culprits; work that is never waited for must not grow this.
    if (list === this.#inFlight && list.length > MAX_IN_FLIGHT) list.splice(0, list.length - MAX_IN_FLIGHT);
  }

  #paramBlock(bytes: number): HostBlock {
    if (!this.#params || this.#params.bytes.byteLength < bytes) {
      if (this.#params) this.lib.freeHost(this.#params);
      this.#params = undefined;
      this.#params = this.lib.allocHost(Math.max(PARAM_BLOCK_BYTES, bytes));
    }
    return this.#params;
  }

  // ------------------------------------------------------------------- graphs

  /**
   * Captures what `enqueue` puts on `stream` into a CUDA graph and returns
   * the instantiated graph. The capture always ends, also when `enqueue`
   * throws, so the stream never stays in capture mode.
   */
  capture(stream: bigint, enqueue: () => void): bigint {
    this.activate();
    this.check(
      'cuStreamBeginCapture_v2',
      this.lib.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED),
    );
    let failure: unknown;
    const kernels: string[] = [];
    this.#capturing = kernels;
    try {
      enqueue();
    } catch (error) {
      failure = error;
    } finally {
      this.#capturing = undefined;
    }
    const ended = this.lib.cuStreamEndCapture(stream);
    if (failure !== undefined) {
      if (ended.status === CUDA_SUCCESS && ended.value !== 0n) this.lib.cuGraphDestroy(ended.value);
      throw failure;
    }
    const graph = this.value('cuStreamEndCapture', ended);
    try {
      const exec = this.value('cuGraphInstantiateWithFlags', this.lib.cuGraphInstantiateWithFlags(graph, 0));
      this.#graphKernels.set(exec, kernels);
      return exec;
    } finally {
      // The executable graph does not need its template any more.
      this.lib.cuGraphDestroy(graph);
    }
  }

  launchGraph(exec: bigint, stream: bigint): void {
    this.activate();
    this.check('cuGraphLaunch', this.lib.cuGraphLaunch(exec, stream));
    this.#enqueued(this.#graphKernels.get(exec) ?? []);
  }

  destroyGraph(exec: bigint): void {
    this.#graphKernels.delete(exec);
    this.activate();
    this.check('cuGraphExecDestroy', this.lib.cuGraphExecDestroy(exec));
  }

  // ------------------------------------------------------------------ the rest

  counts(): DriverCounts {
    return {
      moduleLoads: this.#moduleLoads,
      moduleHits: this.#moduleHits,
      allocations: this.#pool.created,
      reusedAllocations: this.#pool.reused,
      pooledBytes: this.#pool.pooledBytes,
    };
  }

  /**
   * Waits for the device, unloads modules, frees pooled memory and releases
   * the primary context. Best effort: a lost context fails every call, and
   * releasing what is left is still right.
   */
  dispose(): void {
    if (this.#disposed) return;
    const lib = this.lib;
    if (!this.#lost) {
      try {
        this.activate();
        lib.cuCtxSynchronize();
        this.#pool.trim();
      } catch {
        // Freed with the context below.
      }
    }
    this.#disposed = true;
    for (const m of this.#modules.values()) lib.cuModuleUnload(m.module);
    this.#modules.clear();
    if (this.#params) lib.freeHost(this.#params);
    this.#params = undefined;
    lib.cuDevicePrimaryCtxRelease_v2(this.#deviceHandle);
    currentContext.delete(lib);
  }
}
