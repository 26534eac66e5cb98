import {
  type AttrValues,
  add,
  type Backend,
  cast,
  copy,
  type DType,
  fill,
  formatShape,
  type HostArray,
  InvalidArgumentError,
  type KernelRunner,
  type KernelSpec,
  RayoError,
  type Shape,
  ShapeError,
  shapesEqual,
  Tensor,
  TrackingRunner,
} from '@rayo/core';
import { adoptAs } from '../adopt.js';
import { BackwardPass } from './backwardPass.js';
import { CheckpointFrame } from './checkpointFrame.js';
import { TensorLifetimes } from './lifetimes.js';
import { type BackwardFn, Variable } from './variable.js';

/** A half copy `halfCopy` made: of `size` elements of `base` from `offset`, when the tape's births were at `mark`. */
interface HalfCopy {
  readonly base: Tensor;
  readonly offset: number;
  readonly size: number;
  readonly dtype: 'f16' | 'bf16';
  readonly copy: Tensor;
  readonly mark: number;
}

export { type BackwardFn, Variable, type VariableInit } from './variable.js';

export interface TapeOptions {
  /**
   * Where kernels go: the backend itself (run eagerly, the default) or a
   * command batch of it (recorded; results exist once the batch is submitted).
   */
  readonly runner?: KernelRunner;
  /** Record backward rules (default true); false for evaluation, which keeps no closures. */
  readonly grad?: boolean;
  /**
   * Reuse the memory of dead tensors for later kernels (default true); false
   * keeps every tensor until `dispose`, e.g. to read intermediate values of
   * a scope while debugging.
   */
  readonly reuseMemory?: boolean;
}

export interface BackwardOptions {
  /** The gradient of the root (default: ones, for a root of one element). */
  readonly seed?: Tensor;
  /**
   * Called during `backward` as soon as leaves' gradients are final: right
   * after the backward rule that made the last contribution to them, with
   * the leaves, their `grad` already set. A leaf's last contribution comes
   * from its earliest use in forward, so a leaf used twice (a weight tied
   * between the embedding and the head) is final only when backward reaches
   * its first use. Every leaf that receives a gradient is reported exactly
   * once, in the order backward finishes them; kernels the callback runs on
   * the tape, or a `switchRunner` it makes, come before the rest of backward.
   * Data parallelism starts each bucket's all-reduce here.
   */
  readonly onGradientsFinal?: (leaves: readonly Variable[]) => void;
}

/**
 * Records operations on variables and runs them backward. Every tensor the tape
 * allocates (forward values, gradients of intermediates, temporaries) is its
 * own and is freed by `dispose()`; gradients of leaves that outlive the tape
 * (parameters) are handed over to them. Before that, the tape reuses the
 * memory of tensors that are dead (see `TensorLifetimes`) as the outputs of
 * its later kernels: the gradients of intermediates once consumed in
 * backward, and what a forward `scope` made that no backward rule reads.
 */
export class Tape {
  readonly backend: Backend;
  readonly #gradEnabled: boolean;
  /** Where the kernels go, and the tensors the tape owns. */
  readonly #owned: TrackingRunner;
  readonly #nodes: Variable[] = [];
  /** Per node: the tensors its backward rule reads, or undefined where the rule did not say. */
  readonly #reads: (readonly Tensor[] | undefined)[] = [];
  readonly #lifetimes: TensorLifetimes;
  #backwardFreed = false;
  readonly #tapeLeaves: Variable[] = [];
  /** The first pass of a checkpointed segment, while it runs. */
  #frame: CheckpointFrame | undefined;
  /** The backward pass, while `backward` runs (a checkpoint's rule propagates within it). */
  #pass: BackwardPass | undefined;
  /** Half copies of forward's tensors, one per source and dtype (see `halfCopy`). */
  readonly #halfCopies: HalfCopy[] = [];
  #disposed = false;

  constructor(backend: Backend, options: TapeOptions = {}) {
    this.backend = backend;
    this.#owned = new TrackingRunner(options.runner ?? backend);
    this.#gradEnabled = options.grad ?? true;
    this.#lifetimes = new TensorLifetimes((t) => this.#owned.has(t), options.reuseMemory ?? true);
  }

