import {
  type AllocatorStats,
  type AnyKernelSpec,
  type AttrValues,
  type BackendInfo,
  BackendSkeleton,
  bytesPerElement,
  type CommandBatch,
  checkShapeAndDType,
  type DeviceStorage,
  type DType,
  type HostArray,
  InvalidArgumentError,
  type KernelRunner,
  type KernelSpec,
  KernelTable,
  type OutputMeta,
  type PreparedCall,
  type Shape,
  sizeOf,
  type Tensor,
} from '@rayo/core';
import { batchOnQueue, type WgpuRecordedCall } from './batch.js';
import type { BufferPool } from './buffers.js';
import { requestWgpuDevice, type WgpuDevice, wgpuBackendInfo } from './device.js';
import { DeviceTimer } from './deviceTime.js';
import type { AnyWgpuKernel, Operand } from './kernel.js';
import { WGPU_KERNELS } from './kernels/index.js';
import type { MemoryUsage } from './memory.js';
import { checkBindable, checkImportedBuffer } from './operandChecks.js';
import {
  type ResolvedBackendOptions,
  resolveBackendOptions,
  type WgpuBackendOptions,
  type WgpuObjectCounts,
} from './options.js';
import { devicePartChecksums } from './partChecksums.js';
import type { PipelineCache } from './pipelines.js';
import { WgpuQueue } from './queue.js';
import type { WgpuTuning } from './tuning.js';
import type { GPUBuffer, GPUDevice } from './webgpuTypes.js';

// The options and counts are declared with the options' checks; the package entry exports them from here.
export type { WgpuBackendOptions, WgpuObjectCounts } from './options.js';

/**
 * The WebGPU backend: WGSL kernels for every spec, one submission per eager
 * call or per batch, pooled buffers and uniform parameters. Its hooks on the
 * core skeleton allocate pooled GPU buffers and hand work to its queue.
 */
export class WgpuBackend extends BackendSkeleton<GPUBuffer, AnyWgpuKernel, WgpuRecordedCall> {
  readonly name = 'wgpu';
  readonly info: BackendInfo;
  readonly gpu: WgpuDevice;
  readonly device: GPUDevice;
  readonly pipelines: PipelineCache;
  /**
   * Largest byte range one storage binding covers here (the device's
   * `maxStorageBufferBindingSize`, or the lower `maxBindingBytes` option).
   * Kernels bind larger operands in pieces, or refuse them by name.
   */
  readonly maxBindingBytes: number;
  /** The tuning switches every kernel of this backend sees. */
  readonly tuning: WgpuTuning;
  readonly #queue: WgpuQueue;
  readonly #timer: DeviceTimer;
  readonly #ownsDevice: boolean;

  static async create(options: WgpuBackendOptions = {}): Promise<WgpuBackend> {
    const resolved = resolveBackendOptions(options);
    return new WgpuBackend(await requestWgpuDevice(options), options.device === undefined, resolved);
  }

