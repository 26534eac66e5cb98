import { type AllocatorStats, uncachedStats } from '../allocator/allocatorStats.js';
import type { ScratchArena } from '../allocator/scratchArena.js';
import {
  type Backend,
  type BackendInfo,
  type BatchOptions,
  type CommandBatch,
  type KernelCallArgs,
  type MemoryStats,
  type RunOptions,
  Tensor,
  type TensorStorage,
  type WeightCache,
} from '../backend.js';
import type { CallRecorder, RecordedKernelCall } from '../batchCalls.js';
import { bytesPerElement, type DType, type HostArray } from '../dtype.js';
import { OutOfMemoryError, RayoError } from '../errors.js';
import { checkShapeAndDType, checkWrite, hostDataFor, ownedStorage } from '../hostData.js';
import type { AnyKernelSpec, AttrValues, KernelSpec, OutputMeta } from '../kernel.js';
import {
  checkCall,
  floatDtypesOf,
  type KernelImplementation,
  type KernelTable,
  type PreparedCall,
} from '../kernelCall.js';
import { copy as copySpec } from '../kernels/index.js';
import { checkInputsWritten, checkWritten } from '../pendingWrites.js';
import { type Shape, sizeOf } from '../shape.js';
import { DeviceWeightCache } from '../weightCache.js';
import { DeviceStorage } from './deviceStorage.js';
import { LiveStats } from './liveStats.js';
import { SequentialBatch } from './sequentialBatch.js';

/**
 * What every backend does the same way, written once: tensor lifecycle and
 * liveness, memory statistics, the sequencing of `upload`, `write`, `empty`,
 * `zeros`, `read`, `copy` and `run`, and call preparation (validation, the
 * implementation's dtypes, outputs in place, given or allocated).
 *
 * A backend supplies hooks on its buffer type `B` (a typed array, a
 * GPUBuffer, a device allocation), its kernel implementation type `K` and
 * what it records of a call, `C`: allocate and free a buffer, write and read
 * host data, clear, encode a prepared call, submit it eagerly, make a batch.
 * A hook runs only after the skeleton checked the backend is alive and the
 * arguments are valid.
 */
