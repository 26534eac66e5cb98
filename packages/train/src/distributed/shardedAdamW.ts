import {
  type CollectiveOptions,
  type Communicator,
  copy,
  DTypeError,
  formatShape,
  globalNorm,
  InvalidArgumentError,
  type KernelRunner,
  type OverlapMark,
  ShapeError,
  shapesEqual,
  type Tensor,
} from '@rayo/core';
import { Parameter } from '../nn/module.js';
import { AdamW, type AdamWOptions } from '../optim/adamw.js';
import type { HostTensor, StoredState } from '../optim/optimizer.js';

/** AdamW's state slots, each the shape of its parameter. */
const SLOTS = ['m', 'v'] as const;

/** Elements a parameter's place in a flat bucket and a rank's block are aligned to (16 bytes): slices keep vector loads aligned. */
export const FLAT_ALIGN = 4;

const alignUp = (n: number, to: number) => Math.ceil(n / to) * to;

/** The parameters of one gradient bucket, as `DataParallel` groups them. */
export interface ShardBucket {
  readonly parameters: readonly Parameter[];
  readonly names: readonly string[];
}

/** A parameter's range in its bucket's flat buffers. */
interface Placed {
  readonly name: string;
  readonly parameter: Parameter;
  readonly offset: number;
}

/** Where a bucket's parameters lie flat: each at an aligned offset, zeros between, split into one equal block per rank. */
interface BucketLayout {
  readonly placed: readonly Placed[];
  /** Elements of the flat buffers: a multiple of the ranks' blocks. */
  readonly length: number;
  /** Elements of one rank's block. */
  readonly block: number;
}

/** A bucket laid out flat, and its buffers. */
interface FlatBucket extends BucketLayout {
  /** The parameters' values (each parameter's `value` is a view of its range). */
  readonly values: Tensor;
  /** Their gradients, copied in as backward finishes them; what the reduce-scatter takes. */
  readonly grads: Tensor;
  /**
   * Views of this rank's block of the values (the f32 master weights AdamW
   * updates, in place) and of the gradients (where the reduce-scatter puts
   * their average, in place).
   */
  readonly master: Tensor;
  readonly reduced: Tensor;
}

/** The part of a parameter inside this rank's block of its bucket: what AdamW updates here. */
interface Piece {
  readonly placed: Placed;
  readonly bucket: number;
  /** Where the piece starts in the bucket's flat buffers, and its elements. */
  readonly start: number;
  readonly length: number;
}

export type ShardedAdamWOptions = AdamWOptions;

/**
 * AdamW sharded across the ranks of a data-parallel group (ZeRO stage 1)
 * over flat buckets. Each gradient bucket's parameters move into one flat
 * f32 buffer (`Parameter.moveInto`: each parameter's value becomes a view of
 * its range) beside a flat gradient buffer of the same layout, and the
 * buffers split into one equal block per rank. Rank r updates only block
 * r, and keeps AdamW's moments m and v for it alone: backward writes the
 * gradients into the flat gradient buffer (each parameter's
 * `gradientHome`), one reduce-scatter per bucket averages them into rank
 * r's block of that buffer (in place), AdamW updates rank r's block of the
 * values (the pieces of the parameters that fall in it: the f32 master
 * weights are the parameters themselves), and one all-gather per bucket
 * writes every rank's block into everyone's values (in place).
 *
 * Made by `DataParallel.createAdamW` and driven by the data-parallel steps.
 * Its state tensors are the pieces; checkpoints hold it whole (`readState`
 * gathers it, a collective every rank calls; `loadState` takes this rank's
 * pieces), so a checkpoint loads on any number of ranks, sharded or not.
 * `dispose()` moves the parameters back into memory of their own.
 */
export class ShardedAdamW extends AdamW {
  readonly communicator: Communicator;
  readonly #buckets: readonly FlatBucket[];
  readonly #pieces: readonly Piece[];
  readonly #placed: readonly Placed[];
  /** Every rank's local gradient norm, gathered to make the global one. */
  readonly #norms: Tensor;

