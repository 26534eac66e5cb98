import {
  type AnyKernelSpec,
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
  DeviceLostError,
  DeviceWeightCache,
  type DType,
  type HostArray,
  hostDataFor,
  InvalidArgumentError,
  inputName,
  type KernelRunner,
  type KernelSpec,
  KernelTable,
  type MemoryStats,
  OutOfMemoryError,
  ownedStorage,
  prepareCall,
  RayoError,
  type RunOptions,
  type Shape,
  ShapeError,
  sizeOf,
  Tensor,
  type TensorStorage,
  UnsupportedOnBackendError,
  type WeightCache,
} from '@rayo/core';
import { WgpuCommandBatch, type WgpuRecordedCall } from './batch.js';
import { BufferPool } from './buffers.js';
import { type AttributedError, CallErrors, reportedError } from './callErrors.js';
import { describeAdapter, requestWgpuDevice, type WgpuDevice } from './device.js';
import { CommandRecorder, type Recording } from './encoder.js';
import type { AnyWgpuKernel, Operand, SubgroupMatrixSupport } from './kernel.js';
import { WGPU_KERNELS } from './kernels/index.js';
import { DeviceMemory, type MemoryRecovery } from './memory.js';
import {
  type ResolvedBackendOptions,
  resolveBackendOptions,
  type WgpuBackendOptions,
  type WgpuObjectCounts,
} from './options.js';
import { ParamArena } from './params.js';
import { PipelineCache } from './pipelines.js';
import type { WgpuTuning } from './tuning.js';
import { UploadStaging } from './upload.js';

const STORAGE_USAGE = GPUBufferUsageFlagsOf('STORAGE', 'COPY_SRC', 'COPY_DST');

// GPUBufferUsage is a global only once Dawn (or a browser) is loaded, so the
// flags are computed lazily.
function GPUBufferUsageFlagsOf(...names: (keyof GPUBufferUsage)[]): () => number {
  return () => names.reduce((flags, n) => flags | (GPUBufferUsage[n] as number), 0);
}

class WgpuStorage implements TensorStorage {
  #freed = false;
  constructor(
    // Replaced only when a refused allocation is granted on a retry, before anything used it.
    public buffer: GPUBuffer,
    readonly byteLength: number,
    readonly offset: number,
    private readonly onFree: ((s: WgpuStorage) => void) | undefined,
  ) {}
  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.onFree?.(this);
  }
}

// The options and counts are declared with the options' checks; the package entry exports them from here.
export type { WgpuBackendOptions, WgpuObjectCounts } from './options.js';

/**
 * The WebGPU backend: WGSL kernels for every spec, one submission per eager
 * call or per batch, pooled buffers and uniform parameters.
 */
export class WgpuBackend implements Backend {
  readonly name = 'wgpu';
  readonly info: BackendInfo;
  readonly gpu: WgpuDevice;
  readonly device: GPUDevice;
  readonly pipelines: PipelineCache;
  readonly #params: ParamArena;
  readonly #storage: BufferPool;
  readonly #staging: BufferPool;
  readonly #scratch: BufferPool;
  readonly #uploads: UploadStaging;
  readonly #kernels: KernelTable<AnyWgpuKernel>;
  readonly #callErrors: CallErrors;
  readonly #ownsDevice: boolean;
  readonly #memory: DeviceMemory;
  #live = { tensors: 0, bytes: 0, peak: 0, allocations: 0 };
  #bindGroups = 0;
  #commandBuffers = 0;
  readonly #batchFirstPart: number;
  #disposed = false;
  readonly #subgroupMatrix: SubgroupMatrixSupport | undefined;
  /** A tiny buffer cleared by the queue rounds that push freed memory back to the driver. */
  readonly #releaseFence: GPUBuffer;

  /**
   * Largest byte range one storage binding covers here (the device's
   * `maxStorageBufferBindingSize`, or the lower `maxBindingBytes` option).
   * Kernels bind larger operands in pieces, or refuse them by name.
   */
  readonly maxBindingBytes: number;
  /** The tuning switches every kernel of this backend sees. */
  readonly tuning: WgpuTuning;

  static async create(options: WgpuBackendOptions = {}): Promise<WgpuBackend> {
    const resolved = resolveBackendOptions(options);
    return new WgpuBackend(await requestWgpuDevice(options), options.device === undefined, resolved);
  }