export abstract class BackendSkeleton<B, K, C extends RecordedKernelCall>
  implements Backend, CallRecorder<C>
{
  abstract readonly name: string;
  abstract readonly info: BackendInfo;
  readonly #stats = new LiveStats();
  #disposed = false;
  #arena: ScratchArena<B> | undefined;

  /** `kernels`: the backend's implementations, unless it overrides `supports` and `implementationOf`. */
  constructor(private readonly kernels?: KernelTable<K & KernelImplementation>) {}

  // ---- hooks ----

  /** A new buffer of `byteLength` bytes for a tensor of `shape`; `api` names the call in errors. */
  protected abstract allocateBuffer(api: string, byteLength: number, shape: Shape, dtype: DType): B;
  /** Gives a tensor's buffer back (to a pool or the device); never called once the backend is disposed. */
  protected abstract freeBuffer(storage: DeviceStorage<B>): void;
  /** Copies host data (already of the tensor's dtype and size) into a tensor's memory, in order with the backend's work. */
  protected abstract writeStorage(storage: DeviceStorage<B>, host: HostArray): void;
  /** The elements of a live, written tensor of this backend, after all work enqueued before. */
  protected abstract readStorage(tensor: Tensor, storage: DeviceStorage<B>): Promise<HostArray>;
  /** Sets a new tensor's memory to zero. */
  protected abstract clearStorage(tensor: Tensor, storage: DeviceStorage<B>): void;
  /** Turns a validated call whose outputs exist into what this backend records (encoded or launchable work). */
  protected abstract encodeCall<A extends AttrValues>(
    call: PreparedCall<K, A>,
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
  ): C;
  /** Enqueues one recorded call eagerly. */
  protected abstract submitCall(call: C, spec: AnyKernelSpec): void;
  abstract sync(): Promise<void>;

  /** Whether `kernel` is implemented here and, given `dtype`, runs float tensors of that dtype. */
  supports(kernel: string, dtype?: DType): boolean {
    return this.kernels?.supports(kernel, dtype) ?? false;
  }
  /** The implementation of `spec`, or an UnsupportedOnBackendError. */
  protected implementationOf(spec: AnyKernelSpec): K {
    return this.#kernelTable().get(spec);
  }
  #kernelTable(): KernelTable<K & KernelImplementation> {
    if (this.kernels) return this.kernels;
    throw new RayoError(
      `the ${this.name} backend has no kernel table and does not override implementationOf`,
    );
  }
  /** Runs after a tensor's buffer was allocated, before anything uses it. */
  protected allocated(_storage: DeviceStorage<B>): void {}
  /** The float dtypes `implementation` runs: by default those it declares, else f32 only. */
  protected floatDtypes(implementation: K): readonly DType[] {
    return floatDtypesOf(implementation);
  }
  /** Backend-specific checks of a valid call, before its outputs are allocated. */
  protected checkOperands(
    _implementation: K,
    _spec: AnyKernelSpec,
    _inputs: readonly (Tensor | undefined)[],
    _outputs: readonly OutputMeta[],
  ): void {}
  /**
   * A command batch that records calls through `record`; by default one that
   * submits them in order through `submitCall` (a GPU backend encodes them
   * together instead).
   */
  protected createBatch(_options: BatchOptions = {}): CommandBatch {
    return new SequentialBatch<C>(this, (call, spec) => this.submitCall(call, spec));
  }
  /** The memory of a slice view (`Tensor.slice`): `length` elements of `tensor` from element `offset` on. */
  sliceStorage(tensor: Tensor, offset: number, length: number): TensorStorage {
    const s = this.own('Tensor.slice', tensor, 'this');
    const bytes = bytesPerElement(tensor.dtype);
    const at = this.bufferAt(s, offset, length, bytes);
    return new DeviceStorage(at.buffer, length * bytes, at.offset, undefined);
  }
  /**
   * Where `length` elements from element `offset` of `s` lie (element size
   * `bytes`): by default the same buffer at a larger byte offset.
   */
  protected bufferAt(
    s: DeviceStorage<B>,
    offset: number,
    _length: number,
    bytes: number,
  ): { buffer: B; offset: number } {
    return { buffer: s.buffer, offset: s.offset + offset * bytes };
  }
  /** A tensor over the first elements of `base`, sharing its memory; disposing it frees nothing. */
  protected prefixOf(base: Tensor, shape: Shape): Tensor {
    const s = this.own('prefixOf', base, 'base');
    return this.borrowed(s.buffer, shape, base.dtype, s.offset);
  }
  /** Frees what the backend holds; runs once, from the first `dispose()`. */
  protected releaseDevice(): void {}
  /** The caching allocator's figures; by default nothing is cached: reserved is what tensors hold. */
  protected allocatorStats(): AllocatorStats {
    const s = this.#stats.snapshot();
    return uncachedStats(s.liveBytes, s.peakBytes, s.allocations);
  }
  /** Gives cached device memory back (`emptyCache`); nothing to do without a cache. */
  protected releaseCache(): void {}
  /** Starts the caching allocator's peaks again (`resetPeakMemory`); nothing to do without a cache. */
  protected resetAllocatorPeaks(): void {}

  // ---- lifecycle ----

  get disposed(): boolean {
    return this.#disposed;
  }

  /** Throws unless the backend can still run work; a backend adds its device's own state. */
  checkAlive(api: string): void {
    if (this.#disposed) {
      throw new RayoError('backend was disposed', {
        operation: api,
        expected: 'a live backend',
        actual: `disposed ${this.name} backend`,
      });
    }
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.releaseDevice();
  }

  memory(): MemoryStats {
    return { ...this.allocatorStats(), ...this.#stats.snapshot() };
  }

  emptyCache(): void {
    if (!this.#disposed) this.releaseCache();
  }

  resetPeakMemory(): void {
    this.#stats.resetPeak();
    if (!this.#disposed) this.resetAllocatorPeaks();
  }

  /**
   * The scratch arena of the batch being recorded, for `encodeCall` to take
   * its kernels' scratch from; undefined for an eager call.
   */
  protected get recordingArena(): ScratchArena<B> | undefined {
    return this.#arena;
  }

  /**
   * Runs `record` (a batch recording calls) with their scratch taken from
   * `arena`: one arena per batch, whose buffers each call reuses in turn.
   */
  recordWithScratch<T>(arena: ScratchArena<B>, record: () => T): T {
    const outer = this.#arena;
    this.#arena = arena;
    try {
      return record();
    } finally {
      this.#arena = outer;
    }
  }

  /** A tensor of new, counted memory; the skeleton frees it when the tensor is disposed. */
  protected allocate(api: string, shape: Shape, dtype: DType): Tensor {
    const byteLength = sizeOf(shape) * bytesPerElement(dtype);
    const buffer = this.#allocateBuffer(api, byteLength, shape, dtype);
    const stats = this.#stats;
    stats.allocated(byteLength);
    const storage = new DeviceStorage(buffer, byteLength, 0, (s) => {
      stats.freed(s.byteLength);
      if (!this.#disposed) this.freeBuffer(s);
    });
    this.allocated(storage);
    return new Tensor(this, shape, dtype, storage);
  }

  #allocateBuffer(api: string, byteLength: number, shape: Shape, dtype: DType): B {
    try {
      return this.allocateBuffer(api, byteLength, shape, dtype);
    } catch (error) {
      if (!(error instanceof OutOfMemoryError) || error.operation === api) throw error;
      // A refusal reported by a device call: name the call and the tensor too.
      throw new OutOfMemoryError(
        `the device could not allocate ${dtype}[${shape.join(', ')}]: ${error.message}`,
        {
          operation: api,
          expected: `${byteLength} bytes free on the device`,
          actual: 'out of memory',
          cause: error,
        },
      );
    }
  }

  /** A tensor over memory it does not own (imported, or part of another tensor): uncounted, never freed. */
  protected borrowed(buffer: B, shape: Shape, dtype: DType, offset = 0): Tensor {
    const byteLength = sizeOf(shape) * bytesPerElement(dtype);
    return new Tensor(this, shape, dtype, new DeviceStorage(buffer, byteLength, offset, undefined));
  }

  /** The storage of a tensor of this backend, or an error naming `api` and `argument`. */
  protected own(api: string, tensor: Tensor, argument: string): DeviceStorage<B> {
    return ownedStorage<DeviceStorage<B>>(this, api, tensor, argument);
  }

  // ---- tensors ----

  upload(data: HostArray | readonly number[], shape: Shape, dtype: DType = 'f32'): Tensor {
    this.checkAlive('upload');
    checkShapeAndDType('upload', shape, dtype);
    const host = hostDataFor('upload', data, shape, dtype);
    const tensor = this.allocate('upload', shape, dtype);
    try {
      this.writeStorage(tensor.storage(), host);
    } catch (error) {
      tensor.dispose();
      throw error;
    }
    return tensor;
  }

  write(tensor: Tensor, data: HostArray | readonly number[]): void {
    this.checkAlive('write');
    const { storage, data: host } = checkWrite<DeviceStorage<B>>(this, tensor, data);
    this.writeStorage(storage, host);
  }

  empty(shape: Shape, dtype: DType = 'f32'): Tensor {
    return this.#empty('empty', shape, dtype);
  }

  zeros(shape: Shape, dtype: DType = 'f32'): Tensor {
    const tensor = this.#empty('zeros', shape, dtype);
    try {
      this.clearStorage(tensor, tensor.storage());
    } catch (error) {
      tensor.dispose();
      throw error;
    }
    return tensor;
  }

  #empty(api: string, shape: Shape, dtype: DType): Tensor {
    this.checkAlive(api);
    checkShapeAndDType(api, shape, dtype);
    return this.allocate(api, shape, dtype);
  }

  async read(tensor: Tensor): Promise<HostArray> {
    this.checkAlive('read');
    const storage = this.own('read', tensor, 'tensor');
    checkWritten('read', tensor, 'tensor');
    return this.readStorage(tensor, storage);
  }

  copy(src: Tensor, dst?: Tensor): Tensor {
    return this.run(copySpec, [src], {}, { out: [dst] })[0]!;
  }

  // ---- kernels ----

  run<A extends AttrValues>(...[spec, inputs, attrs, options]: KernelCallArgs<A>): Tensor[] {
    checkInputsWritten(spec, inputs);
    const call = this.record(spec, inputs, attrs, options);
    try {
      this.submitCall(call, spec as AnyKernelSpec);
    } catch (error) {
      for (const t of call.fresh) t.dispose();
      throw error;
    }
    return call.outputs;
  }

  /**
   * Validates a call, allocates its outputs and encodes it without enqueueing
   * anything: what `run`, batches and device timing record.
   */
  record<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs: Partial<A> | undefined,
    options: RunOptions | undefined,
  ): C {
    this.checkAlive(spec?.name ?? 'run');
    const implementation = this.implementationOf(spec as AnyKernelSpec);
    const checked = checkCall(this, spec, this.floatDtypes(implementation), inputs, attrs, options);
    this.checkOperands(implementation, spec as AnyKernelSpec, inputs, checked.io.outputs);
    const fresh: Tensor[] = [];
    try {
      const outputs = checked.io.outputs.map((meta, i) => {
        if (meta.aliasOf !== undefined) return inputs[meta.aliasOf]!;
        const given = options?.out?.[i];
        if (given) return given;
        const t = this.allocate(spec.name, meta.shape, meta.dtype);
        fresh.push(t);
        return t;
      });
      this.#arena?.beginCall();
      return this.encodeCall({ implementation, ...checked, outputs, fresh }, spec, inputs);
    } catch (error) {
      // A refused second output (or a launch that cannot be encoded) must not leak the first.
      for (const t of fresh) t.dispose();
      throw error;
    }
  }

  batch(options: BatchOptions = {}): CommandBatch {
    this.checkAlive('batch');
    return this.createBatch(options);
  }

  createWeightCache(): WeightCache {
    this.checkAlive('createWeightCache');
    return new DeviceWeightCache({
      backend: this,
      writeHost: (tensor, data) => this.writeStorage(this.own('writeHost', tensor, 'tensor'), data),
      prefixOf: (base, shape) => this.prefixOf(base, shape),
    });
  }
}
