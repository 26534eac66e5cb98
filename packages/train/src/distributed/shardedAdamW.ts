import {
  type CollectiveOptions,
  type Communicator,
  formatShape,
  globalNorm,
  InvalidArgumentError,
  type KernelRunner,
  ShapeError,
  shapesEqual,
  type Tensor,
} from '@rayo/core';
import { Parameter } from '../nn/module.js';
import { AdamW, type AdamWOptions } from '../optim/adamw.js';
import type { HostTensor, StoredState } from '../optim/optimizer.js';

/** AdamW's state slots, each the shape of its parameter. */
const SLOTS = ['m', 'v'] as const;

/** One model parameter and what this rank's optimizer updates of it. */
interface Slot {
  readonly name: string;
  readonly parameter: Parameter;
  /**
   * Sharded: this rank's f32 master copy of its block of the flattened
   * parameter, its reduced gradient as `grad`. Replicated (the element count
   * does not divide by the ranks): the parameter itself, updated whole on every rank.
   */
  readonly shard: Parameter;
  readonly sharded: boolean;
}

/** Below this many bytes a parameter stays whole: its collectives would cost their latency and save nothing. */
export const DEFAULT_SHARD_MIN_BYTES = 64 * 2 ** 10;

function slotsOf(named: readonly [string, Parameter][], size: number, minBytes: number): Slot[] {
  return named.map(([name, parameter]) => {
    const n = parameter.value.size;
    if (size === 1 || n % size !== 0 || parameter.value.byteLength < minBytes) {
      return { name, parameter, shard: parameter, sharded: false };
    }
    const backend = parameter.value.backend;
    const shard = new Parameter(backend.zeros([n / size]), name);
    shard.grad = backend.zeros([n / size]);
    return { name, parameter, shard, sharded: true };
  });
}

export interface ShardedAdamWOptions extends AdamWOptions {
  /**
   * Parameters smaller than this stay whole on every rank, all-reduced as
   * without sharding (default 64 KiB: norms' weights, biases), which saves a
   * reduce-scatter and an all-gather each for a few bytes of state.
   */
  readonly shardMinBytes?: number;
}

/**
 * AdamW sharded across the ranks of a data-parallel group (ZeRO stage 1):
 * each parameter whose element count divides by the ranks is split into
 * equal blocks of its flattened elements, and rank r keeps only block r's f32
 * master copy, reduced gradient and moments m and v. Gradients are
 * reduce-scattered (averaged) into the blocks instead of all-reduced, each
 * rank updates its blocks, and an all-gather writes every rank's blocks back
 * into the whole parameters. Parameters that do not split evenly or are
 * small (`shardMinBytes`) are all-reduced and updated whole on every rank,
 * as without sharding. Every collective works on a parameter's own tensors, so
 * no gradient or weight is copied into a flat buffer first.
 *
 * Made by `DataParallel.createAdamW` and driven by the data-parallel steps.
 * Its state tensors are the blocks; checkpoints hold it whole
 * (`readState` gathers it, a collective every rank calls; `loadState`
 * takes this rank's blocks), so a checkpoint loads on any number of ranks,
 * sharded or not.
 */
export class ShardedAdamW extends AdamW {
  readonly communicator: Communicator;
  readonly #slots: readonly Slot[];
  readonly #slotOf: ReadonlyMap<Parameter, Slot>;
  /** Every rank's local gradient norm, gathered to make the global one. */
  readonly #norms: Tensor;
  /** Whether the master blocks must be refreshed from the parameters before the next update. */
  #stale = true;
  #zero: Tensor | undefined;

  constructor(
    communicator: Communicator,
    named: readonly [string, Parameter][],
    options: ShardedAdamWOptions = {},
  ) {
    const slots = slotsOf(named, communicator.size, options.shardMinBytes ?? DEFAULT_SHARD_MIN_BYTES);
    const original = new Map(slots.map((s) => [s.shard, s.parameter]));
    const noDecay = options.noDecay;
    super(
      slots.map((s) => [s.name, s.shard] as const),
      { ...options, noDecay: noDecay && ((name, shard) => noDecay(name, original.get(shard) ?? shard)) },
    );
    this.communicator = communicator;
    this.#slots = slots;
    this.#slotOf = new Map(slots.map((s) => [s.parameter, s]));
    this.#norms = this.backend.zeros([communicator.size]);
  }

  /** Whether parameter `p` is split across the ranks (else updated whole on each). */
  isSharded(p: Parameter): boolean {
    return this.#slotOf.get(p)?.sharded ?? false;
  }

  /** Bytes of f32 optimizer tensors this rank holds: master blocks, reduced gradient blocks, m and v. */
  get stateBytes(): number {
    return this.#slots.reduce((sum, s) => sum + (s.sharded ? 4 : 2) * s.shard.value.byteLength, 0);
  }

  /**
   * Marks the master blocks out of date: the next step refreshes them from
   * the parameters (after parameters were written other than by this
   * optimizer: a broadcast, a checkpoint's model loaded alone).
   */
  invalidate(): void {
    this.#stale = true;
  }

