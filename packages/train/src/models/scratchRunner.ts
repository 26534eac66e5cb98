import type { AttrValues, KernelRunner, KernelSpec, RunOptions, Tensor } from '@rayo/core';

/**
 * A runner that remembers the tensors its kernels allocate (outputs that are
 * neither an input written in place nor a preallocated `out`), so that a
 * forward pass can free its intermediates in one place. Kernels are enqueued
 * in order, so freeing after the last one is recorded is safe on every backend.
 */
export class ScratchRunner implements KernelRunner {
  readonly #inner: KernelRunner;
  readonly #made: Tensor[];

  /** `made` receives every allocated tensor (pass an array to keep them beyond this runner). */
  constructor(inner: KernelRunner, made: Tensor[] = []) {
    this.#inner = inner;
    this.#made = made;
  }

  run<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
    options?: RunOptions,
  ): Tensor[] {
    const outputs = this.#inner.run(spec, inputs, attrs, options);
    for (const t of outputs) {
      if (!inputs.includes(t) && !options?.out?.includes(t)) this.#made.push(t);
    }
    return outputs;
  }

  /** Runs a kernel of one output. */
  run1<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
  ): Tensor {
    return this.run(spec, inputs, attrs)[0]!;
  }

  /** Takes `tensor` out of the scratch: the caller now owns it. */
  keep(tensor: Tensor): Tensor {
    const i = this.#made.indexOf(tensor);
    if (i >= 0) this.#made.splice(i, 1);
    return tensor;
  }

  /** Frees every allocated tensor but `survivor`, which stays in the scratch. */
  disposeAllBut(survivor: Tensor): void {
    for (const t of this.#made.splice(0)) {
      if (t === survivor) this.#made.push(t);
      else t.dispose();
    }
  }

  /** Frees every allocated tensor not kept. */
  dispose(): void {
    for (const t of this.#made.splice(0)) t.dispose();
  }
}
