import {
  type AttrValues,
  allocHost,
  type Backend,
  type BackendInfo,
  bytesPerElement,
  type CallSite,
  type CommandBatch,
  checkInputsWritten,
  checkShapeAndDType,
  checkWrite,
  checkWritten,
  copy as copySpec,
  DeviceWeightCache,
  type DType,
  type HostArray,
  hostDataFor,
  InvalidArgumentError,
  type KernelIO,
  type KernelRunner,
  type KernelSpec,
  KernelTable,
  type MemoryStats,
  OutOfMemoryError,
  ownedStorage,
  prepareCall,
  RayoError,
  RecordingBatch,
  type RunOptions,
  type Shape,
  sizeOf,
  Tensor,
  type TensorStorage,
  type WeightCache,
} from '@rayo/core';
import {
  CudaDriver,
  type CudaDriverOptions,
  type DeviceCommand,
  type DriverCounts,
} from './driver/driver.js';
import { libCuda } from './driver/libcuda.js';
import type { DeviceBuffer } from './driver/pool.js';
import { CommandRecorder } from './encoder.js';
import type { AnyCudaKernel, Operand } from './kernel.js';
import { CUDA_KERNELS } from './kernels/index.js';
import { type CudaTuning, type CudaTuningOptions, resolveCudaTuning } from './tuning.js';

class CudaStorage implements TensorStorage {
  #freed = false;
  constructor(
    readonly ptr: bigint,
    readonly byteLength: number,
    private readonly onFree: (() => void) | undefined,
  ) {}
  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.onFree?.();
  }
}

/** One validated kernel call, recorded as device commands. */
export interface RecordedCall {
  readonly outputs: Tensor[];
  /** Outputs allocated for this call (not given, not in place). */
  readonly fresh: readonly Tensor[];
  readonly io: KernelIO;
  readonly commands: readonly DeviceCommand[];
  readonly scratch: readonly DeviceBuffer[];
}

/** The device to open and the tuning switches (see CudaTuningOptions). */
export interface CudaBackendOptions extends CudaDriverOptions, CudaTuningOptions {}

/**
 * The CUDA backend: PTX kernels loaded through the driver API on one device's
 * primary context, all work in order on one stream of its own, tensors in
 * pooled device allocations, and batches replayed as CUDA graphs.
 */
