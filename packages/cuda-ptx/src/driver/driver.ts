import { type AllocatorStats, InvalidArgumentError, resolveMaxCachedBytes } from '@rayo/core';
import type { PtxEntry, PtxModule } from '../ptx/module.js';
import type { DeviceCommand, Dim3Tuple, DriverCounts, LoadedFunction } from './device.js';
import { CUDA_SUCCESS } from './errors.js';
import { LAUNCH_CONFIG_BYTES, writeDependentLaunchAttribute, writeLaunchDims } from './launchConfig.js';
import {
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
  type HostBlock,
  type LibCuda,
  type LoadLibCudaOptions,
  loadLibCuda,
} from './libcuda.js';
import { kernelParamBytes, type ParamValue, writeKernelParams } from './params.js';
import { type DeviceBuffer, DevicePool } from './pool.js';
import { DriverStreams } from './streams.js';
import { type TensorMapTiled, tensorMapProblem } from './tensorMap.js';

export type { DeviceCommand, DeviceProperties, Dim3Tuple, DriverCounts, LoadedFunction } from './device.js';

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
  /**
   * Programmatic dependent launch on sm_90 and newer (default true there;
   * ignored elsewhere): every module is emitted with the dependent-launch
   * prologue (PtxModule's EmitOptions) and every kernel launched with
   * programmatic stream serialization, so a kernel's blocks ramp up while the
   * previous kernel drains. Results are the same either way.
   */
  readonly dependentLaunch?: boolean;
  /**
   * With dependent launch: kernels built to (EntryOptions.triggerDependents)
   * let the next kernel launch as soon as they start (default false).
   */
  readonly earlyTrigger?: boolean;
}

/** Size of each JIT log buffer; ptxas errors for a whole module fit easily. */
const JIT_LOG_BYTES = 64 * 1024;
/** Dynamic shared memory a kernel may use without opting in. */
const DEFAULT_DYNAMIC_SHARED = 48 * 1024;
const PARAM_BLOCK_BYTES = 4096;
/** Addresses whose encoded tensor maps are kept (encodeTensorMap): far more than a model's products use. */
const TENSOR_MAP_CACHE_SIZE = 4096;

interface LoadedModule {
  readonly module: bigint;
  readonly entries: readonly PtxEntry[];
  readonly functions: Map<string, LoadedFunction>;
}

/**
 * One device through the CUDA driver API: its primary context, a module and
 * function cache keyed by kernel identity and configuration, pooled
 * allocations, copies, streams, events, launches and graph capture. Every
 * failing CUresult becomes a RayoError naming the call and the CUDA error.
 */
export class CudaDriver extends DriverStreams {
  readonly #pool: DevicePool;
  readonly #modules = new Map<string, LoadedModule>();
  readonly #dynamicShared = new Map<bigint, number>();
  readonly #tensorMaps = new Map<bigint, Map<string, Uint8Array>>();
  #moduleLoads = 0;
  #moduleHits = 0;
  #params: HostBlock | undefined;
  /** The CUlaunchConfig of dependent launches (launchConfig.ts), or undefined where they are off. */
  readonly #launchConfig: HostBlock | undefined;

  /** Loads `libcuda` (unless a LibCuda is given) and opens the device. */
  static async open(options: CudaDriverOptions = {}): Promise<CudaDriver> {
    const dependentLaunch = options.dependentLaunch ?? true;
    if (typeof dependentLaunch !== 'boolean') {
      throw new InvalidArgumentError('dependentLaunch must be a boolean', {
        operation: 'CudaDriver.open',
        argument: 'dependentLaunch',
        expected: 'true | false',
        actual: String(dependentLaunch),
      });
    }
    const lib = options.lib ?? (await loadLibCuda(options));
    return new CudaDriver(
      lib,
      options.device ?? 0,
      resolveMaxCachedBytes('cuda', options),
      dependentLaunch,
      options.earlyTrigger === true,
    );
  }

  /** With dependent launch, whether entries that ask for it trigger their dependents first. */
  readonly earlyTrigger: boolean;

