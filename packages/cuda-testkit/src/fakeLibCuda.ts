import {
  CU_DEVICE_ATTRIBUTE,
  CU_EVENT_DISABLE_TIMING,
  type CUresult,
  type CuOut,
  type HostBlock,
  type JitLogs,
  type LibCuda,
  type TensorMapTiled,
  tensorMapProblem,
} from '@rayo/cuda-ptx';
import { encodeFakeTensorMap } from './fakeTensorMap.js';

/**
 * A LibCuda without a GPU, for tests: device memory is host memory, stream
 * work runs at once (or is recorded while the stream is captured and run by
 * cuGraphLaunch), launches are decoded from the `void*[]` the driver built
 * and can be emulated by JS functions registered per entry name, and any
 * call can be made to fail with a chosen CUresult.
 */

/** A launch as the fake decoded it at the cuLaunchKernel call. */
export interface FakeLaunch {
  readonly entry: string;
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number, number];
  readonly sharedBytes: number;
  readonly stream: bigint;
  /** Address of the `void*[]` passed to cuLaunchKernel. */
  readonly kernelParams: bigint;
  /** The pointer table: where each parameter's value was. */
  readonly pointers: readonly bigint[];
  /** Each parameter's 8 bytes as they were at the call. */
  readonly slots: readonly Uint8Array[];
  /** Each parameter decoded by its declared type (pointers and 64-bit values as bigints). */
  readonly args: Readonly<Record<string, number | bigint | Uint8Array>>;
}

export interface FakeMemory {
  read(ptr: bigint, bytes: number): Uint8Array;
  write(ptr: bigint, data: Uint8Array): void;
  f32(ptr: bigint, count: number): Float32Array;
  u32(ptr: bigint, count: number): Uint32Array;
  setF32(ptr: bigint, values: Float32Array): void;
  setU32(ptr: bigint, values: Uint32Array): void;
}

export type FakeKernel = (launch: FakeLaunch, memory: FakeMemory) => void;

interface FakeParam {
  readonly name: string;
  readonly type: string;
}

const NAMES: Readonly<Record<number, [string, string]>> = {
  1: ['CUDA_ERROR_INVALID_VALUE', 'invalid argument'],
  2: ['CUDA_ERROR_OUT_OF_MEMORY', 'out of memory'],
  100: ['CUDA_ERROR_NO_DEVICE', 'no CUDA-capable device is detected'],
  201: ['CUDA_ERROR_INVALID_CONTEXT', 'invalid device context'],
  218: ['CUDA_ERROR_INVALID_PTX', 'a PTX JIT compilation failed'],
  400: ['CUDA_ERROR_INVALID_HANDLE', 'invalid resource handle'],
  500: ['CUDA_ERROR_NOT_FOUND', 'named symbol not found'],
  600: ['CUDA_ERROR_NOT_READY', 'device not ready'],
  700: ['CUDA_ERROR_ILLEGAL_ADDRESS', 'an illegal memory access was encountered'],
  701: ['CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES', 'too many resources requested for launch'],
  901: ['CUDA_ERROR_STREAM_CAPTURE_INVALIDATED', 'operation failed due to a previous error during capture'],
};

// Calls that still answer after a fault poisoned the context.
const OUTSIDE_CONTEXT = new Set(['cuGetErrorName', 'cuGetErrorString', 'cuDevicePrimaryCtxRelease_v2']);

const INVALID_VALUE = 1;
const OUT_OF_MEMORY = 2;
const INVALID_CONTEXT = 201;
const INVALID_HANDLE = 400;
const NOT_FOUND = 500;
const NOT_READY = 600;
const CAPTURE_UNMATCHED = 903;

const DEVICE_BASE = 0x7f00_0000_0000n;
const HOST_BASE = 0x5500_0000_0000n;

/** The block of `blocks` (by base address) holding [ptr, ptr + bytes), and ptr's offset in it. */
function allocationOf(
  blocks: ReadonlyMap<bigint, Uint8Array>,
  ptr: bigint,
  bytes: number,
): { readonly block: Uint8Array; readonly offset: number } | undefined {
  for (const [base, block] of blocks) {
    if (ptr >= base && ptr + BigInt(bytes) <= base + BigInt(block.byteLength))
      return { block, offset: Number(ptr - base) };
  }
  return undefined;
}

