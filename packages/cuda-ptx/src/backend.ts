import {
  type AllocatorStats,
  type AttrValues,
  allocHost,
  type BackendInfo,
  BackendSkeleton,
  type BatchOptions,
  bytesPerElement,
  type CommandBatch,
  checkShapeAndDType,
  type DeviceStorage,
  type DType,
  type HostArray,
  hostDataFor,
  InvalidArgumentError,
  type KernelRunner,
  type KernelSpec,
  KernelTable,
  type PreparedCall,
  type Shape,
  sizeOf,
  type Tensor,
} from '@rayo/core';
import { CudaCommandBatch, type RecordedCall } from './batch.js';
import { EventTimer } from './deviceTime.js';
import { cudaBackendInfo } from './driver/device.js';
import {
  CudaDriver,
  type CudaDriverOptions,
  type DeviceCommand,
  type DriverCounts,
} from './driver/driver.js';
import { libCuda } from './driver/libcuda.js';
import { checkDevicePointer, type DeviceBuffer } from './driver/pool.js';
import { CommandRecorder } from './encoder.js';
import type { AnyCudaKernel, Operand } from './kernel.js';
import { CUDA_KERNELS } from './kernels/index.js';
import { type CudaTuning, type CudaTuningOptions, resolveCudaTuning } from './tuning.js';

/** Completion counters the backend allocates at least: a paged batch of 128 sequences of 8 kv heads. */
const COUNTER_WORDS = 1024;

const F32 = new Float32Array(1);
const F32_BITS = new Uint32Array(F32.buffer);

/**
 * The 32 bits of a 4-byte host array as the little-endian device stores
 * them: the same bytes a copy would write. Read from the elements (a
 * DataView costs more than the memset saves), but a NaN's bits through one,
 * since a float's trip through a number may quiet it.
 */
function wordOf(host: HostArray): number {
  if (host instanceof Int32Array || host instanceof Uint32Array) return host[0]! >>> 0;
  if (host instanceof Uint16Array) return (host[0]! | (host[1]! << 16)) >>> 0;
  const value = host[0]!;
  if (Number.isNaN(value)) return new DataView(host.buffer, host.byteOffset, 4).getUint32(0, true);
  F32[0] = value;
  return F32_BITS[0]!;
}

/**
 * The device to open, the cap on cached memory (`maxCachedBytes`), dependent
 * launch (the driver's early trigger follows `weightPrefetch`) and the
 * tuning switches (see CudaTuningOptions).
 */
export interface CudaBackendOptions extends Omit<CudaDriverOptions, 'earlyTrigger'>, CudaTuningOptions {}

/**
 * The CUDA backend: PTX kernels loaded through the driver API on one device's
 * primary context, all work in order on one stream of its own, tensors in
 * pooled device allocations, and batches replayed as CUDA graphs. Its hooks
 * on the core skeleton are driver calls on that stream.
 */
export class CudaBackend extends BackendSkeleton<DeviceBuffer, AnyCudaKernel, RecordedCall> {
  readonly name = 'cuda';
  readonly info: BackendInfo;
  readonly driver: CudaDriver;
  /** The stream every operation of this backend is ordered on. */
  readonly stream: bigint;
  /** The tuning switches every kernel of this backend sees. */
  readonly tuning: CudaTuning;
  readonly #timer: EventTimer;
  /** The completion counters the backend's launches share (KernelEncoder.completionCounters). */
  #counterWords?: DeviceBuffer;