  /**
   * Copies each rank's block of the parameters into its master blocks if
   * they are out of date: a reduce-scatter taking the maximum of equal
   * values, which is each of them exactly. A collective: every rank calls it.
   */
  refresh(): void {
    if (!this.#stale) return;
    for (const s of this.#slots) {
      if (s.sharded) this.communicator.reduceScatter(s.parameter.value, s.shard.value, 'max');
    }
    this.#stale = false;
  }

  /**
   * Averages the gradients of `parameters` (one bucket) across the ranks:
   * a reduce-scatter into this rank's block for each sharded parameter, one
   * all-reduce for the others.
   */
  reduceGradients(
    gradients: readonly Tensor[],
    parameters: readonly Parameter[],
    options?: CollectiveOptions,
  ): void {
    const whole: Tensor[] = [];
    parameters.forEach((p, i) => {
      const slot = this.#slotFor(p);
      if (slot.sharded) this.communicator.reduceScatter(gradients[i]!, slot.shard.grad!, 'avg', options);
      else whole.push(gradients[i]!);
    });
    if (whole.length > 0) this.communicator.allReduce(whole, 'avg', options);
  }

  /**
   * This rank's part of the global gradient norm: the norm of its gradient
   * blocks, and on rank 0 also of the whole (replicated) gradients, so each
   * element counts once. `gradientOf` gives a replicated parameter's gradient.
   */
  localNorm(runner: KernelRunner, gradientOf: (p: Parameter) => Tensor | undefined): Tensor {
    const grads = this.#slots.flatMap((s) => {
      if (s.sharded) return [s.shard.grad!];
      const grad = this.communicator.rank === 0 ? gradientOf(s.parameter) : undefined;
      return grad ? [grad] : [];
    });
    // A rank with nothing to count still takes part in the gather, with zero.
    if (grads.length === 0) this.#zero ??= this.backend.zeros([1]);
    return runner.run(globalNorm, grads.length > 0 ? grads : [this.#zero!])[0]!;
  }

  /** Gathers every rank's `localNorm` (a collective); `globalNorm(runner)` then reads them. */
  gatherNorms(local: Tensor): void {
    this.communicator.allGather(local, this.#norms);
  }

  /** The global gradient norm from the gathered local ones: the L2 norm of the L2 norms. */
  globalNorm(runner: KernelRunner): Tensor {
    return runner.run(globalNorm, [this.#norms])[0]!;
  }

  /** Writes every rank's updated blocks into the whole parameters on every rank (a collective each). */
  gatherParameters(options?: CollectiveOptions): void {
    for (const s of this.#slots) {
      if (s.sharded) this.communicator.allGather(s.shard.value, s.parameter.value, options);
    }
  }

  /** Clears the model's gradients; the gradient blocks are overwritten by the next reduce-scatter. */
  override zeroGrad(): void {
    for (const s of this.#slots) s.parameter.zeroGrad();
  }

  /**
   * The state whole, as an unsharded AdamW holds it: each block gathered
   * from the ranks and read. A collective: every rank calls it (every rank
   * calls `saveCheckpoint`; rank 0 writes the bytes).
   */
  override async readState(): Promise<[string, StoredState][]> {
    const out: [string, StoredState][] = [];
    for (const [i, s] of this.#slots.entries()) {
      for (const slot of SLOTS) {
        const name = `${s.name}.${slot}`;
        const block = this.slot(i, slot);
        const { shape } = s.parameter;
        if (!s.sharded) {
          out.push([name, { dtype: 'f32', shape, data: await block.read() }]);
          continue;
        }
        const whole = this.backend.empty([s.parameter.value.size]);
        try {
          this.communicator.allGather(block, whole);
          out.push([name, { dtype: 'f32', shape, data: await whole.read() }]);
        } finally {
          whole.dispose();
        }
      }
    }
    return out;
  }

  /** Checks that `tensors` hold every state tensor whole (the parameter's shape), writing nothing. */
  override checkState(tensors: ReadonlyMap<string, HostTensor>): void {
    for (const s of this.#slots) {
      for (const slot of SLOTS) {
        const name = `${s.name}.${slot}`;
        const source = tensors.get(name);
        const expected = formatShape(s.parameter.shape);
        if (!source) {
          throw new InvalidArgumentError('optimizer state is missing a tensor', {
            operation: 'ShardedAdamW.loadState',
            argument: name,
            expected: `a tensor of shape ${expected}`,
            actual: 'nothing',
          });
        }
        if (!shapesEqual(source.shape, s.parameter.shape)) {
          throw new ShapeError('optimizer state has the wrong shape', {
            operation: 'ShardedAdamW.loadState',
            argument: name,
            expected,
            actual: formatShape(source.shape),
          });
        }
      }
    }
  }

  /** Takes this rank's block of each whole state tensor; the master blocks follow the parameters at the next step. */
  override loadState(tensors: ReadonlyMap<string, HostTensor>, stepCount: number): void {
    this.checkState(tensors);
    const { rank } = this.communicator;
    for (const [i, s] of this.#slots.entries()) {
      const n = s.shard.value.size;
      for (const slot of SLOTS) {
        const data = tensors.get(`${s.name}.${slot}`)!.data;
        const target = this.slot(i, slot);
        const block = s.sharded ? data.subarray(rank * n, (rank + 1) * n) : data;
        const staged = this.backend.upload(block, target.shape, target.dtype);
        this.backend.copy(staged, target);
        staged.dispose();
      }
    }
    this.stepCount = stepCount;
    this.invalidate();
  }

  override dispose(): void {
    for (const s of this.#slots) {
      if (!s.sharded) continue;
      s.shard.value.dispose();
      s.shard.grad?.dispose();
    }
    this.#norms.dispose();
    this.#zero?.dispose();
    super.dispose();
  }

  #slotFor(p: Parameter): Slot {
    const slot = this.#slotOf.get(p);
    if (!slot) {
      throw new InvalidArgumentError('the parameter is not one the sharded optimizer updates', {
        operation: 'ShardedAdamW.reduceGradients',
        argument: p.name ?? 'parameter',
        expected: 'a parameter of the data-parallel model',
        actual: 'another',
      });
    }
    return slot;
  }
}