  constructor(
    communicator: Communicator,
    buckets: readonly ShardBucket[],
    options: ShardedAdamWOptions = {},
  ) {
    const layouts = buckets.map((b) => layoutOf(communicator.size, b));
    const pieces = layouts.flatMap((layout, i) => piecesOf(layout, i, communicator.rank));
    if (pieces.length === 0) {
      throw new InvalidArgumentError('the model is too small to shard over this many ranks', {
        operation: 'ShardedAdamW',
        argument: 'communicator',
        expected: 'a rank whose block of some bucket holds a parameter',
        actual: `rank ${communicator.rank} of ${communicator.size} with none`,
      });
    }
    const flat = layouts.map((layout) => flatBucket(communicator, layout));
    // The master weights are the parameters: the values this optimizer moved into its buckets.
    const shards = pieces.map((piece) => {
      const bucket = flat[piece.bucket]!;
      const local = piece.start - communicator.rank * bucket.block;
      const shard = new Parameter(bucket.master.slice(local, piece.length), piece.placed.name);
      shard.grad = bucket.reduced.slice(local, piece.length);
      return shard;
    });
    const original = new Map(shards.map((s, i) => [s, pieces[i]!.placed.parameter]));
    const noDecay = options.noDecay;
    super(
      shards.map((s) => [s.name!, s] as const),
      { ...options, noDecay: noDecay && ((name, shard) => noDecay(name, original.get(shard) ?? shard)) },
    );
    this.communicator = communicator;
    this.#buckets = flat;
    this.#pieces = pieces;
    this.#placed = flat.flatMap((b) => b.placed);
    this.#norms = this.backend.zeros([communicator.size]);
  }

  /** Bytes of f32 optimizer tensors this rank holds: m and v of its pieces (its master weights are the parameters' own memory). */
  get stateBytes(): number {
    return this.#pieces.reduce((sum, p) => sum + 2 * 4 * p.length, 0);
  }

  /** Elements of the flat buffers of each bucket (a multiple of the ranks). */
  get bucketLengths(): number[] {
    return this.#buckets.map((b) => b.length);
  }

  /**
   * Copies the gradients of bucket `index` (`gradientOf` each of its
   * parameters) into the bucket's flat gradient buffer, recorded into
   * `runner`: what `reduceBucket` then reduces in one collective. Backward
   * already writes there (each parameter's `gradientHome`): only a gradient
   * kept elsewhere (set by hand) is copied.
   */
  stageGradients(
    index: number,
    runner: KernelRunner,
    gradientOf: (p: Parameter) => Tensor | undefined,
  ): void {
    const bucket = this.#bucket(index, 'ShardedAdamW.stageGradients');
    for (const { name, parameter, offset } of bucket.placed) {
      const grad = gradientOf(parameter);
      if (!grad) {
        // A gradient present on one rank only would leave the ranks' collectives out of step.
        throw new InvalidArgumentError('a parameter has no gradient to reduce', {
          operation: 'ShardedAdamW.stageGradients',
          argument: name,
          expected: 'a gradient on every rank (every parameter must be used by the loss)',
          actual: 'none',
        });
      }
      if (grad.base === bucket.grads && grad.baseOffset === offset) continue;
      const target = bucket.grads.slice(offset, parameter.value.size).reshape(parameter.shape);
      runner.run(copy, [grad], {}, { out: [target] });
    }
  }

  /** Averages bucket `index`'s staged gradients across the ranks into this rank's block of them: one reduce-scatter, in place. */
  reduceBucket(index: number, options?: CollectiveOptions): void {
    const bucket = this.#bucket(index, 'ShardedAdamW.reduceBucket');
    this.communicator.reduceScatter(bucket.grads, bucket.reduced, 'avg', options);
  }

  /** This rank's part of the global gradient norm: the norm of its gradient blocks (the blocks are disjoint, padding zero). */
  localNorm(runner: KernelRunner): Tensor {
    return runner.run(
      globalNorm,
      this.#buckets.map((b) => b.reduced),
    )[0]!;
  }

