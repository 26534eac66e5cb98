import {
  type AttrValues,
  inferKernel,
  type KernelSpec,
  type RunOptions,
  shapesEqual,
  sizeOf,
  type Tensor,
} from '@rayo/core';
import { ReusePool } from './reusePool.js';

/**
 * When the tensors a tape owns die, and where their memory goes next. Every
 * tensor the tape's kernels make is "born" with a sequence number; a dead one
 * goes into a `ReusePool` and becomes the preallocated output of a later
 * kernel of the same shape of memory. Dead are:
 * - in backward, the gradients of intermediate variables once the rule that
 *   consumes them has run, and the temporaries of that rule;
 * - at the end of a forward scope (`Tape.scope`), what the scope made that
 *   no backward rule reads, and, once backward has run the last rule that
 *   reads it, what one does.
 */
export class TensorLifetimes {
  readonly pool = new ReusePool();
  #seq = 0;
  /** Each base tensor's latest birth (a pooled tensor is born again when reused). */
  readonly #born = new Map<Tensor, number>();
  /** Bases in order of birth: births[k] was born k + 1 (or later, if born again). */
  readonly #births: Tensor[] = [];
  /** Per node index: scope tensors that the node's backward rule is the last to read. */
  readonly #lastReadBy = new Map<number, Tensor[]>();
  readonly #scheduled = new Set<Tensor>();

  /** `enabled` false: nothing is freed before the tape is disposed (to compare, or to debug). */
  constructor(
    private readonly owns: (tensor: Tensor) => boolean,
    private readonly enabled = true,
  ) {}

  /** The number of births so far: tensors born after it are newer. */
  get mark(): number {
    return this.#seq;
  }

  /** Notes a tensor the tape made (an output, a view of one, or a filled tensor). */
  born(tensor: Tensor): void {
    const base = tensor.base;
    if (!this.owns(base)) return;
    this.#born.set(base, ++this.#seq);
    this.#births.push(base);
  }

  /** Whether `tensor`'s base was (last) born after `mark`. */
  bornAfter(tensor: Tensor, mark: number): boolean {
    return (this.#born.get(tensor.base) ?? 0) > mark;
  }

  /** The bases born after `mark` and not born again since, oldest first. */
  bornSince(mark: number): Tensor[] {
    return this.#births.slice(mark).filter((t, k) => this.#born.get(t) === mark + k + 1);
  }

  /** Pools a dead base tensor, unless the tape no longer owns it (kept, handed to a leaf). */
  free(base: Tensor): void {
    if (this.enabled && this.owns(base) && !this.#scheduled.has(base)) this.pool.put(base);
  }

  /**
   * Preallocated outputs for a kernel call from the pool, or undefined when
   * none fits. Bad input is left to the backend's `run`, which reports it.
   */
  outputsFor<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs: Partial<A> | undefined,
  ): RunOptions | undefined {
    if (this.pool.size === 0) return undefined;
    let outputs: ReturnType<typeof inferKernel>['outputs'];
    try {
      outputs = inferKernel(spec, inputs, attrs).outputs;
    } catch {
      return undefined;
    }
    let found = false;
    const out = outputs.map((meta) => {
      if (meta.aliasOf !== undefined) return undefined;
      let tensor = this.pool.take(meta.dtype, sizeOf(meta.shape), inputs);
      // A tensor taken out of the tape (`keep`) since it was pooled is the caller's now.
      while (tensor && !this.owns(tensor)) tensor = this.pool.take(meta.dtype, sizeOf(meta.shape), inputs);
      if (!tensor) return undefined;
      found = true;
      // A view only where the shape differs: a tape's outputs are its own tensors wherever they can be.
      return shapesEqual(tensor.shape, meta.shape) ? tensor : tensor.reshape(meta.shape);
    });
    return found ? { out } : undefined;
  }

  /**
   * Ends a forward scope that began at birth `mark` and node `firstNode`:
   * what it made is dead now, except `result` and what the rules of its
   * nodes read (`reads`, per node from `firstNode` on; undefined where a
   * rule does not say, and then nothing is freed), which dies after the last
   * rule to read it has run in backward.
   */
  endScope(
    mark: number,
    firstNode: number,
    reads: readonly (readonly Tensor[] | undefined)[],
    result: Tensor,
  ): void {
    const scoped = reads.slice(firstNode);
    if (!this.enabled || scoped.some((r) => r === undefined)) return;
    const lastReader = new Map<Tensor, number>();
    // Backward runs rules from the last node down: the lowest reader reads last.
    scoped.forEach((tensors, k) => {
      for (const t of tensors!) if (!lastReader.has(t.base)) lastReader.set(t.base, firstNode + k);
    });
    for (const base of this.bornSince(mark)) {
      if (base === result.base || this.pool.has(base) || this.#scheduled.has(base)) continue;
      const node = lastReader.get(base);
      if (node === undefined) {
        this.free(base);
        continue;
      }
      const list = this.#lastReadBy.get(node) ?? [];
      list.push(base);
      this.#lastReadBy.set(node, list);
      this.#scheduled.add(base);
    }
  }

  /** Whether backward will free tensors that node rules read (so it cannot run twice). */
  get freesReadTensors(): boolean {
    return this.#lastReadBy.size > 0;
  }

  /** After the backward rule of `node` ran: the scope tensors it was the last to read are dead. */
  afterRule(node: number): void {
    const dead = this.#lastReadBy.get(node);
    if (!dead) return;
    this.#lastReadBy.delete(node);
    for (const base of dead) {
      this.#scheduled.delete(base);
      this.free(base);
    }
  }

  /**
   * Forgets the nodes from `first` on, which the tape drops (a checkpointed
   * segment's recompute, differentiated): what they were the last to read is
   * dead, read by them or never (a rule no gradient reached).
   */
  forgetNodesFrom(first: number): void {
    for (const node of [...this.#lastReadBy.keys()]) if (node >= first) this.afterRule(node);
  }

  clear(): void {
    this.pool.clear();
    this.#born.clear();
    this.#births.length = 0;
    this.#lastReadBy.clear();
    this.#scheduled.clear();
  }
}

/**
 * How many entries of backward's gradient map hold each base tensor: one
 * gradient may be several variables' (an addition passes `dy` to both
 * inputs, a reshape a view of it), and is dead only when none holds it.
 */
export class GradientHolds {
  readonly #count = new Map<Tensor, number>();

  hold(tensor: Tensor): void {
    this.#count.set(tensor.base, (this.#count.get(tensor.base) ?? 0) + 1);
  }

  drop(tensor: Tensor): void {
    const n = (this.#count.get(tensor.base) ?? 0) - 1;
    if (n > 0) this.#count.set(tensor.base, n);
    else this.#count.delete(tensor.base);
  }

  held(tensor: Tensor): boolean {
    return this.#count.has(tensor.base);
  }
}
