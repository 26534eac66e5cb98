import type { CommandBatch, Tensor } from '@rayo/core';
import type { UpdateOptions } from '../loop/update.js';
import type { ShardedAdamW } from './shardedAdamW.js';

export interface ShardedUpdateOptions extends UpdateOptions {
  /** A new command batch the step owns (disposes), or undefined to run kernels eagerly. */
  readonly newBatch: () => CommandBatch | undefined;
  /** Submits a batch of the step (its completion awaited by the step). */
  readonly submit: (batch: CommandBatch) => void;
}

/**
 * The update of an eager data-parallel step with a sharded optimizer, after
 * the gradient blocks are reduced and joined: the global gradient norm if
 * asked (each rank's norm of its blocks, all-gathered, then the norm of
 * those), AdamW on this rank's blocks clipped by it, then the all-gather of
 * the updated blocks into the parameters, overlapped with what the step
 * enqueues before it joins. Returns the tensors it made, for the caller to
 * dispose once the step is done: the global norm (when one was computed)
 * and this rank's local one.
 */
export function shardedUpdate(
  optimizer: ShardedAdamW,
  options: ShardedUpdateOptions,
): { norm?: Tensor; local?: Tensor } {
  const { clipNorm, readGradNorm } = options;
  const backend = optimizer.backend;
  const out: { norm?: Tensor; local?: Tensor } = {};
  if (clipNorm !== undefined || readGradNorm === true) {
    const normBatch = options.newBatch();
    out.local = optimizer.localNorm(normBatch ?? backend);
    if (normBatch) options.submit(normBatch);
    optimizer.gatherNorms(out.local);
  }
  const update = options.newBatch();
  const norm = out.local ? optimizer.globalNorm(update ?? backend) : undefined;
  out.norm = norm;
  optimizer.step(update ?? backend, norm && clipNorm !== undefined ? { norm, maxNorm: clipNorm } : undefined);
  if (update) options.submit(update);
  optimizer.gatherParameters({ overlap: true });
  return out;
}
