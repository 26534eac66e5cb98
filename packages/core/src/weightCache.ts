import type { Backend, Tensor, WeightCache } from './backend.js';
import type { HostArray } from './dtype.js';
import { InvalidArgumentError, ShapeError } from './errors.js';
import { matmul } from './kernels/matmul.js';
import type { Shape } from './shape.js';

/** What a GPU backend lends the shared weight cache: host writes into its tensors, and tensors over their first elements. */
export interface WeightCacheDevice {
  readonly backend: Backend;
  /** Writes host values into the first elements of `tensor` without allocating. */
  writeHost(tensor: Tensor, data: Float32Array): void;
  /** A tensor of `shape` over the first elements of `base`'s memory; disposing it frees nothing. */
  prefixOf(base: Tensor, shape: Shape): Tensor;
}

const KERNEL = 'weightCache.matmul';

/**
 * Named `[outFeatures, inFeatures]` weights uploaded once. Products run the
 * backend's matmul kernel with `transB` (the weight is read in place, never
 * transposed on the host; the backend picks GEMV, small-M or tiled kernels by
 * shape); `matmulHost` goes through persistent, grow-only input and output
 * tensors. Shared by the GPU backends.
 */
export class DeviceWeightCache implements WeightCache {
  readonly #weights = new Map<string, Tensor>();
  #input: Tensor | undefined;
  #output: Tensor | undefined;

  readonly #device: WeightCacheDevice;
  readonly #backend: Backend;

  constructor(device: WeightCacheDevice) {
    this.#device = device;
    this.#backend = device.backend;
  }

  get weightCount(): number {
    return this.#weights.size;
  }

  get weightBytes(): number {
    let bytes = 0;
    for (const w of this.#weights.values()) bytes += w.byteLength;
    return bytes;
  }

  upload(name: string, data: HostArray | readonly number[], shape: readonly [number, number]): void {
    if (!Array.isArray(shape) || shape.length !== 2) {
      throw new ShapeError('a weight is a matrix', {
        operation: 'weightCache.upload',
        argument: 'shape',
        expected: '[outFeatures, inFeatures]',
        actual: JSON.stringify(shape),
      });
    }
    const tensor = this.#backend.upload(data, shape, 'f32');
    this.#weights.get(name)?.dispose();
    this.#weights.set(name, tensor);
  }

  has(name: string): boolean {
    return this.#weights.has(name);
  }

  delete(name: string): boolean {
    this.#weights.get(name)?.dispose();
    return this.#weights.delete(name);
  }

  #weight(name: string): Tensor {
    const w = this.#weights.get(name);
    if (!w) {
      throw new InvalidArgumentError('no weight of this name was uploaded', {
        operation: KERNEL,
        argument: 'name',
        expected: this.#weights.size
          ? `one of ${[...this.#weights.keys()].join(', ')}`
          : 'an uploaded weight',
        actual: JSON.stringify(name),
      });
    }
    return w;
  }

  matmul(name: string, x: Tensor, options: { alpha?: number } = {}): Tensor {
    return this.#backend.run(matmul, [x, this.#weight(name)], {
      alpha: options.alpha ?? 1,
      transB: true,
    })[0]!;
  }

  async matmulHost(
    name: string,
    x: Float32Array,
    rows: number,
    options: { alpha?: number } = {},
  ): Promise<Float32Array> {
    const w = this.#weight(name);
    const [n, k] = w.shape as [number, number];
    if (!Number.isInteger(rows) || rows < 1) {
      throw new InvalidArgumentError('rows must be a positive integer', {
        operation: KERNEL,
        argument: 'rows',
        expected: 'an integer >= 1',
        actual: String(rows),
      });
    }
    if (x.length !== rows * k) {
      throw new ShapeError('input length must be rows × inFeatures', {
        operation: KERNEL,
        argument: 'x',
        expected: `${rows * k} (${rows} × ${k})`,
        actual: String(x.length),
      });
    }
    using input = this.#persistent('input', rows, k);
    using output = this.#persistent('output', rows, n);
    this.#device.writeHost(input, x);
    this.#backend.run(matmul, [input, w], { alpha: options.alpha ?? 1, transB: true }, { out: [output] });
    return (await output.read()) as Float32Array;
  }

  // Grow-only: a larger request replaces the tensor; a smaller one is served
  // by a view of the same device memory (disposing a view frees nothing).
  #persistent(which: 'input' | 'output', rows: number, cols: number): Tensor {
    const current = which === 'input' ? this.#input : this.#output;
    const needed = rows * cols;
    let base = current;
    if (!base || base.size < needed) {
      base?.dispose();
      base = this.#backend.empty([needed]);
      if (which === 'input') this.#input = base;
      else this.#output = base;
    }
    return this.#device.prefixOf(base, [rows, cols]);
  }

  dispose(): void {
    for (const w of this.#weights.values()) w.dispose();
    this.#weights.clear();
    this.#input?.dispose();
    this.#output?.dispose();
    this.#input = undefined;
    this.#output = undefined;
  }
}