export class CudaBackend implements Backend {
  readonly name = 'cuda';
  readonly info: BackendInfo;
  readonly driver: CudaDriver;
  /** The stream every operation of this backend is ordered on. */
  readonly stream: bigint;
  /** The tuning switches every kernel of this backend sees. */
  readonly tuning: CudaTuning;
  readonly #kernels: KernelTable<AnyCudaKernel>;
  readonly #callSite: CallSite<AnyCudaKernel> = {
    backend: this,
    checkAlive: (api) => this.checkAlive(api),
    implementationOf: (spec) => this.#kernels.get(spec),
    allocate: (api, shape, dtype) => this.#allocate(api, shape, dtype),
  };
  readonly #live = { tensors: 0, bytes: 0, peak: 0, allocations: 0 };
  readonly #timers: { readonly start: bigint; readonly end: bigint }[] = [];
  readonly #freeTimers: { readonly start: bigint; readonly end: bigint }[] = [];
  #disposed = false;

  static async create(options: CudaBackendOptions = {}): Promise<CudaBackend> {
    // Checked before a driver is opened: a wrong switch costs no context.
    resolveCudaTuning(options);
    const lib = options.lib ?? (options.path === undefined ? await libCuda() : undefined);
    const driver = await CudaDriver.open({ ...options, ...(lib ? { lib } : {}) });
    try {
      return new CudaBackend(driver, options);
    } catch (error) {
      driver.dispose();
      throw error;
    }
  }

  constructor(driver: CudaDriver, tuning: CudaTuningOptions = {}) {
    this.tuning = resolveCudaTuning(tuning);
    this.driver = driver;
    this.stream = driver.createStream();
    this.#kernels = new KernelTable('cuda', 'PTX', CUDA_KERNELS);
    const d = driver.device;
    this.info = {
      name: 'cuda',
      device: `${d.name} (${d.arch}, ${d.multiprocessors} SMs)`,
      kind: 'gpu',
      // Kernels refuse operands beyond MAX_ELEMENTS themselves, naming the argument.
      limits: { maxBufferBytes: d.totalMemory },
      features: [d.arch, 'cuda-graphs', 'events'],
    };
  }

  supports(kernel: string, dtype?: DType): boolean {
    return this.#kernels.supports(kernel, dtype);
  }

  /** Module cache and allocation counts of the driver: flat once a workload is warm. */
  counts(): DriverCounts {
    return this.driver.counts();
  }

  /** Throws if the backend was disposed or its context was lost. */
  checkAlive(api: string): void {
    if (this.#disposed) {
      throw new RayoError('backend was disposed', {
        kernel: api,
        expected: 'a live backend',
        actual: 'disposed cuda backend',
      });
    }
    this.driver.live(api);
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  #allocate(api: string, shape: Shape, dtype: DType): Tensor {
    const byteLength = sizeOf(shape) * bytesPerElement(dtype);
    let buffer: DeviceBuffer;
    try {
      buffer = this.driver.alloc(byteLength);
    } catch (error) {
      if (!(error instanceof OutOfMemoryError)) throw error;
      // Name the call and the tensor, not only the driver call.
      throw new OutOfMemoryError(
        `the device could not allocate ${dtype}[${shape.join(', ')}]: ${error.message}`,
        {
          kernel: api,
          expected: `${byteLength} bytes free on the device`,
          actual: 'out of memory',
          cause: error,
        },
      );
    }
    const live = this.#live;
    live.tensors++;
    live.allocations++;
    live.bytes += byteLength;
    live.peak = Math.max(live.peak, live.bytes);
    const storage = new CudaStorage(buffer.ptr, byteLength, () => {
      live.tensors--;
      live.bytes -= byteLength;
      if (!this.#disposed) this.driver.free(buffer);
    });
    return new Tensor(this, shape, dtype, storage);
  }

  upload(data: HostArray | readonly number[], shape: Shape, dtype: DType = 'f32'): Tensor {
    this.checkAlive('upload');
    checkShapeAndDType('upload', shape, dtype);
    const host = hostDataFor('upload', data, shape, dtype);
    const tensor = this.#allocate('upload', shape, dtype);
    try {
      this.#write(tensor.storage<CudaStorage>().ptr, host);
    } catch (error) {
      tensor.dispose();
      throw error;
    }
    return tensor;
  }

  /** Host to device on the stream; the driver stages pageable data before returning. */
  #write(ptr: bigint, host: HostArray): void {
    if (host.byteLength === 0) return;
    this.driver.copyHtoDAsync(ptr, host, host.byteLength, this.stream);
  }

  write(tensor: Tensor, data: HostArray | readonly number[]): void {
    this.checkAlive('write');
    const { storage, data: host } = checkWrite<CudaStorage>(this, tensor, data);
    // Pageable host memory: the driver has copied it out before the call returns.
    this.#write(storage.ptr, host);
  }

  /** Overwrites a tensor's elements with host data, ordered after the work already enqueued. */
  writeHost(tensor: Tensor, data: HostArray | readonly number[]): void {
    this.checkAlive('writeHost');
    const s = this.#own('writeHost', tensor, 'tensor');
    this.#write(s.ptr, hostDataFor('writeHost', data, tensor.shape, tensor.dtype));
  }

  empty(shape: Shape, dtype: DType = 'f32'): Tensor {
    return this.#empty('empty', shape, dtype);
  }

  #empty(api: string, shape: Shape, dtype: DType): Tensor {
    this.checkAlive(api);
    checkShapeAndDType(api, shape, dtype);
    return this.#allocate(api, shape, dtype);
  }

  zeros(shape: Shape, dtype: DType = 'f32'): Tensor {
    const tensor = this.#empty('zeros', shape, dtype);
    const words = Math.ceil(tensor.byteLength / 4);
    if (words > 0) {
      try {
        // Allocations are whole 256-byte buckets, so rounding up to words stays inside.
        this.driver.memsetD32Async(tensor.storage<CudaStorage>().ptr, 0, words, this.stream);
      } catch (error) {
        tensor.dispose();
        throw error;
      }
    }
    return tensor;
  }

  #own(api: string, tensor: Tensor, argument: string): CudaStorage {
    return ownedStorage<CudaStorage>(this, api, tensor, argument);
  }

  /** The device memory behind a tensor, e.g. to hand it to other CUDA code. */
  pointerOf(tensor: Tensor): { readonly ptr: bigint; readonly byteLength: number } {
    const s = this.#own('pointerOf', tensor, 'tensor');
    return { ptr: s.ptr, byteLength: s.byteLength };
  }

  /**
   * Wraps device memory of this backend's context as a tensor without a
   * copy. The caller keeps ownership: disposing the tensor frees nothing.
   */
  importPointer(ptr: bigint, shape: Shape, dtype: DType = 'f32'): Tensor {
    this.checkAlive('importPointer');
    checkShapeAndDType('importPointer', shape, dtype);
    if (typeof ptr !== 'bigint' || ptr <= 0n) {
      throw new InvalidArgumentError('a device address is expected', {
        kernel: 'importPointer',
        argument: 'ptr',
        expected: 'a non-zero bigint device address',
        actual: String(ptr),
      });
    }
    return new Tensor(
      this,
      shape,
      dtype,
      new CudaStorage(ptr, sizeOf(shape) * bytesPerElement(dtype), undefined),
    );
  }

  operand(tensor: Tensor): Operand {
    const s = tensor.storage<CudaStorage>();
    return {
      ptr: s.ptr,
      size: tensor.size,
      shape: tensor.shape,
      dtype: tensor.dtype,
      byteLength: s.byteLength,
    };
  }

  async read(tensor: Tensor): Promise<HostArray> {
    this.checkAlive('read');
    this.#own('read', tensor, 'tensor');
    checkWritten('read', tensor, 'tensor');
    const out = allocHost(tensor.dtype, tensor.size);
    if (tensor.byteLength === 0) return out;
    // Let the stream drain without blocking the event loop; the copy is then
    // ordered after anything enqueued meanwhile and returns once it is done.
    await this.driver.waitIdle(this.stream);
    this.checkAlive('read');
    const s = this.#own('read', tensor, 'tensor');
    this.driver.copyDtoHAsync(out, s.ptr, s.byteLength, this.stream);
    await this.driver.waitIdle(this.stream);
    return out;
  }

  copy(src: Tensor, dst?: Tensor): Tensor {
    return this.run(copySpec, [src], {}, { out: [dst] })[0]!;
  }

  /**
   * Validates, allocates the outputs and records the kernel's commands
   * without enqueueing them. Used by `run`, batches and device timing.
   */
  record<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs: Partial<A> | undefined,
    options: RunOptions | undefined,
  ): RecordedCall {
    const {
      implementation: kernel,
      outputs,
      fresh,
      attrs: resolved,
      io,
    } = prepareCall(this.#callSite, spec, inputs, attrs, options);
    const recorder = new CommandRecorder(this.driver, this.tuning);
    try {
      kernel.launch(recorder, {
        inputs: inputs.map((t) => (t ? this.operand(t) : undefined)),
        outputs: outputs.map((t) => this.operand(t)),
        attrs: resolved,
        io,
      });
    } catch (error) {
      for (const t of fresh) t.dispose();
      this.releaseScratch(recorder.scratchBuffers);
      throw error;
    }
    return { outputs, fresh, io, commands: recorder.commands, scratch: recorder.scratchBuffers };
  }

  /** Returns scratch memory to the pool (stream-ordered reuse, see DevicePool). */
  releaseScratch(buffers: readonly DeviceBuffer[]): void {
    if (this.#disposed) return;
    for (const b of buffers) this.driver.free(b);
  }

  run<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
    options?: RunOptions,
  ): Tensor[] {
    checkInputsWritten(spec, inputs);
    const call = this.record(spec, inputs, attrs, options);
    try {
      this.driver.enqueue(call.commands, this.stream);
    } catch (error) {
      for (const t of call.fresh) t.dispose();
      throw error;
    } finally {
      this.releaseScratch(call.scratch);
    }
    return call.outputs;
  }

  batch(): CommandBatch {
    this.checkAlive('batch');
    return new CudaCommandBatch(this);
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
    if (this.#disposed || this.driver.lostError) return;
    this.driver.destroyGraph(exec);
  }

  async sync(): Promise<void> {
    this.checkAlive('sync');
    await this.driver.waitIdle(this.stream);
  }

  memory(): MemoryStats {
    const l = this.#live;
    return { liveTensors: l.tensors, liveBytes: l.bytes, peakBytes: l.peak, allocations: l.allocations };
  }

  /**
   * Milliseconds between CUDA events around one launch of a CUDA graph of the
   * work: the kernels run back to back as a batch's replay runs them, with no
   * gaps for the host to launch each one. Tensors disposed inside `work` are
   * fine: the graph runs the kernels in the order an eager run would, so
   * memory handed out again is reused in stream order.
   */
  async deviceTime(work: (runner: KernelRunner) => void): Promise<number | undefined> {
    this.checkAlive('deviceTime');
    const calls: RecordedCall[] = [];
    let exec: bigint | undefined;
    // A pair of events per measurement in flight, reused afterwards.
    const timer = this.#freeTimers.pop() ?? this.#newTimer();
    try {
      work({
        run: (spec, inputs, attrs, options) => {
          const call = this.record(spec, inputs, attrs, options);
          calls.push(call);
          return call.outputs;
        },
      });
      const commands = calls.flatMap((c) => c.commands);
      if (commands.length > 0) exec = this.captureGraph(commands);
      this.driver.recordEvent(timer.start, this.stream);
      if (exec !== undefined) this.launchGraph(exec);
      this.driver.recordEvent(timer.end, this.stream);
      await this.driver.waitIdle(this.stream);
      return this.driver.elapsedMs(timer.start, timer.end);
    } finally {
      this.#freeTimers.push(timer);
      if (exec !== undefined) this.destroyGraph(exec);
      for (const call of calls) this.releaseScratch(call.scratch);
    }
  }

  #newTimer(): { readonly start: bigint; readonly end: bigint } {
    const timer = { start: this.driver.createEvent(), end: this.driver.createEvent() };
    this.#timers.push(timer);
    return timer;
  }

  createWeightCache(): WeightCache {
    this.checkAlive('createWeightCache');
    return new DeviceWeightCache({
      backend: this,
      writeHost: (tensor, data) => this.writeHost(tensor, data),
      prefixOf: (base, shape) => this.importPointer(this.pointerOf(base).ptr, shape, base.dtype),
    });
  }

  /**
   * Waits for the stream, then frees what the backend holds and releases the
   * primary context (which frees the memory of tensors still alive). Tensors
   * of this backend are unusable afterwards.
   */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const driver = this.driver;
    if (!driver.lostError) {
      try {
        driver.activate();
        driver.synchronize(this.stream);
        for (const timer of this.#timers) {
          driver.destroyEvent(timer.start);
          driver.destroyEvent(timer.end);
        }
        driver.destroyStream(this.stream);
      } catch {
        // Released with the context below.
      }
    }
    this.#timers.length = 0;
    this.#freeTimers.length = 0;
    driver.dispose();
  }
}

