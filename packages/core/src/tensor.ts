import type { Backend } from './backend.js';
import { bytesPerElement, type DType, type HostArray } from './dtype.js';
import { DisposedTensorError } from './errors.js';
import { formatShape, resolveReshape, type Shape, sizeOf } from './shape.js';

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
 * A view (`reshape`) is a tensor over its base's memory under another shape:
 * backends and batches see the base's own storage, so a view works wherever
 * a tensor does. Disposing a view frees nothing; disposing the base ends
 * every view of it (they then count as disposed).
 */
export class Tensor {
  readonly backend: Backend;
  readonly shape: Shape;
  readonly dtype: DType;
  readonly size: number;
  #storage: TensorStorage | undefined;
  /** The tensor that owns the memory, for a view; it also keeps the base reachable. */
  #base: Tensor | undefined;

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