  /** Gathers every rank's `localNorm` (a collective); `globalNorm(runner)` then reads them. */
  gatherNorms(local: Tensor): void {
    this.communicator.allGather(local, this.#norms);
  }

  /** The global gradient norm from the gathered local ones: the L2 norm of the L2 norms. */
  globalNorm(runner: KernelRunner): Tensor {
    return runner.run(globalNorm, [this.#norms])[0]!;
  }

  /**
   * Writes every rank's updated blocks into the parameters on every rank:
   * one all-gather per bucket (in place: each rank's block already lies in
   * its values), in `order` (bucket indices; default all in
   * index order). Overlapped, each is followed by a mark (by bucket index),
   * so that later work can wait for the buckets it reads alone.
   */
  gatherParameters(
    options?: CollectiveOptions,
    order: readonly number[] = [...this.#buckets.keys()],
  ): (OverlapMark | undefined)[] {
    const marks: (OverlapMark | undefined)[] = [];
    for (const index of order) {
      const b = this.#bucket(index, 'ShardedAdamW.gatherParameters');
      this.communicator.allGather(b.master, b.values, options);
      if (options?.overlap) marks[index] = this.communicator.markOverlapped();
    }
    return marks;
  }

  /** The bucket whose flat values `tensor` is a view of (a parameter's value), if any. */
  bucketOf(tensor: Tensor): number | undefined {
    const index = this.#buckets.findIndex((b) => b.values === tensor.base);
    return index === -1 ? undefined : index;
  }

  /** Orders later backend work after the all-gathers of the parameters still running (`gatherAhead`). */
  override settle(): void {
    this.communicator.joinOverlapped();
  }

  /** Clears the model's gradients; the flat buffers are overwritten by the next step. */
  override zeroGrad(): void {
    for (const { parameter } of this.#placed) parameter.zeroGrad();
  }

  /**
   * The state whole, as an unsharded AdamW holds it: per bucket and slot,
   * this rank's pieces laid out as its block and all-gathered. A collective:
   * every rank calls it (every rank calls `saveCheckpoint`; rank 0 writes
   * the bytes).
   */
  override async readState(): Promise<[string, StoredState][]> {
    const whole = new Map<string, StoredState>();
    for (const [index, bucket] of this.#buckets.entries()) {
      for (const slot of SLOTS) {
        const block = this.backend.zeros([bucket.block]);
        const gathered = this.backend.empty([bucket.length]);
        try {
          this.#pieces.forEach((piece, i) => {
            if (piece.bucket !== index) return;
            const local = piece.start - this.communicator.rank * bucket.block;
            this.backend.copy(this.slot(i, slot), block.slice(local, piece.length));
          });
          this.communicator.allGather(block, gathered);
          const data = await gathered.read();
          for (const { name, parameter, offset } of this.#buckets[index]!.placed) {
            const values = data.slice(offset, offset + parameter.value.size);
            whole.set(`${name}.${slot}`, { dtype: 'f32', shape: parameter.shape, data: values });
          }
        } finally {
          block.dispose();
          gathered.dispose();
        }
      }
    }
    return this.#placed.flatMap(({ name }) =>
      SLOTS.map((s): [string, StoredState] => [`${name}.${s}`, whole.get(`${name}.${s}`)!]),
    );
  }

  /** Checks that `tensors` hold every state tensor whole (the parameter's shape), writing nothing. */
  override checkState(tensors: ReadonlyMap<string, HostTensor>): void {
    for (const { name, parameter } of this.#placed) {
      for (const slot of SLOTS) {
        const source = tensors.get(`${name}.${slot}`);
        const expected = formatShape(parameter.shape);
        if (!source) {
          throw new InvalidArgumentError('optimizer state is missing a tensor', {
            operation: 'ShardedAdamW.loadState',
            argument: `${name}.${slot}`,
            expected: `a tensor of shape ${expected}`,
            actual: 'nothing',
          });
        }
        if (!shapesEqual(source.shape, parameter.shape)) {
          throw new ShapeError('optimizer state has the wrong shape', {
            operation: 'ShardedAdamW.loadState',
            argument: `${name}.${slot}`,
            expected,
            actual: formatShape(source.shape),
          });
        }
      }
    }
  }

  /** Takes this rank's pieces of each whole state tensor. */
  override loadState(tensors: ReadonlyMap<string, HostTensor>, stepCount: number): void {
    this.checkState(tensors);
    this.#pieces.forEach((piece, i) => {
      const from = piece.start - piece.placed.offset;
      for (const slot of SLOTS) {
        const data = tensors.get(`${piece.placed.name}.${slot}`)!.data;
        const staged = this.backend.upload(data.subarray(from, from + piece.length), [piece.length]);
        this.backend.copy(staged, this.slot(i, slot));
        staged.dispose();
      }
    });
    this.stepCount = stepCount;
  }

