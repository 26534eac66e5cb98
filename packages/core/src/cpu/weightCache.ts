import type { WeightCache } from '../backend.js';
import type { HostArray } from '../dtype.js';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { matmul } from '../kernels/matmul.js';
import type { Tensor } from '../tensor.js';
import type { CpuBackend } from './backend.js';
import { gemm } from './gemm.js';

const KERNEL = 'weightCache.matmul';

/** Named `[outFeatures, inFeatures]` weights kept as tensors of the cpu backend. */
export class CpuWeightCache implements WeightCache {
  readonly #weights = new Map<string, Tensor>();
  // Grow-only host output for matmulHost; each call returns a copy of its prefix.
  #output = new Float32Array(0);

  constructor(private readonly backend: CpuBackend) {}

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
        kernel: 'weightCache.upload',
        argument: 'shape',
        expected: '[outFeatures, inFeatures]',
        actual: JSON.stringify(shape),
      });
    }
    const tensor = this.backend.upload(data, shape, 'f32');
    this.#weights.get(name)?.dispose();
    this.#weights.set(name, tensor);
  }

  has(name: string): boolean {
    return this.#weights.has(name);
  }

  delete(name: string): boolean {
    const w = this.#weights.get(name);
    w?.dispose();
    return this.#weights.delete(name);
  }

  #weight(name: string): Tensor {
    const w = this.#weights.get(name);
    if (!w) {
      throw new InvalidArgumentError('no weight of this name was uploaded', {
        kernel: KERNEL,
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
    return this.backend.run(matmul, [x, this.#weight(name)], { alpha: options.alpha ?? 1, transB: true })[0]!;
  }

  matmulHost(
    name: string,
    x: Float32Array,
    rows: number,
    options: { alpha?: number } = {},
  ): Promise<Float32Array> {
    try {
      return this.#matmulHost(name, x, rows, options.alpha ?? 1);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #matmulHost(name: string, x: Float32Array, rows: number, alpha: number): Promise<Float32Array> {
    const w = this.#weight(name);
    const [n, k] = w.shape as [number, number];
    if (!Number.isInteger(rows) || rows < 1) {
      throw new InvalidArgumentError('rows must be a positive integer', {
        kernel: KERNEL,
        argument: 'rows',
        expected: 'an integer >= 1',
        actual: String(rows),
      });
    }
    if (x.length !== rows * k) {
      throw new ShapeError('input length must be rows × inFeatures', {
        kernel: KERNEL,
        argument: 'x',
        expected: `${rows * k} (${rows} × ${k})`,
        actual: String(x.length),
      });
    }
    if (this.#output.length < rows * n) this.#output = new Float32Array(rows * n);
    const out = this.#output.subarray(0, rows * n);
    const weight = this.backend.view(w);
    gemm({ m: rows, n, k, a: x, b: weight, alpha, beta: 0, transA: false, transB: true }, out);
    return Promise.resolve(out.slice());
  }

  dispose(): void {
    for (const w of this.#weights.values()) w.dispose();
    this.#weights.clear();
  }
}
