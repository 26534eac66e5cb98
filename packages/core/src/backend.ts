import type { AllocatorStats } from './allocator/allocatorStats.js';
import { bytesPerElement, type DType, type HostArray } from './dtype.js';
import { DisposedTensorError, InvalidArgumentError, UnsupportedOnBackendError } from './errors.js';
import type { AttrValues, KernelSpec } from './kernel.js';
import { formatShape, resolveReshape, type Shape, sizeOf } from './shape.js';

// The contract between tensors and backends: a tensor names the backend that
// owns it, and a backend's every operation takes or makes tensors, so the two
// are declared together.

/**
 * Limits every backend means the same way. Limits of one backend's API (such
 * as WebGPU's storage binding size) are that backend's own properties.
 */
export interface BackendLimits {
  /** Largest single allocation, in bytes. */
  readonly maxBufferBytes: number;
}

export interface BackendInfo {
  /** Registry name: `cpu`, `wgpu`, `cuda`. */
  readonly name: string;
  /** Human-readable device, e.g. `NVIDIA H200` or `JavaScript (Node 20.20.2)`. */
  readonly device: string;
  readonly kind: 'cpu' | 'gpu';
  readonly limits: BackendLimits;
  /** Optional capabilities such as `shader-f16`, `timestamp-query`. */
  readonly features: readonly string[];
}

/**
 * What `Backend.memory()` reports: tensors and their bytes as asked for, and
 * the device memory behind them as the backend's caching allocator sees it
 * (`allocatedBytes` in use, including scratch; `reservedBytes` held from the
 * device, in use or cached; their peaks; retries after releasing the cache
 * and out-of-memory errors).
 */
export interface MemoryStats extends AllocatorStats {
  readonly liveTensors: number;
  readonly liveBytes: number;
  readonly peakBytes: number;
  /** Allocations made since the backend was created. */
  readonly allocations: number;
}

export interface RunOptions {
  /**
   * Preallocated outputs. An output that aliases an input (an in-place kernel)
   * is always that input and must be left undefined here.
   */
  readonly out?: readonly (Tensor | undefined)[];
}

/** What a backend and a command batch both do: run a kernel on tensors. */
/**
 * The arguments of one kernel call, named once so that every runner (a
 * backend, a batch, a wrapper that passes calls on) takes the same ones.
 */
export type KernelCallArgs<A extends AttrValues> = [
  spec: KernelSpec<A>,
  inputs: readonly (Tensor | undefined)[],
  attrs?: Partial<A>,
  options?: RunOptions,
];

/** How `Backend.batch` makes a batch. */
export interface BatchOptions {
  /**
   * A batch of this backend whose scratch memory (what kernels keep their
   * intermediate results in) the new one shares: the two must never run at
   * the same time, which batches submitted one after another on the
   * backend's queue do not. A step recorded as several batches keeps one
   * scratch instead of one per batch. Backends without scratch of their own
   * per batch ignore it.
   */
  readonly scratchFrom?: CommandBatch;
}

export interface KernelRunner {
  /**
   * Runs `spec` on `inputs`. Returns one tensor per declared output; in-place
   * outputs are the input tensors they alias. Inputs are validated by the spec
   * before anything is enqueued.
   */
  run<A extends AttrValues>(...call: KernelCallArgs<A>): Tensor[];
}

/**
 * Records kernels and submits them together: on a GPU, one command encoder and
 * one submission (or one CUDA graph). Output tensors exist as soon as a kernel
 * is recorded and hold their results once `submit()` resolves. `submit()` may
 * be called again to replay everything recorded.
 *
 * `submit()` enqueues the work when it is called, before its promise settles:
 * a `read`, `write`, `copy` or `run` issued right after the call, without
 * awaiting it, is ordered after the batch's work, so a caller may start the
 * readback of an output at once and wait for the device only once (awaiting
 * the submit as well, to learn of its failure).
 */
export interface CommandBatch extends KernelRunner {
  /** Number of recorded kernels. */
  readonly size: number;
  submit(): Promise<void>;
  /**
   * Forgets the recorded kernels and gives back what the batch holds for its
   * replays (a CUDA graph, scratch memory, a recorded command sequence); the
   * batch is empty afterwards. The outputs it allocated stay the caller's.
   */
  dispose(): void;
}

/**
 * Named weight matrices uploaded once, and products against them. A weight is
 * stored `[outFeatures, inFeatures]` (the layout of a linear layer), and
 * `matmul` computes `alpha · x · Wᵀ` for `x` of shape `[M, inFeatures]`.
 */