/** What a batch holds on the device, shared with its finalizer (which must not see the batch). */
interface BatchResources {
  exec: bigint | undefined;
  readonly scratch: DeviceBuffer[];
}

function releaseBatch(backend: CudaBackend, resources: BatchResources): void {
  const exec = resources.exec;
  resources.exec = undefined;
  if (exec !== undefined) backend.destroyGraph(exec);
  backend.releaseScratch(resources.scratch.splice(0));
}

// Batches that are dropped without dispose() give their graph and scratch
// memory back when collected.
const batches = new FinalizationRegistry<{ backend: CudaBackend; resources: BatchResources }>(
  ({ backend, resources }) => {
    try {
      releaseBatch(backend, resources);
    } catch {
      // A finalizer has no caller to report to; the context release frees it all.
    }
  },
);

/**
 * Records kernels; the first submit captures all of them into a CUDA graph on
 * the backend's stream, and every submit launches that graph and waits for it
 * (so a second submit replays the work). Recording more after a submit makes
 * the next submit capture again.
 */
export class CudaCommandBatch extends RecordingBatch<RecordedCall> {
  readonly #commands: DeviceCommand[] = [];
  readonly #resources: BatchResources = { exec: undefined, scratch: [] };

  constructor(private readonly backend: CudaBackend) {
    super(backend);
    batches.register(this, { backend, resources: this.#resources }, this);
  }

  protected keep(call: RecordedCall): void {
    this.#commands.push(...call.commands);
    // Graph replays reuse the scratch memory, so the batch keeps it.
    this.#resources.scratch.push(...call.scratch);
    const stale = this.#resources.exec;
    this.#resources.exec = undefined;
    if (stale !== undefined) this.backend.destroyGraph(stale);
  }

  async submit(): Promise<void> {
    this.backend.checkAlive('submit');
    this.calls.checkSubmittable();
    // Kernels of empty tensors record nothing; there is no graph to make of nothing.
    if (this.#commands.length > 0) {
      this.#resources.exec ??= this.backend.captureGraph(this.#commands);
      this.backend.launchGraph(this.#resources.exec);
    }
    // Enqueued: reads of the outputs are ordered after this work now.
    this.calls.submitted();
    await this.backend.sync();
  }

  /** Destroys the graph and returns the batch's scratch memory; the batch is empty afterwards. */
  dispose(): void {
    batches.unregister(this);
    this.#commands.length = 0;
    this.calls.clear();
    releaseBatch(this.backend, this.#resources);
  }
}