  constructor(
    lib: LibCuda,
    ordinal = 0,
    maxCachedBytes = Number.POSITIVE_INFINITY,
    dependentLaunch = true,
    earlyTrigger = false,
  ) {
    super(lib, ordinal);
    this.#pool = new DevicePool(
      (bytes) => this.#allocate(bytes),
      (ptrs) => this.#release(ptrs),
      maxCachedBytes,
    );
    // Allocated up front so that launches (also those being captured) only write into it.
    this.#params = lib.allocHost(PARAM_BLOCK_BYTES);
    this.earlyTrigger = earlyTrigger;
    if (dependentLaunch && lib.cuLaunchKernelEx && this.device.computeCapability[0] >= 9) {
      this.#launchConfig = lib.allocHost(LAUNCH_CONFIG_BYTES);
      writeDependentLaunchAttribute(this.#launchConfig.bytes, this.#launchConfig.address);
    }
  }

  /** Whether modules carry the dependent-launch prologue and kernels launch with programmatic serialization. */
  get dependentLaunch(): boolean {
    return this.#launchConfig !== undefined;
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
      const text = ptx.emit({ dependentLaunch: this.dependentLaunch, earlyTrigger: this.earlyTrigger });
      this.activate();
      const r = this.lib.cuModuleLoadDataEx(text, JIT_LOG_BYTES);
      if (r.status !== CUDA_SUCCESS) {
        throw this.error('cuModuleLoadDataEx', r.status, {
          subject: key,
          log: r.logs.error,
          detail: `.target ${ptx.emittedTarget({ dependentLaunch: this.dependentLaunch }).target} on ${this.device.arch}`,
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

  /**
   * The 128 bytes of a tiled tensor map (tensorMap.ts), checked against the
   * driver's limits first. Encoded maps are kept by their fields: a model's
   * products ask for the same maps over the same (pooled) addresses on every
   * call, and encoding through the driver costs several microseconds of host
   * time each. Callers copy the bytes into a launch's parameters and never
   * change them.
   */
  encodeTensorMap(tensor: TensorMapTiled): Uint8Array {
    // By address, then the layout: a bigint keys a Map without being turned into text.
    const layout = `${tensor.dtype}:${tensor.dims}:${tensor.strides}:${tensor.box}:${tensor.swizzle}`;
    let atAddress = this.#tensorMaps.get(tensor.address);
    const known = atAddress?.get(layout);
    if (known) return known;
    const map = this.#encodeTensorMap(tensor);
    // Bounded: addresses come and go with the pool; starting over costs one encoding a map.
    if (!atAddress) {
      if (this.#tensorMaps.size >= TENSOR_MAP_CACHE_SIZE) this.#tensorMaps.clear();
      atAddress = new Map();
      this.#tensorMaps.set(tensor.address, atAddress);
    }
    atAddress.set(layout, map);
    return map;
  }

  #encodeTensorMap(tensor: TensorMapTiled): Uint8Array {
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
    if (this.disposed) return;
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
    const config = this.#launchConfig;
    if (config) writeLaunchDims(config.bytes, grid, block, sharedBytes, stream);
    const status = config
      ? this.lib.cuLaunchKernelEx!(config.address, fn.handle, address)
      : this.lib.cuLaunchKernel(
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
    this.check(config ? 'cuLaunchKernelEx' : 'cuLaunchKernel', status, {
      subject: fn.key,
      detail: `entry '${fn.entry}', grid [${grid.join(', ')}], block [${block.join(', ')}], ${sharedBytes} bytes of dynamic shared memory`,
    });
    this.enqueued([fn.key]);
  }

  #paramBlock(bytes: number): HostBlock {
    if (!this.#params || this.#params.bytes.byteLength < bytes) {
      if (this.#params) this.lib.freeHost(this.#params);
      this.#params = undefined;
      this.#params = this.lib.allocHost(Math.max(PARAM_BLOCK_BYTES, bytes));
    }
    return this.#params;
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
    if (this.disposed) return;
    const lib = this.lib;
    if (!this.lostError) {
      try {
        this.activate();
        lib.cuCtxSynchronize();
        this.#pool.trim();
      } catch {
        // Freed with the context below.
      }
    }
    this.disposed = true;
    for (const m of this.#modules.values()) lib.cuModuleUnload(m.module);
    this.#modules.clear();
    if (this.#params) lib.freeHost(this.#params);
    this.#params = undefined;
    if (this.#launchConfig) lib.freeHost(this.#launchConfig);
    this.releaseContext();
  }
}
