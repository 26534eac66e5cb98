import {
  allocHost,
  DeviceLostError,
  type DeviceStorage,
  type DType,
  type HostArray,
  RayoError,
  ScratchArena,
  type Tensor,
} from '@rayo/core';
import { BufferPool, usageFlags } from './buffers.js';
import { type AttributedError, CallErrors, reportedError } from './callErrors.js';
import type { WgpuDevice } from './device.js';
import { DeviceBuffers } from './deviceBuffers.js';
import { CommandRecorder, type Recording } from './encoder.js';
import type { Operand, SubgroupMatrixSupport } from './kernel.js';
import { DeviceMemory } from './memory.js';
import type { ResolvedBackendOptions, WgpuObjectCounts } from './options.js';
import { ParamArena } from './params.js';
import { PipelineCache } from './pipelines.js';
import { UploadStaging } from './upload.js';
import type { GPUBuffer, GPUDevice } from './webgpuTypes.js';

/**
 * The backend's side of the GPU queue: what work goes through on its way to
 * the device and back. It records dispatches (pipelines, parameters, scratch
 * buffers), submits them, writes and reads buffers in queue order, and turns
 * what WebGPU reports asynchronously (validation errors, refused
 * allocations, a lost device) into RayoErrors at the next read, sync or
 * submit.
 */
export class WgpuQueue {
  readonly device: GPUDevice;
  readonly pipelines: PipelineCache;
  readonly memory: DeviceMemory;
  readonly callErrors: CallErrors;
  readonly params: ParamArena;
  /** Tensors' and scratch buffers, through the caching allocator. */
  readonly buffers: DeviceBuffers;
  readonly staging: BufferPool;
  readonly uploads: UploadStaging;
  #bindGroups = 0;
  #commandBuffers = 0;
  readonly #subgroupMatrix: SubgroupMatrixSupport | undefined;
  /** A tiny buffer cleared by the queue rounds that push freed memory back to the driver. */
  readonly #releaseFence: GPUBuffer;