  private constructor(gpu: WgpuDevice, ownsDevice: boolean, options: ResolvedBackendOptions) {
    this.gpu = gpu;
    this.#subgroupMatrix =
      gpu.subgroupMatrixConfigs.length > 0
        ? {
            configs: gpu.subgroupMatrixConfigs,
            subgroupSize: gpu.subgroupSizes.max,
            minSubgroupSize: gpu.subgroupSizes.min,
          }
        : undefined;
    this.#batchFirstPart = options.batchFirstPart;
    this.tuning = options.tuning;
    this.device = gpu.device;
    this.#ownsDevice = ownsDevice;
    this.pipelines = new PipelineCache(this.device);
    this.#params = new ParamArena(this.device);
    this.#memory = new DeviceMemory(this.device, options.memoryBudgetBytes);
    this.#callErrors = new CallErrors(this.device);
    // Made up front: once the device is full, even a small buffer may be refused.
    this.#releaseFence = this.device.createBuffer({
      label: 'rayo release fence',
      size: 4,
      usage: GPUBufferUsage.COPY_DST,
    });
    this.#memory.setQueueRound(() => {
      // A real command, so that the submission takes a new serial.
      const encoder = this.device.createCommandEncoder();
      encoder.clearBuffer(this.#releaseFence);
      this.device.queue.submit([encoder.finish()]);
      return this.#deviceWait('release', this.device.queue.onSubmittedWorkDone());
    });
    this.#storage = new BufferPool(this.#memory, STORAGE_USAGE(), 'rayo tensor');
    this.#staging = new BufferPool(
      this.#memory,
      GPUBufferUsageFlagsOf('MAP_READ', 'COPY_DST')(),
      'rayo staging',
    );
    this.#scratch = new BufferPool(this.#memory, STORAGE_USAGE(), 'rayo scratch');
    this.#uploads = new UploadStaging(this.#memory, options.uploadStagingBytes);
    this.#kernels = new KernelTable('wgpu', 'WGSL', WGPU_KERNELS);
    const limits = this.device.limits;
    this.maxBindingBytes = Math.min(
      options.maxBindingBytes ?? Number.POSITIVE_INFINITY,
      limits.maxStorageBufferBindingSize,
    );
    this.info = {
      name: 'wgpu',
      device: describeAdapter(gpu.adapterInfo),
      kind: 'gpu',
      limits: { maxBufferBytes: limits.maxBufferSize },
      features: [...gpu.features].sort(),
    };
  }

  supports(kernel: string, dtype?: DType): boolean {
    return this.#kernels.supports(kernel, dtype);
  }

  /** Command buffers submitted so far by eager calls and batches (a batch submits several: `batchFirstPart`). */
  get commandBuffersSubmitted(): number {
    return this.#commandBuffers;
  }

  /** How many GPU objects of each kind were created so far. */
  objectCounts(): WgpuObjectCounts {
    return {
      pipelines: this.pipelines.stats,
      paramBuffers: this.#params.buffersCreated,
      storageBuffers: this.#storage.created,
      stagingBuffers: this.#staging.created,
      scratchBuffers: this.#scratch.created,
      uploadStagingBuffers: this.#uploads.created,
      bindGroups: this.#bindGroups,
    };
  }

  /**
   * Bytes of GPU buffers held now (tensors, pools, staging) and the budget
   * they are held to; `recovery` says how memory was got back after the
   * device refused an allocation.
   */
  deviceMemory(): {
    readonly usedBytes: number;
    readonly budgetBytes: number;
    readonly recovery: MemoryRecovery;
  } {
    const m = this.#memory;
    return { usedBytes: m.usedBytes, budgetBytes: m.budgetBytes, recovery: m.recovery };
  }

  /** One line on how memory was got back after refusals, for reports. */
  describeMemoryRecovery(): string {
    const r = this.#memory.recovery;
    return `${r.releases} release(s) of freed memory in ${r.waits} queue wait(s); ${r.retried} refused allocation(s) retried, ${r.recovered} granted`;
  }

  /** Throws what the device reported since the last check (validation, out of memory). */
  async #reported(api: string): Promise<void> {
    // After a refusal, what the caller freed reaches the driver before it allocates again.
    await this.#memory.release();
    const { refused, retried } = await this.#memory.takeReport(api);
    const errors: AttributedError[] = await this.#callErrors.take();
    for (const error of this.gpu.takeErrors()) errors.push({ error, call: undefined });
    this.#checkAlive(api);
    // Errors after a refused allocation are its consequences (an invalid buffer
    // bound or cleared), also when a retry has granted it since.
    if (refused) throw refused;
    if (retried > 0) return;
    if (errors.length === 0) return;
    throw reportedError(api, errors);
  }

  #checkAlive(api: string): void {
    const lost = this.gpu.lostError();
    if (lost) throw lost;
    if (this.#disposed) {
      throw new RayoError('backend was disposed', {
        kernel: api,
        expected: 'a live backend',
        actual: 'disposed wgpu backend',
      });
    }
  }

  #allocate(api: string, shape: Shape, dtype: DType): Tensor {
    const byteLength = sizeOf(shape) * bytesPerElement(dtype);
    const buffer = this.#storage.acquire(byteLength, api);
    const live = this.#live;
    live.tensors++;
    live.allocations++;
    live.bytes += byteLength;
    live.peak = Math.max(live.peak, live.bytes);
    const storage = new WgpuStorage(buffer, byteLength, 0, (s) => {
      live.tensors--;
      live.bytes -= s.byteLength;
      if (!this.#disposed) this.#storage.release(s.buffer);
    });
    // Nothing is in it yet: if the device refuses it, it can be created again.
    this.#memory.retriable(buffer, (replacement) => {
      storage.buffer = replacement;
    });
    return new Tensor(this, shape, dtype, storage);
  }

  upload(data: HostArray | readonly number[], shape: Shape, dtype: DType = 'f32'): Tensor {
    this.#checkAlive('upload');
    checkShapeAndDType('upload', shape, dtype);
    const host = hostDataFor('upload', data, shape, dtype);
    const tensor = this.#allocate('upload', shape, dtype);
    this.#writeHost(tensor.storage<WgpuStorage>(), host);
    return tensor;
  }

  write(tensor: Tensor, data: HostArray | readonly number[]): void {
    this.#checkAlive('write');
    const { storage, data: host } = checkWrite<WgpuStorage>(this, tensor, data);
    // Kernels are submitted when they are run or a batch is submitted, and
    // queue writes take the data at the call, in queue order with those submits.
    this.#writeHost(storage, host);
  }

  #writeHost(storage: WgpuStorage, host: HostArray): void {
    const bytes = host.byteLength;
    if (bytes === 0) return;
    this.#memory.touch(storage.buffer);
    if (bytes % 4 === 0) this.#uploads.write(storage.buffer, storage.offset, host);
    else {
      // Copies and writeBuffer sizes must be multiples of 4 (odd-length 16-bit data).
      const padded = new Uint8Array(Math.ceil(bytes / 4) * 4);
      padded.set(new Uint8Array(host.buffer, host.byteOffset, bytes));
      this.#uploads.write(storage.buffer, storage.offset, padded);
    }
  }

  /**
   * Wraps an existing GPUBuffer (created on this device with STORAGE usage,
   * plus COPY_SRC to be read) as a tensor without a copy. The caller keeps
   * ownership: disposing the tensor does not destroy the buffer.
   */
  importBuffer(buffer: GPUBuffer, shape: Shape, dtype: DType = 'f32', byteOffset = 0): Tensor {
    this.#checkAlive('importBuffer');
    checkShapeAndDType('importBuffer', shape, dtype);
    const byteLength = sizeOf(shape) * bytesPerElement(dtype);
    const alignment = this.device.limits.minStorageBufferOffsetAlignment;
    if (!Number.isInteger(byteOffset) || byteOffset % alignment !== 0) {
      throw new InvalidArgumentError('storage bindings must start at an aligned offset', {
        kernel: 'importBuffer',
        argument: 'byteOffset',
        expected: `a multiple of ${alignment} (minStorageBufferOffsetAlignment)`,
        actual: String(byteOffset),
      });
    }
    if (byteOffset + byteLength > buffer.size) {
      throw new ShapeError('the buffer is too small for the shape at this offset', {
        kernel: 'importBuffer',
        argument: 'buffer',
        expected: `>= ${byteOffset + byteLength} bytes`,
        actual: `${buffer.size} bytes`,
      });
    }
    if (!(buffer.usage & GPUBufferUsage.STORAGE)) {
      throw new InvalidArgumentError('the buffer cannot be bound as storage', {
        kernel: 'importBuffer',
        argument: 'buffer',
        expected: 'usage including STORAGE',
        actual: `usage ${buffer.usage}`,
      });
    }
    return new Tensor(this, shape, dtype, new WgpuStorage(buffer, byteLength, byteOffset, undefined));
  }

  /** The GPU buffer range behind a tensor, e.g. to hand it to other WebGPU code. */
  bufferOf(tensor: Tensor): { buffer: GPUBuffer; offset: number; size: number } {
    const s = this.#own('bufferOf', tensor, 'tensor');
    this.#memory.touch(s.buffer);
    return { buffer: s.buffer, offset: s.offset, size: s.byteLength };
  }

  empty(shape: Shape, dtype: DType = 'f32'): Tensor {
    return this.#empty('empty', shape, dtype);
  }

  #empty(api: string, shape: Shape, dtype: DType): Tensor {
    this.#checkAlive(api);
    checkShapeAndDType(api, shape, dtype);
    return this.#allocate(api, shape, dtype);
  }

  zeros(shape: Shape, dtype: DType = 'f32'): Tensor {
    const t = this.#empty('zeros', shape, dtype);
    const { buffer } = t.storage<WgpuStorage>();
    this.#callErrors.scoped('zeros', () => {
      const encoder = this.device.createCommandEncoder();
      encoder.clearBuffer(buffer, 0, Math.ceil(t.byteLength / 4) * 4 || undefined);
      this.device.queue.submit([encoder.finish()]);
    });
    return t;
  }

  #own(api: string, tensor: Tensor, argument: string): WgpuStorage {
    return ownedStorage<WgpuStorage>(this, api, tensor, argument);
  }

  operand(tensor: Tensor): Operand {
    const s = tensor.storage<WgpuStorage>();
    this.#memory.touch(s.buffer);
    if (this.#memory.failed(s.buffer)) {
      throw new OutOfMemoryError('the device could not allocate this tensor; it holds no memory', {
        expected: 'a tensor whose allocation succeeded',
        actual: `${tensor.describe()} (allocation refused)`,
      });
    }
    return {
      buffer: s.buffer,
      offset: s.offset,
      size: tensor.size,
      shape: tensor.shape,
      dtype: tensor.dtype,
    };
  }

  /**
   * The tensor's values as of this call: the copy to a staging buffer is
   * enqueued before `read` returns, after the work submitted so far and
   * before anything submitted later, so that a caller can read one step's
   * result while the next step runs.
   */
  async read(tensor: Tensor): Promise<HostArray> {
    this.#checkAlive('read');
    const s = this.#own('read', tensor, 'tensor');
    checkWritten('read', tensor, 'tensor');
    const bytes = Math.ceil(s.byteLength / 4) * 4;
    const out = allocHost(tensor.dtype, tensor.size);
    if (bytes === 0) {
      await this.#reported('read');
      return out;
    }
    this.#memory.touch(s.buffer);
    const staging = this.#staging.acquire(bytes, 'read');
    try {
      const encoder = this.device.createCommandEncoder();
      encoder.copyBufferToBuffer(s.buffer, s.offset, staging, 0, bytes);
      this.device.queue.submit([encoder.finish()]);
      this.#commandBuffers++;
      // Errors of earlier work (a kernel that failed to compile, a refused
      // allocation) are reported before the values, which they may have spoilt.
      await this.pipelines.settle();
      await this.#reported('read');
      await this.#deviceWait('read', staging.mapAsync(GPUMapMode.READ, 0, bytes));
      new Uint8Array(out.buffer, out.byteOffset, s.byteLength).set(
        new Uint8Array(staging.getMappedRange(0, bytes), 0, s.byteLength),
      );
      staging.unmap();
      await this.#reported('read');
    } finally {
      if (staging.mapState === 'unmapped') this.#staging.release(staging);
    }
    return out;
  }

  copy(src: Tensor, dst?: Tensor): Tensor {
    return this.run(copySpec, [src], {}, { out: [dst] })[0]!;
  }

  readonly #callSite: CallSite<AnyWgpuKernel> = {
    backend: this,
    checkAlive: (api) => this.#checkAlive(api),
    implementationOf: (spec) => this.#kernels.get(spec),
    allocate: (api, shape, dtype) => this.#allocate(api, shape, dtype),
    checkCall: (kernel, spec, inputs, outputs) => {
      if (!kernel.splitsLargeOperands) this.#checkBindable(spec, inputs, outputs);
    },
  };

  /** Validates, allocates outputs and returns the work to encode. */
  record<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs: Partial<A> | undefined,
    options: RunOptions | undefined,
  ): WgpuRecordedCall<A> {
    const call = prepareCall(this.#callSite, spec, inputs, attrs, options);
    const { implementation: kernel, outputs } = call;
    const encode = (recorder: CommandRecorder) => {
      kernel.encode(recorder, {
        inputs: inputs.map((t) => (t ? this.operand(t) : undefined)),
        outputs: outputs.map((t) => this.operand(t)),
        attrs: call.attrs,
        io: call.io,
      });
    };
    return { ...call, encode };
  }

  // A kernel that cannot split its operands must not see one larger than a
  // binding: refuse it by name instead of computing on a truncated view.
  #checkBindable(
    spec: AnyKernelSpec,
    inputs: readonly (Tensor | undefined)[],
    outputs: readonly { name: string; shape: Shape; dtype: DType }[],
  ): void {
    const kernel = spec.name;
    const check = (argument: string, bytes: number) => {
      if (bytes > this.maxBindingBytes) {
        throw new UnsupportedOnBackendError(
          'operand larger than one storage binding, and this kernel cannot split it',
          {
            kernel,
            argument,
            expected: `<= ${this.maxBindingBytes} bytes (maxStorageBufferBindingSize)`,
            actual: `${bytes} bytes`,
          },
        );
      }
    };
    inputs.forEach((t, i) => {
      if (t) check(inputName(spec, i), t.byteLength);
    });
    for (const o of outputs) check(o.name, sizeOf(o.shape) * bytesPerElement(o.dtype));
  }

  /** Encodes work into one command buffer and submits it; resolves when the GPU finished. */
  submitWork(encodeAll: (recorder: CommandRecorder) => void): Promise<void> {
    return this.#submit(this.#recordWork(encodeAll));
  }

  /** Resolves every dispatch `encodeAll` records to a pipeline and a bind group. */
  #recordWork(encodeAll: (recorder: CommandRecorder) => void): Recording {
    const recorder = new CommandRecorder(
      this.device,
      this.gpu.features,
      this.pipelines,
      this.#params.begin(),
      this.#scratch,
      this.maxBindingBytes,
      this.tuning,
      this.#subgroupMatrix,
    );
    try {
      encodeAll(recorder);
    } catch (error) {
      recorder.abandon();
      throw error;
    }
    const recording = recorder.finish();
    this.#bindGroups += recording.bindGroups;
    return recording;
  }

  /**
   * Submits a recording whose parameter chunks and scratch buffers are held;
   * they go back to their pools when the GPU finished.
   */
  #submit(recording: Recording, inParts = false): Promise<void> {
    this.#checkAlive('submit');
    recording.params.flush(this.device.queue);
    recording.submitted();
    try {
      if (inParts && this.#batchFirstPart > 0) {
        this.#commandBuffers += recording.submitInParts(this.device, this.#batchFirstPart);
      } else {
        this.device.queue.submit([recording.encode(this.device)]);
        this.#commandBuffers++;
      }
    } catch (error) {
      recording.release();
      throw error;
    }
    const done = this.device.queue.onSubmittedWorkDone().then(() => recording.release());
    return this.#deviceWait('submit', done);
  }

  /**
   * `work` raced against the loss of the device: a lost device rejects it with
   * a DeviceLostError at once, and so does work that failed because of the loss.
   */
  async #deviceWait<T>(api: string, work: Promise<T>): Promise<T> {
    let value: T;
    try {
      value = await Promise.race([work, this.gpu.lost]);
    } catch (error) {
      if (error instanceof RayoError) throw error;
      // Dawn rejects pending maps of a destroyed device before reporting the loss.
      const lost = await Promise.race([
        this.gpu.lost.catch((e: unknown) => e),
        new Promise((resolve) => setTimeout(resolve, 100)),
      ]);
      if (lost instanceof DeviceLostError) throw lost;
      throw new RayoError(`the device failed: ${(error as Error)?.message || String(error)}`, {
        kernel: api,
        cause: error,
      });
    }
    this.#checkAlive(api);
    return value;
  }

  run<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
    options?: RunOptions,
  ): Tensor[] {
    checkInputsWritten(spec, inputs);
    const { outputs, fresh, encode } = this.record(spec, inputs, attrs, options);
    let done: Promise<void>;
    try {
      done = this.#callErrors.scoped(spec.name, () => this.submitWork(encode));
    } catch (error) {
      for (const t of fresh) t.dispose();
      throw error;
    }
    done.catch(() => {});
    return outputs;
  }

  batch(): CommandBatch {
    this.#checkAlive('batch');
    return new WgpuCommandBatch(this, {
      record: (encodeAll) => this.#recordWork(encodeAll),
      submit: (recording) => this.#submit(recording, true),
      scoped: (call, work) => this.#callErrors.scoped(call, work),
    });
  }

  /**
   * Reports what earlier work went wrong (a pipeline that did not compile, a
   * refused allocation, a validation error) without waiting for the queue.
   */
  async settle(api: string): Promise<void> {
    this.#checkAlive(api);
    await this.pipelines.settle();
    await this.#reported(api);
  }

  async sync(): Promise<void> {
    this.#checkAlive('sync');
    this.#callErrors.restartCount();
    await this.pipelines.settle();
    await this.#deviceWait(
      'sync',
      Promise.all([this.device.queue.onSubmittedWorkDone(), this.#uploads.settle()]),
    );
    await this.#reported('sync');
  }

  memory(): MemoryStats {
    const l = this.#live;
    return { liveTensors: l.tensors, liveBytes: l.bytes, peakBytes: l.peak, allocations: l.allocations };
  }

  #timer: { querySet: GPUQuerySet; resolve: GPUBuffer } | undefined;

  async deviceTime(work: (runner: KernelRunner) => void): Promise<number | undefined> {
    this.#checkAlive('deviceTime');
    if (!this.gpu.features.has('timestamp-query')) return undefined;
    this.#timer ??= {
      querySet: this.device.createQuerySet({ type: 'timestamp', count: 2 }),
      resolve: this.device.createBuffer({
        size: 16,
        usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
      }),
    };
    const { querySet, resolve } = this.#timer;
    const staging = this.#staging.acquire(16, 'deviceTime');
    await this.submitWork((recorder) => {
      recorder.timestamp(querySet, 0);
      work({
        run: (spec, inputs, attrs, options) => {
          const { outputs, encode } = this.record(spec, inputs, attrs, options);
          encode(recorder);
          return outputs;
        },
      });
      recorder.timestamp(querySet, 1);
      recorder.encodeDirect((encoder) => {
        encoder.resolveQuerySet(querySet, 0, 2, resolve, 0);
        encoder.copyBufferToBuffer(resolve, 0, staging, 0, 16);
      });
    });
    await this.pipelines.settle();
    await this.#deviceWait('deviceTime', staging.mapAsync(GPUMapMode.READ, 0, 16));
    const [begin, end] = new BigUint64Array(staging.getMappedRange(0, 16).slice(0));
    staging.unmap();
    this.#staging.release(staging);
    return Number(end! - begin!) / 1e6;
  }

  createWeightCache(): WeightCache {
    this.#checkAlive('createWeightCache');
    return new DeviceWeightCache({
      backend: this,
      writeHost: (tensor, data) => {
        const { buffer, offset } = this.bufferOf(tensor);
        this.#uploads.write(buffer, offset, data);
      },
      prefixOf: (base, shape) => {
        const { buffer, offset } = this.bufferOf(base);
        return this.importBuffer(buffer, shape, base.dtype, offset);
      },
    });
  }

  /** Staging buffers for readbacks, shared with the weight cache. */
  get stagingPool(): BufferPool {
    return this.#staging;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#storage.trim();
    this.#staging.trim();
    this.#scratch.trim();
    this.#uploads.dispose();
    this.#params.destroy();
    this.#releaseFence.destroy();
    this.#timer?.querySet.destroy();
    this.#timer?.resolve.destroy();
    if (this.#ownsDevice) this.device.destroy();
    // Releasing Dawn's instance lets the process exit.
    this.gpu.gpu = undefined;
  }
}