/** The `bytes` at `ptr` in one of `blocks`, or undefined where no block holds them all. */
function bytesAt(
  blocks: ReadonlyMap<bigint, Uint8Array>,
  ptr: bigint,
  bytes: number,
): Uint8Array | undefined {
  const at = allocationOf(blocks, ptr, bytes);
  return at?.block.subarray(at.offset, at.offset + bytes);
}

/** Reads the entries and parameters of PTX text as the builder emits it. */
export function parsePtxEntries(image: string): Map<string, FakeParam[]> {
  const entries = new Map<string, FakeParam[]>();
  for (const m of image.matchAll(/\.entry\s+(\w+)\s*\(([^)]*)\)/g)) {
    const name = m[1]!;
    const params: FakeParam[] = [];
    for (const p of m[2]!.matchAll(/\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+(\w+)(\[\d+\])?/g)) {
      const symbol = p[2]!;
      const prefix = `${name}_param_`;
      // A by-value byte array is a tensor map (the only kind the builder declares).
      const type = p[3] ? 'tensorMap' : p[1]!;
      params.push({ name: symbol.startsWith(prefix) ? symbol.slice(prefix.length) : symbol, type });
    }
    entries.set(name, params);
  }
  return entries;
}

export class FakeLibCuda implements LibCuda {
  readonly path = 'fake libcuda';
  /** Every call, in order. */
  readonly calls: string[] = [];
  /** Launches that ran (at once, or when their graph was launched). */
  readonly launches: FakeLaunch[] = [];
  /** JS stand-ins for kernels, by entry name. */
  readonly kernels = new Map<string, FakeKernel>();
  /** Runs launches of entries without a JS stand-in, given the module's PTX text (e.g. an interpreter). */
  executor: ((image: string, launch: FakeLaunch) => void) | undefined;
  /** PTX text of every module loaded. */
  readonly images: string[] = [];

  deviceCount = 1;
  deviceName = 'Fake H100';
  totalMemory = 80 * 2 ** 30;
  /** Bytes the fake lets be allocated before it reports out of memory. */
  memoryLimit = 2 ** 30;
  /** Whether cuGetErrorName/String answer (an old driver may not know a code). */
  errorNames = true;
  /** The next module load fails with this status and error log. */
  jitFailure: { readonly status: CUresult; readonly log: string } | undefined;
  /** The flags each live event was created with. */
  readonly eventFlags = new Map<bigint, number>();
  /** cuStreamQuery reports this many polls as still busy. */
  busyPolls = 0;
  /**
   * Entries that fault when they run, like a kernel storing to a bad address:
   * the launch succeeds, and from then on every call returns the status until
   * the primary context is released by all its users.
   */
  readonly faults = new Map<string, CUresult>();
  #sticky: CUresult | undefined;
  readonly attributes = new Map<number, number>([
    [CU_DEVICE_ATTRIBUTE.MAX_THREADS_PER_BLOCK, 1024],
    [CU_DEVICE_ATTRIBUTE.MAX_BLOCK_DIM_X, 1024],
    [CU_DEVICE_ATTRIBUTE.MAX_BLOCK_DIM_Y, 1024],
    [CU_DEVICE_ATTRIBUTE.MAX_BLOCK_DIM_Z, 64],
    [CU_DEVICE_ATTRIBUTE.MAX_GRID_DIM_X, 2 ** 31 - 1],
    [CU_DEVICE_ATTRIBUTE.MAX_GRID_DIM_Y, 65535],
    [CU_DEVICE_ATTRIBUTE.MAX_GRID_DIM_Z, 65535],
    [CU_DEVICE_ATTRIBUTE.MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024],
    [CU_DEVICE_ATTRIBUTE.WARP_SIZE, 32],
    [CU_DEVICE_ATTRIBUTE.MULTIPROCESSOR_COUNT, 132],
    [CU_DEVICE_ATTRIBUTE.L2_CACHE_SIZE, 50 * 2 ** 20],
    [CU_DEVICE_ATTRIBUTE.MAX_THREADS_PER_MULTIPROCESSOR, 2048],
    [CU_DEVICE_ATTRIBUTE.COMPUTE_CAPABILITY_MAJOR, 9],
    [CU_DEVICE_ATTRIBUTE.COMPUTE_CAPABILITY_MINOR, 0],
    [CU_DEVICE_ATTRIBUTE.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 227 * 1024],
  ]);