  /** `checkAlive` throws once the backend is disposed or the device lost. */
  constructor(
    readonly gpu: WgpuDevice,
    private readonly options: ResolvedBackendOptions & { readonly maxBindingBytes: number },
    private readonly checkAlive: (api: string) => void,
  ) {
    const device = gpu.device;
    this.device = device;
    this.#subgroupMatrix =
      gpu.subgroupMatrixConfigs.length > 0
        ? {
            configs: gpu.subgroupMatrixConfigs,
            subgroupSize: gpu.subgroupSizes.max,
            minSubgroupSize: gpu.subgroupSizes.min,
          }
        : undefined;
    this.pipelines = new PipelineCache(device);
    this.params = new ParamArena(device);
    this.memory = new DeviceMemory(device, options.memoryBudgetBytes);
    this.callErrors = new CallErrors(device);
    // Made up front: once the device is full, even a small buffer may be refused.
    this.#releaseFence = device.createBuffer({
      label: 'rayo release fence',
      size: 4,
      usage: GPUBufferUsage.COPY_DST,
    });
    this.memory.setQueueRound(() => {
      // A real command, so that the submission takes a new serial.
      const encoder = device.createCommandEncoder();
      encoder.clearBuffer(this.#releaseFence);
      device.queue.submit([encoder.finish()]);
      return this.deviceWait('release', device.queue.onSubmittedWorkDone());
    });
    this.buffers = new DeviceBuffers(this.memory, options.maxCachedBytes);
    this.staging = new BufferPool(this.memory, usageFlags('MAP_READ', 'COPY_DST'), 'rayo staging');
    this.uploads = new UploadStaging(this.memory, options.uploadStagingBytes);
  }

  /** Command buffers submitted so far. */
  get commandBuffers(): number {
    return this.#commandBuffers;
  }

  /** Bind groups created so far. */
  get bindGroups(): number {
    return this.#bindGroups;
  }

  /** How many GPU objects of each kind were created so far. */
  objectCounts(): WgpuObjectCounts {
    return {
      pipelines: this.pipelines.stats,
      paramBuffers: this.params.buffersCreated,
      storageBuffers: this.buffers.created.tensors,
      stagingBuffers: this.staging.created,
      scratchBuffers: this.buffers.created.scratch,
      uploadStagingBuffers: this.uploads.created,
      bindGroups: this.#bindGroups,
    };
  }

  /** Resolves every dispatch `encodeAll` records to a pipeline and a bind group. */
  record(encodeAll: (recorder: CommandRecorder) => void): Recording {
    const recorder = new CommandRecorder(
      this.device,
      this.gpu.features,
      this.pipelines,
      this.params.begin(),
      this.#scratchArena(),
      this.options.maxBindingBytes,
      this.options.tuning,
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

  #scratchArena(): ScratchArena<GPUBuffer> {
    const buffers = this.buffers;
    return new ScratchArena<GPUBuffer>({
      acquire: (bytes) => buffers.acquire(bytes, 'scratch'),
      release: (b) => buffers.release(b),
      bytesOf: (b) => b.size,
      reclaim: (items) => buffers.reclaim(items),
    });
  }

  /**
   * Submits a recording whose parameter chunks and scratch buffers are held;
   * they go back to their pools when the GPU finished. A batch's recording
   * goes `inParts` when the `batchFirstPart` option asks for it.
   */
  submit(recording: Recording, inParts = false): Promise<void> {
    this.checkAlive('submit');
    recording.params.flush(this.device.queue);
    recording.submitted();
    const firstPart = this.options.batchFirstPart;
    try {
      if (inParts && firstPart > 0) {
        this.#commandBuffers += recording.submitInParts(this.device, firstPart);
      } else {
        this.device.queue.submit([recording.encode(this.device)]);
        this.#commandBuffers++;
      }
    } catch (error) {
      recording.release();
      throw error;
    }
    const done = this.device.queue.onSubmittedWorkDone().then(() => recording.release());
    return this.deviceWait('submit', done);
  }

  /** Encodes work into one command buffer and submits it; resolves when the GPU finished. */
  submitWork(encodeAll: (recorder: CommandRecorder) => void): Promise<void> {
    return this.submit(this.record(encodeAll));
  }

  /** A tensor's buffer range as kernels bind it; throws for one the device refused. */
  operand(tensor: Tensor): Operand {
    const s = tensor.storage<DeviceStorage<GPUBuffer>>();
    this.memory.touch(s.buffer);
    this.memory.checkGranted(s.buffer, () => tensor.describe());
    return {
      buffer: s.buffer,
      offset: s.offset,
      size: tensor.size,
      shape: tensor.shape,
      dtype: tensor.dtype,
    };
  }

  /** Writes host data to a buffer range in queue order; the data is taken at the call. */
  write(buffer: GPUBuffer, offset: number, host: HostArray): void {
    const bytes = host.byteLength;
    if (bytes === 0) return;
    this.memory.touch(buffer);
    if (bytes % 4 === 0) this.uploads.write(buffer, offset, host);
    else {
      // Copies and writeBuffer sizes must be multiples of 4 (odd-length 16-bit data).
      const padded = new Uint8Array(Math.ceil(bytes / 4) * 4);
      padded.set(new Uint8Array(host.buffer, host.byteOffset, bytes));
      this.uploads.write(buffer, offset, padded);
    }
  }

  /** Clears the first `bytes` of a buffer (rounded up to words) as a call of its own. */
  clear(api: string, buffer: GPUBuffer, bytes: number): void {
    this.callErrors.scoped(api, () => {
      const encoder = this.device.createCommandEncoder();
      encoder.clearBuffer(buffer, 0, Math.ceil(bytes / 4) * 4 || undefined);
      this.device.queue.submit([encoder.finish()]);
    });
  }

  /**
   * The values of a buffer range as of this call: the copy to a staging
   * buffer is enqueued at once, after the work submitted so far and before
   * anything submitted later. Errors of earlier work are reported first.
   */
  async read(
    buffer: GPUBuffer,
    offset: number,
    byteLength: number,
    dtype: DType,
    size: number,
  ): Promise<HostArray> {
    const bytes = Math.ceil(byteLength / 4) * 4;
    const out = allocHost(dtype, size);
    if (bytes === 0) {
      await this.reported('read');
      return out;
    }
    this.memory.touch(buffer);
    const staging = this.staging.acquire(bytes, 'read');
    try {
      const encoder = this.device.createCommandEncoder();
      encoder.copyBufferToBuffer(buffer, offset, staging, 0, bytes);
      this.device.queue.submit([encoder.finish()]);
      this.#commandBuffers++;
      // Errors of earlier work (a kernel that failed to compile, a refused
      // allocation) are reported before the values, which they may have spoilt.
      await this.pipelines.settle();
      await this.reported('read');
      await this.deviceWait('read', staging.mapAsync(GPUMapMode.READ, 0, bytes));
      new Uint8Array(out.buffer, out.byteOffset, byteLength).set(
        new Uint8Array(staging.getMappedRange(0, bytes), 0, byteLength),
      );
      staging.unmap();
      await this.reported('read');
    } finally {
      if (staging.mapState === 'unmapped') this.staging.release(staging);
    }
    return out;
  }

  /** Throws what the device reported since the last check (validation, out of memory). */
  async reported(api: string): Promise<void> {
    // After a refusal, what the caller freed reaches the driver before it allocates again.
    await this.memory.release();
    const { refused, retried } = await this.memory.takeReport(api);
    const errors: AttributedError[] = await this.callErrors.take();
    for (const error of this.gpu.takeErrors()) errors.push({ error, call: undefined });
    this.checkAlive(api);
    // Errors after a refused allocation are its consequences (an invalid buffer
    // bound or cleared), also when a retry has granted it since.
    if (refused) throw refused;
    if (retried > 0) return;
    if (errors.length === 0) return;
    throw reportedError(api, errors);
  }

  /** Reports what earlier work went wrong without waiting for the queue. */
  async settle(api: string): Promise<void> {
    this.checkAlive(api);
    await this.pipelines.settle();
    await this.reported(api);
  }

  /** Waits for everything submitted, then reports what went wrong. */
  async sync(): Promise<void> {
    this.checkAlive('sync');
    this.callErrors.restartCount();
    await this.pipelines.settle();
    await this.deviceWait(
      'sync',
      Promise.all([this.device.queue.onSubmittedWorkDone(), this.uploads.settle()]),
    );
    await this.reported('sync');
  }

  /**
   * `work` raced against the loss of the device: a lost device rejects it with
   * a DeviceLostError at once, and so does work that failed because of the loss.
   */
  async deviceWait<T>(api: string, work: Promise<T>): Promise<T> {
    let value: T;
    try {
      value = await this.gpu.untilLost(work);
    } catch (error) {
      if (error instanceof RayoError) throw error;
      // Dawn rejects pending maps of a destroyed device before reporting the loss.
      const lost = await Promise.race([
        this.gpu.lost.catch((e: unknown) => e),
        new Promise((resolve) => setTimeout(resolve, 100)),
      ]);
      if (lost instanceof DeviceLostError) throw lost;
      throw new RayoError(`the device failed: ${(error as Error)?.message || String(error)}`, {
        operation: api,
        cause: error,
      });
    }
    this.checkAlive(api);
    return value;
  }

  /** Destroys the idle buffers the caching allocator and the staging pool keep. */
  emptyCache(): void {
    this.buffers.emptyCache();
    this.staging.trim();
  }

  /** Destroys the pooled and staging buffers; live tensors' buffers go with the device. */
  dispose(): void {
    this.buffers.emptyCache();
    this.staging.trim();
    this.uploads.dispose();
    this.params.destroy();
    this.#releaseFence.destroy();
  }
}