  /**
   * At least `words` zeroed counters. A larger request takes a new buffer and
   * keeps the old one, which recorded graphs may still point at (both are the
   * context's until the backend is disposed).
   */
  readonly #counters = (words: number): bigint => {
    if (this.#counterWords === undefined || this.#counterWords.bytes < 4 * words) {
      const buffer = this.driver.alloc(4 * Math.max(words, COUNTER_WORDS));
      this.driver.enqueue(
        [{ kind: 'fill32', dst: buffer.ptr, word: 0, count: Math.floor(buffer.bytes / 4) }],
        this.stream,
      );
      this.#counterWords = buffer;
    }
    return this.#counterWords.ptr;
  };

  static async create(options: CudaBackendOptions = {}): Promise<CudaBackend> {
    // Checked before a driver is opened: a wrong switch costs no context.
    const { weightPrefetch } = resolveCudaTuning(options);
    const lib = options.lib ?? (options.path === undefined ? await libCuda() : undefined);
    const driver = await CudaDriver.open({
      ...options,
      ...(lib ? { lib } : {}),
      earlyTrigger: weightPrefetch !== undefined && weightPrefetch !== 'off',
    });
    try {
      return new CudaBackend(driver, options);
    } catch (error) {
      driver.dispose();
      throw error;
    }
  }

  constructor(driver: CudaDriver, tuning: CudaTuningOptions = {}) {
    super(new KernelTable('cuda', 'PTX', CUDA_KERNELS));
    this.tuning = resolveCudaTuning(tuning);
    this.driver = driver;
    this.stream = driver.createStream();
    this.#timer = new EventTimer(driver, this.stream);
    this.info = cudaBackendInfo(driver.device);
  }

  /** Module cache and allocation counts of the driver: flat once a workload is warm. */
  counts(): DriverCounts {
    return this.driver.counts();
  }

  /** Throws if the backend was disposed or its context was lost. */
  override checkAlive(api: string): void {
    super.checkAlive(api);
    this.driver.live(api);
  }

  protected allocateBuffer(_api: string, byteLength: number): DeviceBuffer {
    return this.driver.alloc(byteLength);
  }

  protected override allocatorStats(): AllocatorStats {
    return this.driver.allocatorStats();
  }

  protected override resetAllocatorPeaks(): void {
    this.driver.resetAllocatorPeaks();
  }

  // Idle segments are freed after the device finished the work that used them.
  protected override releaseCache(): void {
    this.driver.trim();
  }

  protected freeBuffer(storage: DeviceStorage<DeviceBuffer>): void {
    this.driver.free(storage.buffer);
  }

  // Pageable host memory: the driver has copied it out before the call
  // returns. One word (a decode step's token, position or length) is set by
  // a memset of its bits instead, which needs no host staging and costs the
  // host less.
  protected writeStorage(storage: DeviceStorage<DeviceBuffer>, host: HostArray): void {
    if (host.byteLength === 0) return;
    const ptr = storage.buffer.ptr;
    if (host.byteLength === 4 && (ptr & 3n) === 0n) {
      this.driver.memsetD32Async(ptr, wordOf(host), 1, this.stream);
      return;
    }
    this.driver.copyHtoDAsync(ptr, host, host.byteLength, this.stream);
  }

  protected async readStorage(tensor: Tensor): Promise<HostArray> {
    const out = allocHost(tensor.dtype, tensor.size);
    if (tensor.byteLength === 0) return out;
    // Let the stream drain without blocking the event loop; the copy is then
    // ordered after anything enqueued meanwhile and returns once it is done.
    await this.driver.waitIdle(this.stream);
    this.checkAlive('read');
    const s = this.own('read', tensor, 'tensor');
    this.driver.copyDtoHAsync(out, s.buffer.ptr, s.byteLength, this.stream);
    await this.driver.waitIdle(this.stream);
    return out;
  }

  // Blocks are whole multiples of 512 bytes, so rounding up to words stays inside.
  protected clearStorage(tensor: Tensor, storage: DeviceStorage<DeviceBuffer>): void {
    const words = Math.ceil(tensor.byteLength / 4);
    if (words > 0) this.driver.memsetD32Async(storage.buffer.ptr, 0, words, this.stream);
  }

  /** Overwrites a tensor's elements with host data, ordered after the work already enqueued. */
  writeHost(tensor: Tensor, data: HostArray | readonly number[]): void {
    this.checkAlive('writeHost');
    const s = this.own('writeHost', tensor, 'tensor');
    this.writeStorage(s, hostDataFor('writeHost', data, tensor.shape, tensor.dtype));
  }

  /** The device memory behind a tensor, e.g. to hand it to other CUDA code. */
  pointerOf(tensor: Tensor): { readonly ptr: bigint; readonly byteLength: number } {
    const s = this.own('pointerOf', tensor, 'tensor');
    return { ptr: s.buffer.ptr, byteLength: s.byteLength };
  }

  /**
   * Wraps device memory of this backend's context as a tensor without a
   * copy. The caller keeps ownership: disposing the tensor frees nothing.
   */
  importPointer(ptr: bigint, shape: Shape, dtype: DType = 'f32'): Tensor {
    this.checkAlive('importPointer');
    checkShapeAndDType('importPointer', shape, dtype);
    checkDevicePointer('importPointer', ptr);
    return this.borrowed({ ptr, bytes: sizeOf(shape) * bytesPerElement(dtype) }, shape, dtype);
  }

  // Kernels, copies and collectives take a buffer's pointer: a slice is a buffer at a later address.
  protected override bufferAt(
    s: DeviceStorage<DeviceBuffer>,
    offset: number,
    length: number,
    bytes: number,
  ): { buffer: DeviceBuffer; offset: number } {
    return { buffer: { ptr: s.buffer.ptr + BigInt(offset * bytes), bytes: length * bytes }, offset: 0 };
  }

  operand(tensor: Tensor): Operand {
    const s = tensor.storage<DeviceStorage<DeviceBuffer>>();
    const { size, shape, dtype } = tensor;
    return { ptr: s.buffer.ptr, size, shape, dtype, byteLength: s.byteLength };
  }

  // The launch is recorded now, as device commands, and enqueued by `run` or a batch.
  protected encodeCall<A extends AttrValues>(
    call: PreparedCall<AnyCudaKernel, A>,
    _spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
  ): RecordedCall {
    const { implementation: kernel, outputs, fresh, attrs, io } = call;
    const recorder = new CommandRecorder(this.driver, this.tuning, this.recordingArena, this.#counters);
    try {
      kernel.launch(recorder, {
        inputs: inputs.map((t) => (t ? this.operand(t) : undefined)),
        outputs: outputs.map((t) => this.operand(t)),
        attrs,
        io,
      });
    } catch (error) {
      this.releaseScratch(recorder.scratchBuffers);
      throw error;
    }
    return { outputs, fresh, io, commands: recorder.commands, scratch: recorder.scratchBuffers };
  }

  protected submitCall(call: RecordedCall): void {
    try {
      this.driver.enqueue(call.commands, this.stream);
    } finally {
      this.releaseScratch(call.scratch);
    }
  }

  /** Returns scratch memory to the pool (stream-ordered reuse, see DevicePool). */
  releaseScratch(buffers: readonly DeviceBuffer[]): void {
    if (this.disposed) return;
    for (const b of buffers) this.driver.free(b);
  }

  protected override createBatch(options: BatchOptions = {}): CommandBatch {
    const from = options.scratchFrom;
    if (from !== undefined && !(from instanceof CudaCommandBatch)) {
      throw new InvalidArgumentError('a batch shares scratch only with a batch of its backend', {
        operation: 'batch',
        argument: 'scratchFrom',
        expected: 'a batch of this cuda backend',
        actual: 'another kind of batch',
      });
    }
    return new CudaCommandBatch(this, from);
  }

  /** Captures commands into a CUDA graph on the backend's stream and instantiates it. */
  captureGraph(commands: readonly DeviceCommand[]): bigint {
    this.checkAlive('submit');
    return this.driver.capture(this.stream, () => this.driver.enqueue(commands, this.stream));
  }

  launchGraph(exec: bigint): void {
    this.checkAlive('submit');
    this.driver.launchGraph(exec, this.stream);
  }

  destroyGraph(exec: bigint): void {
    if (this.disposed || this.driver.lostError) return;
    this.driver.destroyGraph(exec);
  }

  async sync(): Promise<void> {
    this.checkAlive('sync');
    await this.driver.waitIdle(this.stream);
  }

  /** Milliseconds between CUDA events around one launch of a CUDA graph of the work. */
  async deviceTime(work: (runner: KernelRunner) => void): Promise<number | undefined> {
    this.checkAlive('deviceTime');
    return this.#timer.measure(this, work);
  }

  /**
   * Waits for the stream, then frees what the backend holds and releases the
   * primary context (which frees the memory of tensors still alive). Tensors
   * of this backend are unusable afterwards.
   */
  protected override releaseDevice(): void {
    const driver = this.driver;
    if (!driver.lostError) {
      try {
        driver.activate();
        driver.synchronize(this.stream);
        this.#timer.destroy();
        driver.destroyStream(this.stream);
      } catch {
        // Released with the context below.
      }
    }
    this.#timer.clear();
    driver.dispose();
  }
}