  readonly #failures = new Map<string, { status: CUresult; times: number }>();
  readonly #memory = new Map<bigint, Uint8Array>();
  readonly #host = new Map<bigint, Uint8Array>();
  readonly #modules = new Map<bigint, Map<string, FakeParam[]>>();
  readonly #functions = new Map<bigint, { entry: string; params: FakeParam[]; image: string }>();
  readonly #images = new Map<bigint, string>();
  readonly #streams = new Map<bigint, (() => void)[] | undefined>();
  readonly #graphs = new Map<bigint, (() => void)[]>();
  readonly #execs = new Map<bigint, (() => void)[]>();
  readonly #events = new Map<bigint, boolean>();
  readonly funcAttributes = new Map<bigint, Map<number, number>>();
  #next = 1n;
  #nextDevice = DEVICE_BASE;
  #nextHost = HOST_BASE;
  #allocated = 0;
  #initialised = false;
  #context: bigint | undefined;
  #current: bigint | undefined;
  #contextRefs = 0;

  /** Makes the next `times` calls of `call` return `status`. */
  fail(call: keyof LibCuda, status: CUresult, times = 1): void {
    this.#failures.set(call, { status, times });
  }

  /** Live device allocations. */
  get liveAllocations(): number {
    return this.#memory.size;
  }

  get contextRefs(): number {
    return this.#contextRefs;
  }

  readonly memory: FakeMemory = {
    read: (ptr, bytes) => this.#region(ptr, bytes, 'read').slice(),
    write: (ptr, data) => this.#region(ptr, data.byteLength, 'write').set(data),
    f32: (ptr, count) => new Float32Array(this.memory.read(ptr, count * 4).buffer),
    u32: (ptr, count) => new Uint32Array(this.memory.read(ptr, count * 4).buffer),
    setF32: (ptr, values) =>
      this.memory.write(ptr, new Uint8Array(values.buffer, values.byteOffset, values.byteLength)),
    setU32: (ptr, values) =>
      this.memory.write(ptr, new Uint8Array(values.buffer, values.byteOffset, values.byteLength)),
  };

  /** A DataView over the allocation holding [ptr, ptr + bytes), and ptr's offset in it. */
  deviceView(ptr: bigint, bytes: number): { readonly view: DataView; readonly offset: number } | undefined {
    const at = allocationOf(this.#memory, ptr, bytes);
    if (!at) return undefined;
    return {
      view: new DataView(at.block.buffer, at.block.byteOffset, at.block.byteLength),
      offset: at.offset,
    };
  }

  #region(ptr: bigint, bytes: number, what: string): Uint8Array {
    const found = this.#find(ptr, bytes);
    if (!found)
      throw new Error(
        `fake device: ${what} of ${bytes} bytes at 0x${ptr.toString(16)} is outside every allocation`,
      );
    return found;
  }

  #find(ptr: bigint, bytes: number): Uint8Array | undefined {
    return bytesAt(this.#memory, ptr, bytes);
  }

