import {
  type CollectiveOptions,
  type Communicator,
  InvalidArgumentError,
  type KernelRunner,
  RayoError,
  type ReduceOp,
  type Tensor,
} from '@rayo/core';
import type { Variable } from '../autograd/tape.js';
import type { HasParameters } from '../checkpoint/checkpoint.js';
import type { Parameter } from '../nn/module.js';
import { AdamW } from '../optim/adamw.js';
import type { Optimizer } from '../optim/optimizer.js';
import { Rng } from '../random.js';
import { ShardedAdamW, type ShardedAdamWOptions } from './shardedAdamW.js';

/** PyTorch DDP's default bucket: big enough to keep the link busy, small enough to start early. */
export const DEFAULT_BUCKET_BYTES = 25 * 2 ** 20;

export interface DataParallelOptions {
  readonly communicator: Communicator;
  /** The model (its `namedParameters()`), or the parameters in model order. */
  readonly model: HasParameters | readonly Parameter[];
  /** Gradient bytes per all-reduce; default 25 MiB. */
  readonly bucketBytes?: number;
  /**
   * Shard the optimizer across the ranks (ZeRO stage 1; default false):
   * `createAdamW` then gives a `ShardedAdamW`, which moves each bucket's
   * parameters into one flat buffer; gradients are copied into a flat
   * buffer per bucket and reduce-scattered instead of all-reduced, each rank
   * updates its block and all-gathers it, one collective per bucket each.
   */
  readonly shardOptimizer?: boolean;
}

/** A group of parameters whose gradients are all-reduced together, and their size. */
export interface GradientBucket {
  readonly parameters: readonly Parameter[];
  readonly names: readonly string[];
  readonly bytes: number;
}

/**
 * Data parallelism over a `Communicator`: every rank holds the whole model,
 * trains on its own share of each batch and averages gradients with the
 * others before the update, so all ranks keep the same parameters.
 *
 * Buckets follow reverse parameter order, which is about the order backward
 * finishes gradients in. As in PyTorch's DDP, a step may all-reduce each
 * bucket as soon as backward has finished its last gradient, overlapped
 * with the rest of backward: `bucketTracker()` follows the tape's
 * `onGradientsFinal` and says which buckets are complete, and
 * `allReduceBucket(..., { overlap: true })` starts one of them; the steps
 * (`dataParallelStep`, `ReplayedDataParallelStep`) do this by default. Each
 * bucket is one all-reduce of the same tensors whether overlapped or not,
 * so the results are the same bits; only the timing changes.
 */
export class DataParallel {
  readonly communicator: Communicator;
  readonly parameters: readonly Parameter[];
  readonly buckets: readonly GradientBucket[];
  /** Whether the optimizer is sharded across the ranks (`createAdamW` gives a `ShardedAdamW`). */
  readonly shardOptimizer: boolean;
  readonly #named: readonly [string, Parameter][];
  readonly #bucketOf = new Map<Variable, number>();
  #sharded: ShardedAdamW | undefined;

  constructor(options: DataParallelOptions) {
    this.communicator = options.communicator;
    const named: [string, Parameter][] = Array.isArray(options.model)
      ? (options.model as readonly Parameter[]).map((p, i) => [p.name ?? `parameters[${i}]`, p])
      : (options.model as HasParameters).namedParameters();
    this.#named = named;
    this.parameters = named.map(([, p]) => p);
    this.shardOptimizer = options.shardOptimizer ?? false;
    const limit = options.bucketBytes ?? DEFAULT_BUCKET_BYTES;
    if (!(limit > 0)) {
      throw new InvalidArgumentError('the bucket size must be positive', {
        operation: 'DataParallel',
        argument: 'bucketBytes',
        expected: '> 0',
        actual: String(limit),
      });
    }
    this.buckets = bucketsOf(named, limit);
    this.buckets.forEach((b, i) => {
      for (const p of b.parameters) this.#bucketOf.set(p, i);
    });
  }

