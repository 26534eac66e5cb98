import type { Backend } from './backend.js';
import { bytesPerElement, type DType, type HostArray } from './dtype.js';
import { DisposedTensorError } from './errors.js';
import { formatShape, type Shape, sizeOf } from './shape.js';

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
 */
export class Tensor {
  readonly backend: Backend;
  readonly shape: Shape;
  readonly dtype: DType;
  readonly size: number;
  #storage: TensorStorage | undefined;

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

  get disposed(): boolean {
    return this.#storage === undefined;
  }

  /** The backend's memory; throws if the tensor was disposed. */
  storage<S extends TensorStorage = TensorStorage>(): S {
    if (!this.#storage) {
      throw new DisposedTensorError('tensor was used after dispose()', {
        expected: 'a live tensor',
        actual: `disposed ${this.describe()}`,
      });
    }
    return this.#storage as S;
  }

  /** Copies the elements to the host once all work writing them has finished. */
  read(): Promise<HostArray> {
    return this.backend.read(this);
  }

  dispose(): void {
    const storage = this.#storage;
    if (!storage) return;
    this.#storage = undefined;
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
    return `Tensor(${this.describe()}${this.disposed ? ', disposed' : ''})`;
  }
}