  #handle(): bigint {
    return 0x1000n + this.#next++ * 0x10n;
  }

  /** A destroy call: forgets `handle`, which must be one of `table`'s. */
  #destroy(call: string, table: { delete(handle: bigint): boolean }, handle: bigint): CUresult {
    return this.#enter(call) ?? (table.delete(handle) ? 0 : INVALID_HANDLE);
  }

  #enter(call: string): CUresult | undefined {
    this.calls.push(call);
    if (this.#sticky !== undefined && !OUTSIDE_CONTEXT.has(call)) return this.#sticky;
    const f = this.#failures.get(call);
    if (f && f.times > 0) {
      f.times--;
      return f.status;
    }
    if (call !== 'cuInit' && call !== 'cuGetErrorName' && call !== 'cuGetErrorString' && !this.#initialised) {
      return 3;
    }
    return undefined;
  }

  #needContext(): CUresult | undefined {
    return this.#current === undefined ? INVALID_CONTEXT : undefined;
  }

  /** Runs stream work now, or records it while the stream is captured. */
  #onStream(stream: bigint, work: () => CUresult): CUresult {
    if (stream !== 0n && !this.#streams.has(stream)) return INVALID_HANDLE;
    const captured = this.#streams.get(stream);
    if (captured) {
      captured.push(() => {
        const status = work();
        if (status !== 0) throw new Error(`fake graph node failed with ${status}`);
      });
      return 0;
    }
    return work();
  }

  #out<T>(call: string, value: () => T | CUresult, fallback: T): CuOut<T> {
    const failed = this.#enter(call);
    if (failed !== undefined) return { status: failed, value: fallback };
    const v = value();
    return { status: 0, value: v as T };
  }

  cuInit(flags: number): CUresult {
    const failed = this.#enter('cuInit');
    if (failed !== undefined) return failed;
    if (flags !== 0) return INVALID_VALUE;
    this.#initialised = true;
    return 0;
  }

  cuDeviceGetCount(): CuOut<number> {
    return this.#out('cuDeviceGetCount', () => this.deviceCount, 0);
  }

  cuDeviceGet(ordinal: number): CuOut<number> {
    const failed = this.#enter('cuDeviceGet');
    if (failed !== undefined) return { status: failed, value: 0 };
    if (ordinal < 0 || ordinal >= this.deviceCount) return { status: 101, value: 0 };
    return { status: 0, value: ordinal };
  }

  cuDeviceGetName(_device: number): CuOut<string> {
    return this.#out('cuDeviceGetName', () => this.deviceName, '');
  }

  cuDeviceGetAttribute(attribute: number, _device: number): CuOut<number> {
    const failed = this.#enter('cuDeviceGetAttribute');
    if (failed !== undefined) return { status: failed, value: 0 };
    const v = this.attributes.get(attribute);
    return v === undefined ? { status: INVALID_VALUE, value: 0 } : { status: 0, value: v };
  }

  cuDeviceTotalMem_v2(_device: number): CuOut<number> {
    return this.#out('cuDeviceTotalMem_v2', () => this.totalMemory, 0);
  }

  cuDevicePrimaryCtxRetain(_device: number): CuOut<bigint> {
    const failed = this.#enter('cuDevicePrimaryCtxRetain');
    if (failed !== undefined) return { status: failed, value: 0n };
    this.#context ??= this.#handle();
    this.#contextRefs++;
    return { status: 0, value: this.#context };
  }

  cuDevicePrimaryCtxRelease_v2(_device: number): CUresult {
    const failed = this.#enter('cuDevicePrimaryCtxRelease_v2');
    if (failed !== undefined) return failed;
    this.#contextRefs--;
    if (this.#contextRefs === 0) {
      this.#sticky = undefined;
      this.#memory.clear();
      this.#allocated = 0;
      this.#current = undefined;
    }
    return 0;
  }

  cuCtxSetCurrent(context: bigint): CUresult {
    const failed = this.#enter('cuCtxSetCurrent');
    if (failed !== undefined) return failed;
    if (context !== 0n && context !== this.#context) return INVALID_CONTEXT;
    this.#current = context === 0n ? undefined : context;
    return 0;
  }

  cuCtxSynchronize(): CUresult {
    return this.#enter('cuCtxSynchronize') ?? this.#needContext() ?? 0;
  }

  cuModuleLoadDataEx(image: string, logBytes: number): CuOut<bigint> & { readonly logs: JitLogs } {
    const failed = this.#enter('cuModuleLoadDataEx') ?? this.#needContext();
    if (failed !== undefined) return { status: failed, value: 0n, logs: { error: '', info: '' } };
    this.images.push(image);
    const jit = this.jitFailure;
    if (jit) {
      this.jitFailure = undefined;
      return { status: jit.status, value: 0n, logs: { error: jit.log.slice(0, logBytes - 1), info: '' } };
    }
    const handle = this.#handle();
    this.#modules.set(handle, parsePtxEntries(image));
    this.#images.set(handle, image);
    return { status: 0, value: handle, logs: { error: '', info: 'fake JIT: ok' } };
  }

  cuModuleGetFunction(module: bigint, name: string): CuOut<bigint> {
    const failed = this.#enter('cuModuleGetFunction');
    if (failed !== undefined) return { status: failed, value: 0n };
    const entries = this.#modules.get(module);
    if (!entries) return { status: INVALID_HANDLE, value: 0n };
    const params = entries.get(name);
    if (!params) return { status: NOT_FOUND, value: 0n };
    const handle = this.#handle();
    this.#functions.set(handle, { entry: name, params, image: this.#images.get(module)! });
    return { status: 0, value: handle };
  }

  cuModuleUnload(module: bigint): CUresult {
    return this.#destroy('cuModuleUnload', this.#modules, module);
  }

  /** Encodes the map in the fake's own format (fakeTensorMap.ts), which the interpreter reads. */
  cuTensorMapEncodeTiled(map: Uint8Array, tensor: TensorMapTiled): CUresult {
    const failed = this.#enter('cuTensorMapEncodeTiled');
    if (failed !== undefined) return failed;
    if (map.byteLength !== 128 || tensorMapProblem(tensor) !== undefined) return INVALID_VALUE;
    map.set(encodeFakeTensorMap(tensor));
    return 0;
  }

  cuFuncSetAttribute(fn: bigint, attribute: number, value: number): CUresult {
    const failed = this.#enter('cuFuncSetAttribute');
    if (failed !== undefined) return failed;
    if (!this.#functions.has(fn)) return INVALID_HANDLE;
    const attrs = this.funcAttributes.get(fn) ?? new Map<number, number>();
    attrs.set(attribute, value);
    this.funcAttributes.set(fn, attrs);
    return 0;
  }

  cuMemAlloc_v2(bytes: number): CuOut<bigint> {
    const failed = this.#enter('cuMemAlloc_v2') ?? this.#needContext();
    if (failed !== undefined) return { status: failed, value: 0n };
    if (bytes <= 0) return { status: INVALID_VALUE, value: 0n };
    if (this.#allocated + bytes > this.memoryLimit) return { status: OUT_OF_MEMORY, value: 0n };
    const base = this.#nextDevice;
    this.#nextDevice += BigInt(Math.ceil(bytes / 256) * 256 + 256);
    this.#memory.set(base, new Uint8Array(bytes));
    this.#allocated += bytes;
    return { status: 0, value: base };
  }

  cuMemFree_v2(ptr: bigint): CUresult {
    const failed = this.#enter('cuMemFree_v2');
    if (failed !== undefined) return failed;
    const buf = this.#memory.get(ptr);
    if (!buf) return INVALID_VALUE;
    this.#memory.delete(ptr);
    this.#allocated -= buf.byteLength;
    return 0;
  }

  cuMemGetInfo_v2(): CuOut<{ free: number; total: number }> {
    return this.#out(
      'cuMemGetInfo_v2',
      () => ({ free: this.memoryLimit - this.#allocated, total: this.memoryLimit }),
      { free: 0, total: 0 },
    );
  }

  #hostBytes(view: ArrayBufferView, bytes: number): Uint8Array | undefined {
    if (bytes > view.byteLength) return undefined;
    return new Uint8Array(view.buffer, view.byteOffset, bytes);
  }

  /** Copies `from` into `to`, or fails when either range lies outside its memory (set copies overlapping ranges right). */
  #copyBytes(to: Uint8Array | undefined, from: Uint8Array | undefined): CUresult {
    if (!to || !from) return INVALID_VALUE;
    to.set(from);
    return 0;
  }

  #htod(dst: bigint, src: ArrayBufferView, bytes: number): CUresult {
    return this.#copyBytes(this.#find(dst, bytes), this.#hostBytes(src, bytes));
  }

  #dtoh(dst: ArrayBufferView, src: bigint, bytes: number): CUresult {
    return this.#copyBytes(this.#hostBytes(dst, bytes), this.#find(src, bytes));
  }

  #dtod(dst: bigint, src: bigint, bytes: number): CUresult {
    return this.#copyBytes(this.#find(dst, bytes), this.#find(src, bytes));
  }

  #memset(dst: bigint, value: number, count: number): CUresult {
    const to = this.#find(dst, count * 4);
    if (!to) return INVALID_VALUE;
    new Uint32Array(to.buffer, to.byteOffset, count).fill(value >>> 0);
    return 0;
  }

  cuMemcpyHtoD_v2(dst: bigint, src: ArrayBufferView, bytes: number): CUresult {
    return this.#enter('cuMemcpyHtoD_v2') ?? this.#htod(dst, src, bytes);
  }

  cuMemcpyDtoH_v2(dst: ArrayBufferView, src: bigint, bytes: number): CUresult {
    return this.#enter('cuMemcpyDtoH_v2') ?? this.#dtoh(dst, src, bytes);
  }

  cuMemcpyDtoD_v2(dst: bigint, src: bigint, bytes: number): CUresult {
    return this.#enter('cuMemcpyDtoD_v2') ?? this.#dtod(dst, src, bytes);
  }

  cuMemcpyHtoDAsync_v2(dst: bigint, src: ArrayBufferView, bytes: number, stream: bigint): CUresult {
    const failed = this.#enter('cuMemcpyHtoDAsync_v2');
    if (failed !== undefined) return failed;
    // Like the driver with pageable memory: the source is read now, also when captured.
    const copy = this.#hostBytes(src, bytes)?.slice();
    if (!copy) return INVALID_VALUE;
    return this.#onStream(stream, () => this.#htod(dst, copy, bytes));
  }

  cuMemcpyDtoHAsync_v2(dst: ArrayBufferView, src: bigint, bytes: number, stream: bigint): CUresult {
    return this.#enter('cuMemcpyDtoHAsync_v2') ?? this.#onStream(stream, () => this.#dtoh(dst, src, bytes));
  }

  cuMemcpyDtoDAsync_v2(dst: bigint, src: bigint, bytes: number, stream: bigint): CUresult {
    return this.#enter('cuMemcpyDtoDAsync_v2') ?? this.#onStream(stream, () => this.#dtod(dst, src, bytes));
  }

  cuMemsetD32_v2(dst: bigint, value: number, count: number): CUresult {
    return this.#enter('cuMemsetD32_v2') ?? this.#memset(dst, value, count);
  }

  cuMemsetD32Async(dst: bigint, value: number, count: number, stream: bigint): CUresult {
    return this.#enter('cuMemsetD32Async') ?? this.#onStream(stream, () => this.#memset(dst, value, count));
  }

  cuStreamCreate(flags: number): CuOut<bigint> {
    const failed = this.#enter('cuStreamCreate') ?? this.#needContext();
    if (failed !== undefined) return { status: failed, value: 0n };
    if (flags !== 0 && flags !== 1) return { status: INVALID_VALUE, value: 0n };
    const handle = this.#handle();
    this.#streams.set(handle, undefined);
    return { status: 0, value: handle };
  }

  cuStreamDestroy_v2(stream: bigint): CUresult {
    return this.#destroy('cuStreamDestroy_v2', this.#streams, stream);
  }

  cuStreamSynchronize(stream: bigint): CUresult {
    const failed = this.#enter('cuStreamSynchronize');
    if (failed !== undefined) return failed;
    return this.#streams.has(stream) || stream === 0n ? 0 : INVALID_HANDLE;
  }

  cuStreamQuery(stream: bigint): CUresult {
    const failed = this.#enter('cuStreamQuery');
    if (failed !== undefined) return failed;
    if (!this.#streams.has(stream) && stream !== 0n) return INVALID_HANDLE;
    if (this.busyPolls > 0) {
      this.busyPolls--;
      return NOT_READY;
    }
    return 0;
  }

  cuEventCreate(flags: number): CuOut<bigint> {
    const failed = this.#enter('cuEventCreate') ?? this.#needContext();
    if (failed !== undefined) return { status: failed, value: 0n };
    // CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS
    if ((flags & ~0x7) !== 0) return { status: INVALID_VALUE, value: 0n };
    const handle = this.#handle();
    this.#events.set(handle, false);
    this.eventFlags.set(handle, flags);
    return { status: 0, value: handle };
  }

  cuEventRecord(event: bigint, stream: bigint): CUresult {
    const failed = this.#enter('cuEventRecord');
    if (failed !== undefined) return failed;
    if (!this.#events.has(event)) return INVALID_HANDLE;
    return this.#onStream(stream, () => {
      this.#events.set(event, true);
      return 0;
    });
  }

  cuEventSynchronize(event: bigint): CUresult {
    return this.#enter('cuEventSynchronize') ?? (this.#events.has(event) ? 0 : INVALID_HANDLE);
  }

  cuEventQuery(event: bigint): CUresult {
    return this.#enter('cuEventQuery') ?? (this.#events.has(event) ? 0 : INVALID_HANDLE);
  }

  cuEventElapsedTime(start: bigint, end: bigint): CuOut<number> {
    const failed = this.#enter('cuEventElapsedTime');
    if (failed !== undefined) return { status: failed, value: 0 };
    if (!this.#events.get(start) || !this.#events.get(end)) return { status: INVALID_HANDLE, value: 0 };
    // As the driver: an event created with CU_EVENT_DISABLE_TIMING has no time to give.
    if ((this.eventFlags.get(start)! | this.eventFlags.get(end)!) & CU_EVENT_DISABLE_TIMING) {
      return { status: INVALID_HANDLE, value: 0 };
    }
    return { status: 0, value: 0.25 };
  }

  cuEventDestroy_v2(event: bigint): CUresult {
    const failed = this.#enter('cuEventDestroy_v2');
    if (failed !== undefined) return failed;
    this.eventFlags.delete(event);
    return this.#events.delete(event) ? 0 : INVALID_HANDLE;
  }

  cuStreamWaitEvent(stream: bigint, event: bigint, flags: number): CUresult {
    const failed = this.#enter('cuStreamWaitEvent');
    if (failed !== undefined) return failed;
    if (!this.#events.has(event)) return INVALID_HANDLE;
    if (flags !== 0) return INVALID_VALUE;
    // Work runs when enqueued here, so whatever the event marks has already happened.
    return this.#onStream(stream, () => 0);
  }

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
  ): CUresult {
    const failed = this.#enter('cuLaunchKernel');
    if (failed !== undefined) return failed;
    const f = this.#functions.get(fn);
    if (!f) return INVALID_HANDLE;
    const dims = [gridX, gridY, gridZ, blockX, blockY, blockZ];
    if (dims.some((d) => !Number.isInteger(d) || d < 1)) return INVALID_VALUE;
    if (blockX * blockY * blockZ > (this.attributes.get(CU_DEVICE_ATTRIBUTE.MAX_THREADS_PER_BLOCK) ?? 1024)) {
      return INVALID_VALUE;
    }
    // Like the driver: the values are read now; the block may be reused after the call.
    const pointers: bigint[] = [];
    const slots: Uint8Array[] = [];
    const args: Record<string, number | bigint | Uint8Array> = {};
    if (f.params.length > 0) {
      const table = this.#hostRead(kernelParams, 8 * f.params.length);
      if (!table) return INVALID_VALUE;
      const tableView = new DataView(table.buffer, table.byteOffset, table.byteLength);
      for (let i = 0; i < f.params.length; i++) {
        const at = tableView.getBigUint64(8 * i, true);
        const p = f.params[i]!;
        if (p.type === 'tensorMap') {
          const map = this.#hostRead(at, 128);
          if (!map || at % 64n !== 0n) return INVALID_VALUE;
          pointers.push(at);
          slots.push(map.slice(0, 8));
          args[p.name] = map.slice();
          continue;
        }
        const slot = this.#hostRead(at, 8);
        if (!slot) return INVALID_VALUE;
        pointers.push(at);
        slots.push(slot.slice());
        const v = new DataView(slot.buffer, slot.byteOffset, 8);
        args[p.name] =
          p.type === 'f32'
            ? v.getFloat32(0, true)
            : p.type === 'u32'
              ? v.getUint32(0, true)
              : p.type === 's32'
                ? v.getInt32(0, true)
                : p.type === 's64'
                  ? v.getBigInt64(0, true)
                  : v.getBigUint64(0, true);
      }
    }
    const launch: FakeLaunch = {
      entry: f.entry,
      grid: [gridX, gridY, gridZ],
      block: [blockX, blockY, blockZ],
      sharedBytes,
      stream,
      kernelParams,
      pointers,
      slots,
      args,
    };
    return this.#onStream(stream, () => {
      this.launches.push(launch);
      const fault = this.faults.get(f.entry);
      if (fault !== undefined) {
        this.#sticky = fault;
        return 0;
      }
      const kernel = this.kernels.get(f.entry);
      if (kernel) kernel(launch, this.memory);
      else this.executor?.(f.image, launch);
      return 0;
    });
  }

  #hostRead(address: bigint, bytes: number): Uint8Array | undefined {
    return bytesAt(this.#host, address, bytes);
  }

  cuStreamBeginCapture_v2(stream: bigint, mode: number): CUresult {
    const failed = this.#enter('cuStreamBeginCapture_v2');
    if (failed !== undefined) return failed;
    if (!this.#streams.has(stream) || this.#streams.get(stream) !== undefined) return INVALID_VALUE;
    if (mode < 0 || mode > 2) return INVALID_VALUE;
    this.#streams.set(stream, []);
    return 0;
  }

  cuStreamEndCapture(stream: bigint): CuOut<bigint> {
    const failed = this.#enter('cuStreamEndCapture');
    if (failed !== undefined) {
      if (this.#streams.has(stream)) this.#streams.set(stream, undefined);
      return { status: failed, value: 0n };
    }
    const captured = this.#streams.get(stream);
    if (!captured) return { status: CAPTURE_UNMATCHED, value: 0n };
    this.#streams.set(stream, undefined);
    const graph = this.#handle();
    this.#graphs.set(graph, captured);
    return { status: 0, value: graph };
  }

  cuGraphInstantiateWithFlags(graph: bigint, _flags: number): CuOut<bigint> {
    const failed = this.#enter('cuGraphInstantiateWithFlags');
    if (failed !== undefined) return { status: failed, value: 0n };
    const nodes = this.#graphs.get(graph);
    if (!nodes) return { status: INVALID_HANDLE, value: 0n };
    const exec = this.#handle();
    this.#execs.set(exec, [...nodes]);
    return { status: 0, value: exec };
  }

  cuGraphLaunch(exec: bigint, stream: bigint): CUresult {
    const failed = this.#enter('cuGraphLaunch');
    if (failed !== undefined) return failed;
    const nodes = this.#execs.get(exec);
    if (!nodes) return INVALID_HANDLE;
    return this.#onStream(stream, () => {
      for (const node of nodes) node();
      return 0;
    });
  }

  cuGraphExecDestroy(exec: bigint): CUresult {
    return this.#destroy('cuGraphExecDestroy', this.#execs, exec);
  }

  cuGraphDestroy(graph: bigint): CUresult {
    return this.#destroy('cuGraphDestroy', this.#graphs, graph);
  }

  /** Graphs and executable graphs that were not destroyed. */
  get liveGraphs(): { readonly graphs: number; readonly execs: number } {
    return { graphs: this.#graphs.size, execs: this.#execs.size };
  }

  cuGetErrorName(code: CUresult): CuOut<string | undefined> {
    this.calls.push('cuGetErrorName');
    const known = NAMES[code];
    if (!this.errorNames || !known) return { status: INVALID_VALUE, value: undefined };
    return { status: 0, value: known[0] };
  }

  cuGetErrorString(code: CUresult): CuOut<string | undefined> {
    this.calls.push('cuGetErrorString');
    const known = NAMES[code];
    if (!this.errorNames || !known) return { status: INVALID_VALUE, value: undefined };
    return { status: 0, value: known[1] };
  }

  allocHost(bytes: number): HostBlock {
    this.calls.push('allocHost');
    const address = this.#nextHost;
    this.#nextHost += BigInt(Math.ceil(bytes / 4096) * 4096 + 4096);
    const block = new Uint8Array(bytes);
    this.#host.set(address, block);
    return { address, bytes: block };
  }

  freeHost(block: HostBlock): void {
    this.calls.push('freeHost');
    this.#host.delete(block.address);
  }

  /** Calls made since `mark` (an index into `calls`), for checking sequences. */
  since(mark: number): string[] {
    return this.calls.slice(mark);
  }
}