  /**
   * Follows one backward: give it the leaves of each `onGradientsFinal` call;
   * it returns the indices of the buckets whose every parameter is now final
   * (ascending), each once. Every rank runs the same backward, so every rank
   * finds the same buckets at the same points and issues the same
   * collectives in the same order.
   */
  bucketTracker(): (finished: readonly Variable[]) => number[] {
    const missing = this.buckets.map((b) => b.parameters.length);
    return (finished) => {
      const ready: number[] = [];
      for (const leaf of finished) {
        const i = this.#bucketOf.get(leaf);
        if (i !== undefined && --missing[i]! === 0) ready.push(i);
      }
      return ready.sort((a, b) => a - b);
    };
  }

  get rank(): number {
    return this.communicator.rank;
  }

  get size(): number {
    return this.communicator.size;
  }

  /** Whether this rank writes checkpoints and logs (rank 0). */
  get isRankZero(): boolean {
    return this.communicator.rank === 0;
  }

  /**
   * AdamW over the model's parameters: sharded across the ranks with
   * `shardOptimizer` (one per `DataParallel`; it moves the parameters into
   * its flat buckets, so make it before recording a step), else a plain `AdamW`.
   */
  createAdamW(options: ShardedAdamWOptions = {}): AdamW {
    if (!this.shardOptimizer) return new AdamW(this.#named, options);
    if (this.#sharded) {
      throw new InvalidArgumentError('a data-parallel model has one sharded optimizer', {
        operation: 'DataParallel.createAdamW',
        argument: 'this',
        expected: 'a DataParallel whose sharded optimizer was not made yet',
        actual: 'one already made',
      });
    }
    this.#sharded = new ShardedAdamW(this.communicator, this.buckets, options);
    return this.#sharded;
  }

  /**
   * The sharded optimizer a step drives, after checking that `optimizer` is
   * the one this wrapper made (undefined without `shardOptimizer`).
   */
  shardedOptimizer(optimizer: Optimizer, operation: string): ShardedAdamW | undefined {
    if (this.shardOptimizer ? optimizer === this.#sharded : !(optimizer instanceof ShardedAdamW)) {
      return this.#sharded;
    }
    throw new InvalidArgumentError('the optimizer does not match the data-parallel wrapper', {
      operation,
      argument: 'optimizer',
      expected: this.shardOptimizer
        ? "the DataParallel's createAdamW() (shardOptimizer: true)"
        : 'an optimizer that is not sharded (shardOptimizer is off)',
      actual: optimizer instanceof ShardedAdamW ? 'another ShardedAdamW' : optimizer.kind,
    });
  }

  /** Makes every rank's parameters rank `root`'s (call once before training). */
  broadcastParameters(root = 0): void {
    for (const p of this.parameters) this.communicator.broadcast(p.value, root);
  }

  /** Averages every parameter's gradient across the ranks, bucket by bucket (after backward). */
  allReduceGradients(): void {
    this.allReduceGradientsOf((p) => p.grad);
  }

  /** The same for gradients kept elsewhere than on the parameters (a replayed step's recording). */
  allReduceGradientsOf(gradientOf: (parameter: Parameter) => Tensor | undefined): void {
    for (const i of this.buckets.keys()) this.allReduceBucket(i, gradientOf);
  }

  /** Averages the gradients of bucket `index` across the ranks: one collective, overlapped with later work if asked. */
  allReduceBucket(
    index: number,
    gradientOf: (parameter: Parameter) => Tensor | undefined = (p) => p.grad,
    options?: CollectiveOptions,
  ): void {
    this.communicator.allReduce(this.#gradients(index, gradientOf), 'avg', options);
  }

  /**
   * What a step records once backward has finished bucket `index`, before
   * the batch holding backward so far is submitted: with a sharded
   * optimizer, the copies of the bucket's gradients into its flat buffer
   * (`ShardedAdamW.stageGradients`); nothing otherwise.
   */
  stageBucket(
    index: number,
    runner: KernelRunner,
    gradientOf: (parameter: Parameter) => Tensor | undefined,
  ): void {
    this.#sharded?.stageGradients(index, runner, gradientOf);
  }

  /**
   * What a step does with bucket `index` once backward has finished it (and
   * `stageBucket` has run): all-reduced, or with a sharded optimizer its
   * flat buffer reduce-scattered into each rank's block
   * (`ShardedAdamW.reduceBucket`).
   */
  reduceBucket(
    index: number,
    gradientOf: (parameter: Parameter) => Tensor | undefined,
    options?: CollectiveOptions,
  ): void {
    if (this.#sharded) this.#sharded.reduceBucket(index, options);
    else this.communicator.allReduce(this.#gradients(index, gradientOf), 'avg', options);
  }

  #gradients(index: number, gradientOf: (parameter: Parameter) => Tensor | undefined): Tensor[] {
    const bucket = this.buckets[index]!;
    return bucket.parameters.map((p, i) => {
      const grad = gradientOf(p);
      if (!grad) {
        // A gradient present on one rank only would leave the ranks' collectives out of step.
        throw new RayoError('a parameter has no gradient to all-reduce', {
          operation: 'DataParallel.allReduceGradients',
          argument: bucket.names[i],
          expected:
            'a gradient on every rank (call after backward; every parameter must be used by the loss)',
          actual: 'none',
        });
      }
      return grad;
    });
  }

  /** Reduces scalar metrics across the ranks (the mean by default), for logging on rank 0. */
  async reduceMetrics(
    metrics: Readonly<Record<string, number>>,
    op: ReduceOp = 'avg',
  ): Promise<Record<string, number>> {
    const names = Object.keys(metrics);
    const backend = this.communicator.backend;
    const values: Tensor = backend.upload(
      Float32Array.from(names, (n) => metrics[n]!),
      [names.length],
    );
    try {
      this.communicator.allReduce([values], op);
      const reduced = await values.read();
      this.throwIfFailed();
      return Object.fromEntries(names.map((n, i) => [n, reduced[i]!]));
    } finally {
      values.dispose();
    }
  }

  /** Throws the communicator's failure, if it has one (results read since are meaningless). */
  throwIfFailed(): void {
    const failure = this.communicator.failure;
    if (failure) throw failure;
  }
}

function bucketsOf(named: readonly [string, Parameter][], limit: number): GradientBucket[] {
  const buckets: GradientBucket[] = [];
  let current: { parameters: Parameter[]; names: string[]; bytes: number } | undefined;
  for (const [name, p] of [...named].reverse()) {
    const bytes = p.value.byteLength;
    if (current && current.bytes + bytes > limit) {
      buckets.push(current);
      current = undefined;
    }
    current ??= { parameters: [], names: [], bytes: 0 };
    current.parameters.push(p);
    current.names.push(name);
    current.bytes += bytes;
  }
  if (current) buckets.push(current);
  return buckets;
}

/**
 * The rows [start, end) of a global batch that `rank` trains on: equal shares,
 * so every rank runs the same shapes and the average of the ranks' mean
 * losses is the mean loss of the global batch.
 */
export function shardRange(globalBatch: number, rank: number, size: number): { start: number; end: number } {
  if (!Number.isInteger(globalBatch) || globalBatch % size !== 0 || globalBatch <= 0) {
    throw new InvalidArgumentError('the global batch must split evenly across the ranks', {
      operation: 'shardRange',
      argument: 'globalBatch',
      expected: `a positive multiple of ${size}`,
      actual: String(globalBatch),
    });
  }
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new InvalidArgumentError('rank out of range', {
      operation: 'shardRange',
      argument: 'rank',
      expected: `an integer in [0, ${size})`,
      actual: String(rank),
    });
  }
  const share = globalBatch / size;
  return { start: rank * share, end: (rank + 1) * share };
}

/**
 * This rank's indices of a data set of `count` examples for one epoch, as
 * PyTorch's DistributedSampler: one permutation shared by all ranks (`Rng`
 * seeded by `seed + epoch`, or the identity without `shuffle`), padded by wrapping
 * around to a multiple of `size`, and dealt out round-robin.
 */
export function shardIndices(
  count: number,
  options: {
    readonly rank: number;
    readonly size: number;
    readonly shuffle?: boolean;
    readonly seed?: number;
    readonly epoch?: number;
  },
): number[] {
  const { rank, size } = options;
  shardRange(size, rank, size);
  const order = options.shuffle
    ? Array.from(new Rng((options.seed ?? 0) + (options.epoch ?? 0)).permutation(count))
    : Array.from({ length: count }, (_, i) => i);
  const total = Math.ceil(count / size) * size;
  for (let i = count; i < total; i++) order.push(order[i - count]!);
  return order.filter((_, i) => i % size === rank);
}
