import {
  add,
  type Backend,
  type HostArray,
  inferKernel,
  type KernelRunner,
  scale,
  type Tensor,
  type WeightCache,
} from '@rayo/core';
import { type BenchCase, CHAIN_SCALE, caseVia, inputMetas } from './case.js';

/** A case set up for timing on one backend, with `sets` rotated copies of its inputs. */
export interface Prepared {
  /** One call on input set `set`; resolves when its work has finished. */
  host(set: number): Promise<void>;
  /**
   * Records one call on set `set` into `runner`, for device timing. Present
   * only where one call is plain kernel runs (not a weight cache, a batch
   * submission or a transfer).
   */
  readonly record?: (runner: KernelRunner, set: number) => void;
  dispose(): void;
}

/** Tensors to dispose together, once each. */
class Owned {
  readonly #tensors = new Set<Tensor>();
  add<T extends Tensor | undefined>(t: T): T {
    if (t) this.#tensors.add(t);
    return t;
  }
  has(t: Tensor): boolean {
    return this.#tensors.has(t);
  }
  dispose(): void {
    for (const t of this.#tensors) t.dispose();
    this.#tensors.clear();
  }
}

/** Uploads copies of `data` (the kernel may write its inputs in place). */
export function uploadInputs(
  backend: Backend,
  c: BenchCase,
  data: readonly (HostArray | undefined)[],
): (Tensor | undefined)[] {
  const metas = inputMetas(c);
  return data.map((d, i) => (d ? backend.upload(d.slice(), metas[i]!.shape, metas[i]!.dtype) : undefined));
}

export function disposeAll(tensors: Iterable<Tensor | undefined>): void {
  for (const t of new Set(tensors)) t?.dispose();
}

/** Records the chain of a `batch` case: `add(y, b)` and `scale(y)` in turn, from `y = x`. */
function recordChain(runner: KernelRunner, c: BenchCase, x: Tensor, b: Tensor, owned: Owned): Tensor {
  let y = x;
  for (let i = 0; i < (c.chain ?? 1); i++) {
    y = owned.add(
      i % 2 === 0 ? runner.run(add, [y, b])[0]! : runner.run(scale, [y], { alpha: CHAIN_SCALE, beta: 0 })[0]!,
    );
  }
  return y;
}

const weightName = (set: number) => `w${set}`;

/**
 * Runs a case once on `backend` on fresh copies of `data` and reads back its
 * outputs: every kernel output, the product of the weight cache, the end of a
 * batch chain, or the data after a transfer.
 */
export async function outputsOnce(
  backend: Backend,
  c: BenchCase,
  data: readonly (HostArray | undefined)[],
): Promise<HostArray[]> {
  const owned = new Owned();
  let cache: WeightCache | undefined;
  try {
    const inputs = uploadInputs(backend, c, data).map((t) => owned.add(t));
    let outputs: Tensor[];
    switch (caseVia(c)) {
      case 'run':
        outputs = backend.run(c.spec, inputs, c.attrs).map((t) => owned.add(t));
        break;
      case 'weightCache': {
        cache = backend.createWeightCache();
        const [n, k] = c.inputs[1]!.shape as [number, number];
        cache.upload(weightName(0), data[1]!, [n, k]);
        outputs = [owned.add(cache.matmul(weightName(0), inputs[0]!))];
        break;
      }
      case 'batch': {
        const batch = backend.batch();
        outputs = [recordChain(batch, c, inputs[0]!, inputs[1]!, owned)];
        await batch.submit();
        break;
      }
      case 'upload':
      case 'read':
        outputs = [inputs[0]!];
        break;
    }
    await backend.sync();
    return await Promise.all(outputs.map((t) => backend.read(t)));
  } finally {
    owned.dispose();
    cache?.dispose();
  }
}

async function prepareRun(
  backend: Backend,
  c: BenchCase,
  data: readonly (HostArray | undefined)[],
  sets: number,
  owned: Owned,
): Promise<Prepared> {
  const metas = inputMetas(c);
  const { outputs: declared } = inferKernel(c.spec, metas, c.attrs);
  const inputs: (Tensor | undefined)[][] = [];
  const outs: (Tensor | undefined)[][] = [];
  for (let s = 0; s < sets; s++) {
    const set = uploadInputs(backend, c, data).map((t) => owned.add(t));
    // A first run allocates the outputs, which later runs reuse: timing
    // measures the kernel, not allocation. In-place outputs are their inputs.
    const first = backend.run(c.spec, set, c.attrs).map((t) => owned.add(t));
    inputs.push(set);
    outs.push(first.map((t, i) => (declared[i]?.aliasOf === undefined ? t : undefined)));
  }
  await backend.sync();
  const call = (runner: KernelRunner, set: number) => {
    for (const t of runner.run(c.spec, inputs[set]!, c.attrs, { out: outs[set]! })) {
      if (!owned.has(t)) t.dispose();
    }
  };
  return {
    host: async (set) => {
      call(backend, set);
      await backend.sync();
    },
    record: call,
    dispose: () => owned.dispose(),
  };
}

/**
 * Sets a case up for timing: `sets` copies of its inputs on the device (more
 * than one only to defeat the L2 cache), outputs allocated once, weights
 * uploaded, a batch recorded. `dispose()` frees everything.
 */
export async function prepareTiming(
  backend: Backend,
  c: BenchCase,
  data: readonly (HostArray | undefined)[],
  sets: number,
): Promise<Prepared> {
  const owned = new Owned();
  let cache: WeightCache | undefined;
  const dispose = () => {
    owned.dispose();
    cache?.dispose();
  };
  try {
    const metas = inputMetas(c);
    switch (caseVia(c)) {
      case 'run':
        return await prepareRun(backend, c, data, sets, owned);
      case 'weightCache': {
        const weights = backend.createWeightCache();
        cache = weights;
        const [n, k] = c.inputs[1]!.shape as [number, number];
        const xs: Tensor[] = [];
        for (let s = 0; s < sets; s++) {
          weights.upload(weightName(s), data[1]!, [n, k]);
          xs.push(owned.add(backend.upload(data[0]!.slice(), metas[0]!.shape, metas[0]!.dtype)));
        }
        await backend.sync();
        return {
          // Each product is a new tensor, as a caller of the cache gets it.
          host: async (set) => {
            const y = weights.matmul(weightName(set), xs[set]!);
            await backend.sync();
            y.dispose();
          },
          dispose,
        };
      }
      case 'batch': {
        const [x, b] = uploadInputs(backend, c, data).map((t) => owned.add(t));
        const batch = backend.batch();
        recordChain(batch, c, x!, b!, owned);
        return { host: () => batch.submit(), dispose };
      }
      case 'upload': {
        const source = data[0]!;
        const shape = metas[0]!.shape;
        return {
          host: async () => {
            const t = backend.upload(source, shape, metas[0]!.dtype);
            await backend.sync();
            t.dispose();
          },
          dispose,
        };
      }
      case 'read': {
        const t = owned.add(backend.upload(data[0]!.slice(), metas[0]!.shape, metas[0]!.dtype));
        await backend.sync();
        return {
          host: async () => {
            await backend.read(t);
          },
          dispose,
        };
      }
    }
  } catch (error) {
    dispose();
    throw error;
  }
}