  private constructor(gpu: WgpuDevice, ownsDevice: boolean, options: ResolvedBackendOptions) {
    super(new KernelTable('wgpu', 'WGSL', WGPU_KERNELS));
    this.gpu = gpu;
    this.device = gpu.device;
    this.#ownsDevice = ownsDevice;
    this.tuning = options.tuning;
    const deviceMax = this.device.limits.maxStorageBufferBindingSize;
    this.maxBindingBytes = Math.min(options.maxBindingBytes ?? deviceMax, deviceMax);
    this.#queue = new WgpuQueue(gpu, { ...options, maxBindingBytes: this.maxBindingBytes }, (api) =>
      this.checkAlive(api),
    );
    this.pipelines = this.#queue.pipelines;
    this.#timer = new DeviceTimer(this.#queue);
    this.info = wgpuBackendInfo(gpu);
  }

  /** Command buffers submitted so far by eager calls and batches (a batch submits several: `batchFirstPart`). */
  get commandBuffersSubmitted(): number {
    return this.#queue.commandBuffers;
  }

  /** How many GPU objects of each kind were created so far. */
  objectCounts(): WgpuObjectCounts {
    return this.#queue.objectCounts();
  }

  /** Bytes of GPU buffers held (tensors, caches, staging), the budget, and how refusals were recovered. */
  deviceMemory(): MemoryUsage {
    return this.#queue.memory.usage();
  }

  /** One line on how memory was got back after refusals, for reports. */
  describeMemoryRecovery(): string {
    return this.#queue.memory.describeRecovery();
  }

  override checkAlive(api: string): void {
    const lost = this.gpu.lostError();
    if (lost) throw lost;
    super.checkAlive(api);
  }

  protected allocateBuffer(api: string, byteLength: number): GPUBuffer {
    return this.#queue.buffers.acquire(byteLength, api);
  }

  // Nothing is in it yet: if the device refuses it, it can be created again.
  protected override allocated(storage: DeviceStorage<GPUBuffer>): void {
    this.#queue.buffers.retriable(storage);
  }

  protected freeBuffer(storage: DeviceStorage<GPUBuffer>): void {
    this.#queue.buffers.release(storage.buffer);
  }

  protected override allocatorStats(): AllocatorStats {
    return this.#queue.buffers.stats();
  }

  protected override releaseCache(): void {
    this.#queue.emptyCache();
  }

  protected override resetAllocatorPeaks(): void {
    this.#queue.buffers.resetPeaks();
  }

  // Kernels are submitted when they are run or a batch is submitted, and
  // queue writes take the data at the call, in queue order with those submits.
  protected writeStorage(storage: DeviceStorage<GPUBuffer>, host: HostArray): void {
    this.#queue.write(storage.buffer, storage.offset, host);
  }

  /**
   * The tensor's values as of this call, so that a caller can read one step's
   * result while the next step runs.
   */
  protected readStorage(tensor: Tensor, s: DeviceStorage<GPUBuffer>): Promise<HostArray> {
    return this.#queue.read(s.buffer, s.offset, s.byteLength, tensor.dtype, tensor.size);
  }

  protected clearStorage(tensor: Tensor, storage: DeviceStorage<GPUBuffer>): void {
    this.#queue.clear('zeros', storage.buffer, tensor.byteLength);
  }

  /**
   * Wraps an existing GPUBuffer (created on this device with STORAGE usage,
   * plus COPY_SRC to be read) as a tensor without a copy. The caller keeps
   * ownership: disposing the tensor does not destroy the buffer.
   */
  importBuffer(buffer: GPUBuffer, shape: Shape, dtype: DType = 'f32', byteOffset = 0): Tensor {
    this.checkAlive('importBuffer');
    checkShapeAndDType('importBuffer', shape, dtype);
    checkImportedBuffer(this.device, buffer, sizeOf(shape) * bytesPerElement(dtype), byteOffset);
    return this.borrowed(buffer, shape, dtype, byteOffset);
  }

  /** The GPU buffer range behind a tensor, e.g. to hand it to other WebGPU code. */
  bufferOf(tensor: Tensor): { buffer: GPUBuffer; offset: number; size: number } {
    const s = this.own('bufferOf', tensor, 'tensor');
    this.#queue.memory.touch(s.buffer);
    return { buffer: s.buffer, offset: s.offset, size: s.byteLength };
  }

  /**
   * Core's part checksums (`partChecksumReference`) of the tensors' bytes,
   * computed on the device after everything submitted before: a model
   * cache checks its kept weights where they were uploaded.
   */
  partChecksums(tensors: readonly Tensor[]): Promise<Uint32Array> {
    this.checkAlive('partChecksums');
    const ranges = tensors.map((tensor) => {
      const { buffer, offset, size } = this.bufferOf(tensor);
      return { buffer, offset, bytes: size };
    });
    return devicePartChecksums(this.device, ranges, this.maxBindingBytes);
  }

  /** How kernels see a tensor; throws for one whose allocation the device refused. */
  operand(tensor: Tensor): Operand {
    return this.#queue.operand(tensor);
  }

  protected override checkOperands(
    kernel: AnyWgpuKernel,
    spec: AnyKernelSpec,
    inputs: readonly (Tensor | undefined)[],
    outputs: readonly OutputMeta[],
  ): void {
    if (!kernel.splitsLargeOperands) checkBindable(this.maxBindingBytes, spec, inputs, outputs);
  }

  // Operands are resolved when the work is encoded: a batch encodes at its first submit.
  protected encodeCall<A extends AttrValues>(
    call: PreparedCall<AnyWgpuKernel, A>,
    _spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
  ): WgpuRecordedCall<A> {
    const { implementation: kernel, outputs } = call;
    const encode: WgpuRecordedCall['encode'] = (recorder) => {
      kernel.encode(recorder, {
        inputs: inputs.map((t) => (t ? this.operand(t) : undefined)),
        outputs: outputs.map((t) => this.operand(t)),
        attrs: call.attrs,
        io: call.io,
      });
    };
    return { ...call, encode };
  }

  protected submitCall(call: WgpuRecordedCall, spec: AnyKernelSpec): void {
    const done = this.#queue.callErrors.scoped(spec.name, () => this.#queue.submitWork(call.encode));
    // Failures are reported by the next read, sync or submit.
    done.catch(() => {});
  }

  protected override createBatch(): CommandBatch {
    return batchOnQueue(this, this.#queue);
  }

  /**
   * Reports what earlier work went wrong (a pipeline that did not compile, a
   * refused allocation, a validation error) without waiting for the queue.
   */
  settle(api: string): Promise<void> {
    return this.#queue.settle(api);
  }

  sync(): Promise<void> {
    return this.#queue.sync();
  }

  async deviceTime(work: (runner: KernelRunner) => void): Promise<number | undefined> {
    this.checkAlive('deviceTime');
    if (!this.gpu.features.has('timestamp-query')) return undefined;
    return this.#timer.measure(this, work);
  }

  // Bindings take a buffer at an offset that is a multiple of the device's alignment.
  protected override bufferAt(
    s: DeviceStorage<GPUBuffer>,
    offset: number,
    _length: number,
    bytes: number,
  ): { buffer: GPUBuffer; offset: number } {
    const at = s.offset + offset * bytes;
    const align = this.device.limits.minStorageBufferOffsetAlignment;
    if (at % align !== 0) {
      throw new InvalidArgumentError('wgpu binds a slice only at an aligned byte offset', {
        operation: 'Tensor.slice',
        argument: 'offset',
        expected: `a byte offset that is a multiple of ${align} (minStorageBufferOffsetAlignment)`,
        actual: `${at} bytes`,
      });
    }
    this.#queue.memory.touch(s.buffer);
    return { buffer: s.buffer, offset: at };
  }

  // Through bufferOf: a buffer lent out is no longer swapped for a retried allocation.
  protected override prefixOf(base: Tensor, shape: Shape): Tensor {
    const { buffer, offset } = this.bufferOf(base);
    return this.importBuffer(buffer, shape, base.dtype, offset);
  }

  /** Staging buffers for readbacks, shared with the weight cache. */
  get stagingPool(): BufferPool {
    return this.#queue.staging;
  }

  protected override releaseDevice(): void {
    this.#queue.dispose();
    this.#timer.dispose();
    if (this.#ownsDevice) this.device.destroy();
    // Releasing Dawn's instance lets the process exit.
    this.gpu.gpu = undefined;
  }
}