  /** Frees the blocks and the moments, and moves the parameters (and their gradients) back into memory of their own. */
  override dispose(): void {
    for (const { parameter } of this.#placed) {
      parameter.gradientHome = undefined;
      parameter.zeroGrad();
      if (!parameter.value.disposed) parameter.moveInto(this.backend.empty(parameter.shape));
    }
    for (const b of this.#buckets) {
      for (const t of [b.values, b.grads, b.master, b.reduced]) t.dispose();
    }
    this.#norms.dispose();
    super.dispose();
  }

  #bucket(index: number, operation: string): FlatBucket {
    const bucket = this.#buckets[index];
    if (!bucket) {
      throw new InvalidArgumentError('no such gradient bucket', {
        operation,
        argument: 'index',
        expected: `an integer in [0, ${this.#buckets.length})`,
        actual: String(index),
      });
    }
    return bucket;
  }
}

/** Where a bucket's parameters lie flat over `size` ranks; every rank makes the same layout. */
function layoutOf(size: number, bucket: ShardBucket): BucketLayout {
  let end = 0;
  const placed = bucket.parameters.map((parameter, i) => {
    const name = bucket.names[i] ?? parameter.name ?? `parameters[${i}]`;
    if (parameter.dtype !== 'f32') {
      throw new DTypeError('a sharded optimizer keeps f32 master weights', {
        operation: 'ShardedAdamW',
        argument: name,
        expected: 'f32',
        actual: parameter.dtype,
      });
    }
    const offset = alignUp(end, FLAT_ALIGN);
    end = offset + parameter.value.size;
    return { name, parameter, offset };
  });
  const block = alignUp(Math.ceil(end / size), FLAT_ALIGN);
  return { placed, length: block * size, block };
}

/** A bucket's buffers, its parameters moved into the flat values, and this rank's blocks of both. */
function flatBucket(communicator: Communicator, layout: BucketLayout): FlatBucket {
  const at = communicator.rank * layout.block;
  const backend = communicator.backend;
  const values = backend.zeros([layout.length]);
  const grads = backend.zeros([layout.length]);
  for (const { parameter, offset } of layout.placed) {
    const size = parameter.value.size;
    parameter.moveInto(values.slice(offset, size).reshape(parameter.shape));
    // Backward writes the gradient into the bucket: no memory of its own beside it.
    parameter.gradientHome = () => grads.slice(offset, size).reshape(parameter.shape);
  }
  return {
    ...layout,
    values,
    grads,
    master: values.slice(at, layout.block),
    reduced: grads.slice(at, layout.block),
  };
}

/** The parts of bucket `index`'s parameters inside rank `rank`'s block. */
function piecesOf(bucket: BucketLayout, index: number, rank: number): Piece[] {
  const lo = rank * bucket.block;
  const hi = lo + bucket.block;
  return bucket.placed.flatMap((placed) => {
    const start = Math.max(lo, placed.offset);
    const end = Math.min(hi, placed.offset + placed.parameter.value.size);
    return end > start ? [{ placed, bucket: index, start, length: end - start }] : [];
  });
}