export interface WeightCache {
  readonly weightCount: number;
  readonly weightBytes: number;
  /** Uploads (or replaces) a weight of shape `[outFeatures, inFeatures]`. */
  upload(name: string, data: HostArray | readonly number[], shape: readonly [number, number]): void;
  has(name: string): boolean;
  delete(name: string): boolean;
  /** Device-resident product: returns a new tensor `[M, outFeatures]`. */
  matmul(name: string, x: Tensor, options?: { alpha?: number }): Tensor;
  /**
   * Host-to-host product through persistent, grow-only input, output and
   * staging buffers: `x` holds `rows × inFeatures` values.
   */
  matmulHost(
    name: string,
    x: Float32Array,
    rows: number,
    options?: { alpha?: number },
  ): Promise<Float32Array>;
  dispose(): void;
}

/** A place where tensors live and kernels run. */
export interface Backend extends KernelRunner {
  readonly name: string;
  readonly info: BackendInfo;
  /**
   * Whether a kernel spec of this name is implemented here and, given `dtype`,
   * runs its float tensors in that dtype (f16, bf16). A call the backend cannot
   * run is an UnsupportedOnBackendError, never an f32 fallback.
   */
  supports(kernel: string, dtype?: DType): boolean;
  /** Copies host data to a new tensor. Numbers are converted to `dtype` (default f32). */
  upload(data: HostArray | readonly number[], shape: Shape, dtype?: DType): Tensor;
  /**
   * Copies host data into an existing tensor (same element count; numbers are
   * converted to its dtype), ordered with the backend's work: after everything
   * already submitted, before anything submitted later. The data is taken at
   * the call, so the caller may reuse the array at once. This is how the
   * per-token values of a recorded batch (positions, lengths, token ids) and
   * its inputs are replaced between replays.
   */
  write(tensor: Tensor, data: HostArray | readonly number[]): void;
  /** A new tensor whose contents are unspecified until written. */
  empty(shape: Shape, dtype?: DType): Tensor;
  /** A new tensor filled with zeros. */
  zeros(shape: Shape, dtype?: DType): Tensor;
  /** Copies a tensor's elements to the host after all pending work on it. */
  read(tensor: Tensor): Promise<HostArray>;
  /** Device-side copy into `dst` (same shape and dtype) or into a new tensor. */
  copy(src: Tensor, dst?: Tensor): Tensor;
  batch(options?: BatchOptions): CommandBatch;
  /** Resolves when all submitted work has finished. */
  sync(): Promise<void>;
  memory(): MemoryStats;
  /**
   * Starts the peaks of `memory()` (`peakBytes`, `peakAllocatedBytes`,
   * `peakReservedBytes`) anew from what is in use and held now, so that the
   * next figures are the peaks of the work that follows (PyTorch's
   * `reset_peak_memory_stats`).
   */
  resetPeakMemory(): void;
  /**
   * Gives the device memory the backend keeps cached for reuse (idle blocks
   * of its caching allocator) back to the device; memory in use stays.
   */
  emptyCache(): void;
  createWeightCache(): WeightCache;
  /**
   * Device time, in milliseconds, of the kernels `work` records into the given
   * runner, submitted together and measured with device timestamps (WebGPU
   * timestamp queries, CUDA events). Resolves to `undefined` when the device
   * has no timestamps; absent on backends without a device clock.
   */
  deviceTime?(work: (runner: KernelRunner) => void): Promise<number | undefined>;
  /**
   * The memory of `length` elements of `tensor` from element `offset` on, for
   * `Tensor.slice` (which checks the range); absent where the backend cannot
   * address a tensor's memory at an offset.
   */
  sliceStorage?(tensor: Tensor, offset: number, length: number): TensorStorage;
  /** Frees every resource; tensors of this backend become unusable. */
  dispose(): void;
}

/** Backend memory behind a tensor. `free()` must be safe to call more than once. */
export interface TensorStorage {
  readonly byteLength: number;
  free(): void;
}

// Frees the memory of tensors that were dropped without dispose(). A safety
// net only: collection is late and unpredictable, so code should dispose.
const leaked = new FinalizationRegistry<TensorStorage>((storage) => storage.free());

/**
 * A handle to memory owned by one backend, with a shape and an element type.
 * Dispose it (or declare it with `using`) when done.
 *
 * A view (`reshape`, `slice`) is a tensor over its base's memory under
 * another shape, or over a range of it: it works wherever a tensor does.
 * Disposing a view frees nothing; disposing the base ends every view of it
 * (they then count as disposed).
 */
export class Tensor {
  readonly backend: Backend;
  readonly shape: Shape;
  readonly dtype: DType;
  readonly size: number;
  #storage: TensorStorage | undefined;
  /** The tensor that owns the memory, for a view; it also keeps the base reachable. */
  #base: Tensor | undefined;
  /** Where the tensor's elements start in its base's (a slice's offset; 0 otherwise). */
  #offset = 0;

