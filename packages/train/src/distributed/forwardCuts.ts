import type { AttrValues, Backend, CommandBatch, KernelCallArgs, KernelRunner, Tensor } from '@rayo/core';

/** A piece of a recorded forward, and the buckets of parameters it is the first to read. */
export interface ForwardCut {
  readonly batch: CommandBatch;
  readonly buckets: readonly number[];
}

/**
 * Kernels a piece of forward holds at least before a first read cuts it: each
 * batch keeps scratch memory of its own (a product's half operands, split-K
 * sums), so a cut per bucket (dozens) would hold dozens of copies of it.
 */
export const MIN_CUT_KERNELS = 64;

/**
 * A kernel runner that records a forward into command batches cut where it
 * first reads a bucket's parameters, so that a replay can wait for each
 * bucket's all-gather just before the piece that needs it (the
 * sharded optimizer's parameters gathered while the forward runs). A piece
 * of fewer than `minKernels` kernels takes the next buckets' first reads
 * too (it then waits for them all). `bucketOf` says which bucket a tensor's
 * memory belongs to.
 */
export class ForwardCuts implements KernelRunner {
  readonly cuts: { batch: CommandBatch; buckets: number[] }[];
  /** Buckets in the order the forward first reads them. */
  readonly firstUse: number[] = [];
  readonly #backend: Backend;
  readonly #bucketOf: (tensor: Tensor) => number | undefined;

  readonly #minKernels: number;

  constructor(
    backend: Backend,
    first: CommandBatch,
    bucketOf: (tensor: Tensor) => number | undefined,
    minKernels = MIN_CUT_KERNELS,
  ) {
    this.#backend = backend;
    this.#bucketOf = bucketOf;
    this.#minKernels = minKernels;
    this.cuts = [{ batch: first, buckets: [] }];
  }

  /** The batch recording now (the forward's last piece, where backward goes on). */
  get current(): CommandBatch {
    return this.cuts.at(-1)!.batch;
  }

  run<A extends AttrValues>(...call: KernelCallArgs<A>): Tensor[] {
    const fresh: number[] = [];
    for (const t of call[1]) {
      const b = t === undefined ? undefined : this.#bucketOf(t);
      if (b !== undefined && !this.firstUse.includes(b) && !fresh.includes(b)) fresh.push(b);
    }
    if (fresh.length > 0) {
      this.firstUse.push(...fresh);
      // A piece long enough closes; the next starts with the first read of these buckets.
      if (this.current.size >= Math.max(1, this.#minKernels)) {
        this.cuts.push({ batch: this.#backend.batch({ scratchFrom: this.cuts[0]!.batch }), buckets: [] });
      }
      this.cuts.at(-1)!.buckets.push(...fresh);
    }
    return this.current.run(...call);
  }
}
