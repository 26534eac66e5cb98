import type { KernelCallArgs, KernelRunner, RunOptions, Tensor } from './backend.js';
import type { AnyKernelSpec, AttrValues } from './kernel.js';

/** One kernel call as a `TrackingRunner` passed it on, with what came back. */
export interface TrackedCall {
  readonly spec: AnyKernelSpec;
  readonly inputs: readonly (Tensor | undefined)[];
  readonly attrs: Partial<AttrValues> | undefined;
  readonly options: RunOptions | undefined;
  readonly outputs: readonly Tensor[];
}

export interface TrackingRunnerOptions {
  /** Called after every call is passed on: to note the kernels a step runs, or to keep the calls for later. */
  readonly onRun?: (call: TrackedCall) => void;
}

/**
 * A runner that passes every kernel to another runner (a backend, a batch)
 * and tracks the tensors the kernels allocate: outputs that are neither an
 * input written in place nor a preallocated `out`. Whoever ran the kernels
 * frees them in one place, keeps the few it returns, or hands them on.
 * Kernels are enqueued in order, so freeing after the last one is recorded
 * is safe on every backend.
 */
export class TrackingRunner implements KernelRunner {
  #inner: KernelRunner;
  readonly #made = new Set<Tensor>();
  readonly #onRun: ((call: TrackedCall) => void) | undefined;

  constructor(inner: KernelRunner, options: TrackingRunnerOptions = {}) {
    this.#inner = inner;
    this.#onRun = options.onRun;
  }

  /** Where the kernels go now. */
  get inner(): KernelRunner {
    return this.#inner;
  }

  /** Sends later kernels to `runner` (e.g. a new batch); what is tracked stays tracked. */
  redirect(runner: KernelRunner): void {
    this.#inner = runner;
  }

  run<A extends AttrValues>(...[spec, inputs, attrs, options]: KernelCallArgs<A>): Tensor[] {
    const outputs = this.#inner.run(spec, inputs, attrs, options);
    for (const t of outputs) {
      if (!inputs.includes(t) && !options?.out?.includes(t)) this.#made.add(t);
    }
    this.#onRun?.({ spec: spec as AnyKernelSpec, inputs, attrs, options, outputs });
    return outputs;
  }

  /** Runs a kernel of one output. */
  run1<A extends AttrValues>(...call: KernelCallArgs<A>): Tensor {
    return this.run(...call)[0]!;
  }

  /** Tracks a tensor made outside a kernel (an upload, `zeros`) as if a kernel had allocated it. */
  adopt(tensor: Tensor): Tensor {
    this.#made.add(tensor);
    return tensor;
  }

  /** Whether `tensor` is tracked. */
  has(tensor: Tensor): boolean {
    return this.#made.has(tensor);
  }

  /** How many tensors are tracked. */
  get size(): number {
    return this.#made.size;
  }

  /** Stops tracking `tensor`: the caller owns it now. */
  keep(tensor: Tensor): Tensor {
    this.#made.delete(tensor);
    return tensor;
  }

  /** Stops tracking everything and returns it, in the order it was allocated: the caller owns it now. */
  release(): Tensor[] {
    const all = [...this.#made];
    this.#made.clear();
    return all;
  }

  /** Frees every tracked tensor but `survivor`, which stays tracked. */
  disposeAllBut(survivor: Tensor): void {
    for (const t of this.release()) {
      if (t === survivor) this.#made.add(t);
      else t.dispose();
    }
  }

  /** Frees every tracked tensor. */
  dispose(): void {
    for (const t of this.release()) t.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