  /**
   * Whether operations record backward rules now: as the tape was made
   * (`grad`), except during the first pass of a checkpointed segment.
   */
  get gradEnabled(): boolean {
    return this.#gradEnabled && this.#frame === undefined;
  }

  /** Where the tape's kernels go now. */
  get runner(): KernelRunner {
    return this.#owned.inner;
  }

  /**
   * Sends the tape's later kernels to `runner`: e.g. a new command batch of
   * the backend, cutting a recorded backward into pieces that can be
   * submitted (and overlapped with collectives) one after another. Kernels
   * already recorded stay where they are; tensors keep their owner.
   */
  switchRunner(runner: KernelRunner): void {
    this.#alive('switchRunner');
    this.#owned.redirect(runner);
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  /** Number of tensors the tape holds (for tests and diagnostics). */
  get ownedTensors(): number {
    return this.#owned.size;
  }

  #alive(api: string): void {
    if (this.#disposed) {
      throw new RayoError('the tape was disposed', {
        operation: api,
        expected: 'a live tape',
        actual: 'a disposed tape',
      });
    }
  }

  // ---- tensors the tape owns -------------------------------------------------

  /**
   * Runs a kernel; outputs that are not inputs written in place belong to the
   * tape (in the memory of a dead tensor of the tape where one fits).
   */
  run<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
  ): Tensor[] {
    this.#alive(spec.name);
    this.#frame?.noteReads(inputs);
    const outputs = this.#owned.run(spec, inputs, attrs, this.#lifetimes.outputsFor(spec, inputs, attrs));
    for (const t of outputs) {
      if (!inputs.includes(t)) this.#lifetimes.born(t);
      // Written in place: a half copy of it (or the copy itself) no longer holds.
      else if (this.#halfCopies.length > 0) this.#forgetHalfCopies(t);
    }
    return outputs;
  }

  /**
   * `t` cast to `dtype` (a reduced-precision linear layer's saved input),
   * made once in forward for the layers that share an input (q, k and v;
   * gate and up): a later call for the same elements of the same tensor
   * returns the copy while neither was born again or written since and the
   * copy is not dead. Inside a checkpointed segment's passes and in backward,
   * and for a tensor the tape does not own, each call casts.
   */
  halfCopy(t: Tensor, dtype: 'f16' | 'bf16'): Tensor {
    const shared = this.#frame === undefined && this.#pass === undefined && this.#owned.has(t.base);
    if (!shared) return this.run1(cast, [t], { to: dtype });
    const lifetimes = this.#lifetimes;
    const same = (e: HalfCopy) =>
      e.base === t.base && e.offset === t.baseOffset && e.size === t.size && e.dtype === dtype;
    const known = this.#halfCopies.findIndex(same);
    if (known >= 0) {
      const e = this.#halfCopies[known]!;
      const holds =
        !lifetimes.bornAfter(e.base, e.mark) &&
        !lifetimes.bornAfter(e.copy, e.mark) &&
        !lifetimes.pool.has(e.copy.base);
      if (holds) return this.reshape(e.copy, t.shape);
      this.#halfCopies.splice(known, 1);
    }
    const copy = this.run1(cast, [t], { to: dtype });
    this.#halfCopies.push({
      base: t.base,
      offset: t.baseOffset,
      size: t.size,
      dtype,
      copy,
      mark: lifetimes.mark,
    });
    return copy;
  }

  #forgetHalfCopies(written: Tensor): void {
    const base = written.base;
    for (let i = this.#halfCopies.length - 1; i >= 0; i--) {
      const e = this.#halfCopies[i]!;
      if (e.base === base || e.copy.base === base) this.#halfCopies.splice(i, 1);
    }
  }

  /** `run` for kernels of one output. */
  run1<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
  ): Tensor {
    return this.run(spec, inputs, attrs)[0]!;
  }

  /** A tensor of `shape` filled with `value`, on the device. */
  full(shape: Shape, value: number): Tensor {
    this.#alive('full');
    const t = this.#owned.adopt(this.backend.empty(shape));
    this.#owned.run(fill, [t], { value });
    this.#lifetimes.born(t);
    return t;
  }

  zeros(shape: Shape): Tensor {
    this.#alive('zeros');
    const t = this.#owned.adopt(this.backend.zeros(shape));
    this.#lifetimes.born(t);
    return t;
  }

  ones(shape: Shape): Tensor {
    return this.full(shape, 1);
  }

  /** Uploads host data to a tensor the tape owns. */
  upload(data: HostArray | readonly number[], shape: Shape, dtype: DType = 'f32'): Tensor {
    this.#alive('upload');
    const t = this.#owned.adopt(this.backend.upload(data, shape, dtype));
    this.#lifetimes.born(t);
    return t;
  }

  /**
   * The same elements under another shape, without a copy (valid while
   * `tensor` is); `tensor` itself when the shape is already `shape`. Records
   * nothing: the differentiable operation is `reshape(tape, x, shape)`.
   */
  reshape(tensor: Tensor, shape: Shape): Tensor {
    return shapesEqual(tensor.shape, shape) ? tensor : tensor.reshape(shape);
  }

  /**
   * Takes a tensor out of the tape: the caller disposes it. A view is copied,
   * since the memory behind it stays the tape's.
   */
  keep(source: Variable | Tensor): Tensor {
    this.#alive('keep');
    const tensor = source instanceof Tensor ? source : source.value;
    if (tensor.isView) {
      return this.runner.run(copy, [tensor])[0]!;
    }
    return this.#owned.keep(tensor);
  }

  // ---- variables ----------------------------------------------------------------

  /** A leaf that needs no gradient; the tensor stays the caller's. */
  constant(value: Tensor, name?: string): Variable {
    this.#alive('constant');
    return new Variable(value, { requiresGrad: false, name });
  }

  /** A leaf whose gradient `backward` computes into `grad` (freed with the tape); the tensor stays the caller's. */
  variable(value: Tensor, name?: string): Variable {
    this.#alive('variable');
    const v = new Variable(value, { requiresGrad: this.gradEnabled, name });
    this.#tapeLeaves.push(v);
    return v;
  }

  /** Uploads host data as a constant leaf owned by the tape. */
  input(data: HostArray | readonly number[], shape: Shape, dtype: DType = 'f32'): Variable {
    return this.constant(this.upload(data, shape, dtype));
  }

  /**
   * Records the result of an operation. `value` should be a tensor this tape
   * made (its output or a view); `backward` is kept only when an input
   * requires a gradient. `reads` lists every tensor `backward` reads apart
   * from `dy` (inputs' values, the output, temporaries); a scope frees what
   * no rule reads, and nothing at all where a rule leaves `reads` out.
   */
  record(
    value: Tensor,
    inputs: readonly Variable[],
    backward: BackwardFn,
    reads?: readonly (Tensor | undefined)[],
  ): Variable {
    this.#alive('record');
    this.#frame?.noteInputs(inputs);
    const requiresGrad = this.gradEnabled && inputs.some((v) => v.requiresGrad);
    if (!requiresGrad) return new Variable(value);
    const v = new Variable(value, { requiresGrad: true }, inputs, backward);
    this.#nodes.push(v);
    this.#reads.push(reads?.filter((t): t is Tensor => t !== undefined));
    return v;
  }

  /**
   * Runs `forward` (a module's forward) as a scope: of the tensors the tape
   * makes in it, only the returned variable's value may be used after it,
   * by the caller or by later operations. The rest is dead at once where no
   * backward rule reads it, and after the last rule that reads it in
   * `backward`; its memory serves later kernels of the tape. Values of the
   * scope's intermediate variables are not to be read after the scope.
   */
  scope(forward: () => Variable): Variable {
    this.#alive('scope');
    const mark = this.#lifetimes.mark;
    const firstNode = this.#nodes.length;
    const result = forward();
    this.#lifetimes.endScope(mark, firstNode, this.#reads, result.value);
    return result;
  }

  /**
   * Runs `forward` (a transformer block, say) as a checkpointed segment:
   * forward runs once without backward rules, as a scope, so that only its
   * result outlives it; backward runs it again (the same kernels, so the
   * same values where they are deterministic) and differentiates that
   * recording at once, so that one segment's activations are alive at a
   * time. `forward` must compute the same thing both times: read only
   * variables, parameters and tensors that stay as they are, and draw no
   * random numbers of its own. The segment is one node of the tape whose
   * inputs are the variables from outside that it reads and that need a
   * gradient; its recompute goes where the tape's kernels go at that point
   * of backward, so a recorded step replays it. Without gradients (an
   * evaluation tape, or inside another segment's first pass) it is
   * `forward()`.
   */
  checkpoint(forward: () => Variable): Variable {
    this.#alive('checkpoint');
    if (!this.gradEnabled) return forward();
    const mark = this.#lifetimes.mark;
    const frame = new CheckpointFrame((t) => this.#owned.has(t.base) && !this.#lifetimes.bornAfter(t, mark));
    this.#frame = frame;
    let result: Variable;
    try {
      result = this.scope(forward);
    } finally {
      this.#frame = undefined;
    }
    const inputs = frame.inputs;
    if (inputs.length === 0) return result;
    return this.record(result.value, inputs, (dy) => this.#recompute(forward, inputs, dy), frame.reads);
  }

  /**
   * A checkpointed segment's backward rule: records `forward` again (nodes
   * after the tape's last), propagates `dy` through those nodes within the
   * running backward pass, and forgets them; returns the gradients of
   * `inputs`.
   */
  #recompute(forward: () => Variable, inputs: readonly Variable[], dy: Tensor): (Tensor | undefined)[] {
    const pass = this.#pass;
    if (!pass) {
      throw new RayoError('a checkpointed segment is differentiated only by backward', {
        operation: 'checkpoint',
        expected: 'its rule run by Tape.backward',
        actual: 'a direct call',
      });
    }
    const first = this.#nodes.length;
    const output = this.scope(forward);
    const grads = new Map<Variable, Tensor>();
    pass.setGrad(grads, output, dy);
    // Tensors born before here (dy, the recomputed activations) die by their own rules, not by the segment's.
    pass.propagate(grads, this.#nodes.lastIndexOf(output), first, this.#lifetimes.mark);
    this.#nodes.length = first;
    this.#reads.length = first;
    this.#lifetimes.forgetNodesFrom(first);
    const dxs = inputs.map((v) => (grads.has(v) ? pass.dropGrad(grads, v) : undefined));
    // Gradients of anything else (a variable made inside the segment) are the segment's temporaries.
    for (const v of [...grads.keys()]) pass.dropGrad(grads, v);
    return dxs;
  }

  // ---- backward -------------------------------------------------------------------

  /**
   * Propagates gradients from `root` to every leaf that requires one, and
   * adds them to the leaves' `grad`. `seed` (or `options.seed`) is the
   * gradient of `root` (default: ones, for a root of one element).
   */
  backward(root: Variable, seedOrOptions?: Tensor | BackwardOptions): void {
    this.#alive('backward');
    const options: BackwardOptions =
      seedOrOptions instanceof Tensor ? { seed: seedOrOptions } : (seedOrOptions ?? {});
    const { seed, onGradientsFinal } = options;
    if (!root.requiresGrad) {
      throw new InvalidArgumentError(
        'nothing to differentiate: the root does not depend on a leaf that requires a gradient',
        {
          operation: 'backward',
          argument: 'root',
          expected: 'a variable computed from parameters or variables',
          actual: root.isLeaf ? 'a constant' : 'a variable recorded without gradients',
        },
      );
    }
    if (seed && !shapesEqual(seed.shape, root.shape)) {
      throw new ShapeError('the seed gradient must have the shape of the root', {
        operation: 'backward',
        argument: 'seed',
        expected: formatShape(root.shape),
        actual: formatShape(seed.shape),
      });
    }
    if (!seed && root.size !== 1) {
      throw new InvalidArgumentError('a root of more than one element needs a seed gradient', {
        operation: 'backward',
        argument: 'seed',
        expected: `a tensor of shape ${formatShape(root.shape)}`,
        actual: 'nothing',
      });
    }
    const end = root.isLeaf ? -1 : this.#nodes.lastIndexOf(root);
    if (!root.isLeaf && end === -1) {
      throw new InvalidArgumentError('the root was recorded on another tape', {
        operation: 'backward',
        argument: 'root',
        expected: 'a variable computed on this tape',
        actual: 'a variable of another tape',
      });
    }
    if (this.#backwardFreed) {
      throw new RayoError('a backward already freed tensors that the backward rules read', {
        operation: 'backward',
        argument: 'root',
        expected: 'one backward per tape whose forward used scopes',
        actual: 'a second backward',
      });
    }
    this.#backwardFreed = this.#lifetimes.freesReadTensors;
    const finalAfter = onGradientsFinal ? this.#finalAfter(root, end) : undefined;
    // Tensors born from here on are backward's own: gradients and temporaries.
    const mark = this.#lifetimes.mark;
    const pass = new BackwardPass({
      nodes: this.#nodes,
      lifetimes: this.#lifetimes,
      add: (a, b) => this.run1(add, [a, b]),
    });
    const grads = new Map<Variable, Tensor>();
    pass.setGrad(grads, root, seed ?? this.ones(root.shape));
    const depositFinal = (leaves: readonly Variable[]): void => {
      const done = leaves.filter((v) => grads.has(v));
      for (const v of done) {
        const g = pass.dropGrad(grads, v);
        this.#deposit(v, g);
        // Kept by the leaf, or added to its earlier gradient and dead.
        pass.freeIfDead(g, mark);
      }
      if (done.length > 0) onGradientsFinal!(done);
    };
    this.#pass = pass;
    try {
      pass.propagate(grads, end, 0, mark, (i) => {
        const final = finalAfter?.get(i);
        if (final) depositFinal(final);
      });
    } finally {
      this.#pass = undefined;
    }
    const leaves = [...grads.keys()].filter((v) => v.isLeaf && v.requiresGrad);
    if (onGradientsFinal) depositFinal(leaves);
    else for (const v of leaves) this.#deposit(v, grads.get(v)!);
  }

  /**
   * For each node that backward from `root` (node `end`) runs, the leaves
   * that get their last gradient contribution from it: backward walks the
   * nodes from `end` down, so that is the lowest-numbered reached node that
   * takes the leaf as an input.
   */
  #finalAfter(root: Variable, end: number): Map<number, Variable[]> {
    const reached = new Set<Variable>([root]);
    const last = new Map<Variable, number>();
    for (let i = end; i >= 0; i--) {
      const node = this.#nodes[i]!;
      if (!reached.has(node)) continue;
      for (const input of node.inputs) {
        if (!input.requiresGrad) continue;
        reached.add(input);
        if (input.isLeaf) last.set(input, i);
      }
    }
    const byNode = new Map<number, Variable[]>();
    for (const [leaf, i] of last) {
      const list = byNode.get(i) ?? [];
      list.push(leaf);
      byNode.set(i, list);
    }
    return byNode;
  }

  /** Adds `g` to a leaf's gradient; the leaf owns the result exclusively (clipping scales it in place). */
  #deposit(leaf: Variable, g: Tensor): void {
    const previous = leaf.grad;
    const home = leaf.gradientHome?.();
    if (home) {
      // g (or the sum) stays the tape's, freed once dead; the leaf's gradient lives at home.
      const sum = previous ? this.run1(add, [previous, g]) : g;
      this.runner.run(copy, [sum], {}, { out: [home] });
      leaf.grad = home;
      return;
    }
    if (previous) {
      leaf.grad = this.#handOver(this.run1(add, [previous, g]));
      // Freed with the tape, after the kernels that read it.
      this.#owned.adopt(previous);
    } else {
      leaf.grad = this.#handOver(g);
    }
  }

  /** A tensor of the shape of `t` with its values that the caller owns: `t`'s own memory where the tape has it. */
  #handOver(t: Tensor): Tensor {
    if (!t.isView && this.#owned.has(t)) return this.#owned.keep(t);
    if (t.isView && this.#owned.has(t.base)) {
      // A reshaped gradient (a bias's column sums, an output in reused memory): the leaf takes over the memory.
      this.#owned.keep(t.base);
      return adoptAs(t.base, t.shape);
    }
    return this.#owned.keep(this.run1(copy, [t]));
  }

  /** Frees every tensor the tape owns, and the gradients of its own leaves. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#owned.dispose();
    this.#lifetimes.clear();
    for (const v of this.#tapeLeaves) v.zeroGrad();
    this.#nodes.length = 0;
    this.#reads.length = 0;
    this.#tapeLeaves.length = 0;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