  constructor(backend: Backend, shape: Shape, dtype: DType, storage: TensorStorage) {
    this.backend = backend;
    this.shape = Object.freeze([...shape]);
    this.dtype = dtype;
    this.size = sizeOf(shape);
    this.#storage = storage;
    leaked.register(this, storage, this);
  }

  get byteLength(): number {
    return this.size * bytesPerElement(this.dtype);
  }

  /** Disposed itself, or a view whose base was disposed. */
  get disposed(): boolean {
    return this.#storage === undefined || (this.#base !== undefined && this.#base.#storage === undefined);
  }

  /** Whether this tensor is a view over another tensor's memory. */
  get isView(): boolean {
    return this.#base !== undefined;
  }

  /** The tensor that owns the memory: itself, or the base of a view. */
  get base(): Tensor {
    return this.#base ?? this;
  }

  /** Where this tensor's elements start among its base's (non-zero for slices). */
  get baseOffset(): number {
    return this.#offset;
  }

  /** Whether two tensors share any element of memory (the same base, overlapping ranges). */
  overlaps(other: Tensor): boolean {
    return (
      this.base === other.base &&
      this.#offset < other.#offset + other.size &&
      other.#offset < this.#offset + this.size
    );
  }

  /** The backend's memory; throws if the tensor (or, for a view, its base) was disposed. */
  storage<S extends TensorStorage = TensorStorage>(): S {
    if (!this.#storage) {
      throw new DisposedTensorError('tensor was used after dispose()', {
        expected: 'a live tensor',
        actual: `disposed ${this.describe()}`,
      });
    }
    if (this.#base && !this.#base.#storage) {
      throw new DisposedTensorError('view was used after its base was disposed', {
        expected: 'a view of a live tensor',
        actual: `${this.describe()} over disposed ${this.#base.describe()}`,
      });
    }
    return this.#storage as S;
  }

  /**
   * The same elements under another shape (row-major), without a copy: a view
   * that shares this tensor's memory and is valid while its base is. One
   * dimension may be −1 (inferred). A view of a view has the same base.
   */
  reshape(shape: Shape): Tensor {
    const storage = this.storage();
    const view = new Tensor(this.backend, resolveReshape(this.shape, shape), this.dtype, storage);
    // Only the base frees the memory, by dispose() or its own finalizer.
    leaked.unregister(view);
    view.#base = this.base;
    view.#offset = this.#offset;
    return view;
  }

  /**
   * `length` consecutive elements from element `offset` on (row-major), as a
   * 1-d view over this tensor's memory, valid while its base is (reshape it
   * for another shape): e.g. one parameter's gradient inside a flat bucket
   * that a collective takes whole. Views of one base that overlap are not
   * told apart from disjoint ones: a kernel must not read and write two
   * overlapping slices. Backends without offset views (`sliceStorage`) throw.
   */
  slice(offset: number, length: number): Tensor {
    const range = (argument: string, value: number, limit: number) => {
      if (!Number.isInteger(value) || value < 0 || value > limit) {
        throw new InvalidArgumentError('a slice must lie inside the tensor', {
          operation: 'Tensor.slice',
          argument,
          expected: `an integer in [0, ${limit}]`,
          actual: String(value),
        });
      }
    };
    range('offset', offset, this.size);
    range('length', length, this.size - offset);
    if (!this.backend.sliceStorage) {
      throw new UnsupportedOnBackendError('the backend has no views at an offset', {
        operation: 'Tensor.slice',
        argument: 'this',
        expected: 'a tensor of a backend with sliceStorage (cpu, cuda; wgpu at aligned offsets)',
        actual: this.backend.name,
      });
    }
    this.storage();
    const view = new Tensor(
      this.backend,
      [length],
      this.dtype,
      this.backend.sliceStorage(this, offset, length),
    );
    leaked.unregister(view);
    view.#base = this.base;
    view.#offset = this.#offset + offset;
    return view;
  }

  /** Copies the elements to the host once all work writing them has finished. */
  read(): Promise<HostArray> {
    return this.backend.read(this);
  }

  dispose(): void {
    const storage = this.#storage;
    if (!storage) return;
    this.#storage = undefined;
    if (this.#base) return;
    leaked.unregister(this);
    storage.free();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  describe(): string {
    return `${this.dtype}${formatShape(this.shape)} on ${this.backend.name}`;
  }

  toString(): string {
    return `Tensor(${this.describe()}${this.isView ? ', view' : ''}${this.disposed ? ', disposed' : ''})`;
  }
}
