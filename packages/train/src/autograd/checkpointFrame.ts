import type { Tensor } from '@rayo/core';
import type { Variable } from './variable.js';

/**
 * What the first pass of a checkpointed segment (`Tape.checkpoint`) takes
 * from outside it. That pass records no backward rules, so every variable
 * it makes needs no gradient: an input that does is one from outside (the
 * segment's input, a parameter), and the segment's recorded node lists it,
 * so that backward carries the gradient the recompute finds for it. The
 * tape's tensors made before the segment that its kernels read are what the
 * recompute reads again; the node says so, and a scope keeps them alive
 * until the node's rule has run.
 */
export class CheckpointFrame {
  readonly #inputs = new Set<Variable>();
  readonly #reads = new Set<Tensor>();

  /** `outside(t)`: whether `t` is the tape's own and was made before the segment began. */
  constructor(private readonly outside: (tensor: Tensor) => boolean) {}

  /** Notes the inputs of an operation of the first pass. */
  noteInputs(inputs: readonly Variable[]): void {
    for (const v of inputs) if (v.requiresGrad) this.#inputs.add(v);
  }

  /** Notes the tensors a kernel of the first pass reads. */
  noteReads(tensors: readonly (Tensor | undefined)[]): void {
    for (const t of tensors) if (t && this.outside(t)) this.#reads.add(t.base);
  }

  /** The variables from outside that need a gradient, in the order the segment first used them. */
  get inputs(): Variable[] {
    return [...this.#inputs];
  }

  /** The tape's tensors from before the segment that it reads. */
  get reads(): Tensor[] {
    return [...this.#reads];
  }
}
