import type { CommandBatch, Tensor } from '@rayo/core';
import { Tape } from '../autograd/tape.js';
import type { StepOptions, StepResult } from '../loop/step.js';
import { clipAndUpdate, refuseLossScaling } from '../loop/update.js';
import { type BackwardSegment, segmentedBackward } from './backwardSegments.js';
import type { DataParallel } from './dataParallel.js';
import { shardedUpdate } from './shardedUpdate.js';

export interface DataParallelStepOptions extends Omit<StepOptions, 'kernelsUsed' | 'lossScaler'> {
  readonly parallel: DataParallel;
  /**
   * All-reduce each gradient bucket as soon as backward has finished it,
   * overlapped with the rest of backward (default true); false all-reduces
   * every bucket after backward.
   */
  readonly overlap?: boolean;
}

/**
 * One data-parallel training step: forward and backward on this rank's
 * share of the batch, the gradients averaged across the ranks in buckets,
 * then clipping and the update (one more command batch), as `trainStep`
 * does on one device. Collectives run on the backend's queue outside
 * batches, so backward is cut into command batches where it finishes a
 * bucket (`segmentedBackward`): each is submitted as soon as it is recorded
 * and its buckets' all-reduces start behind it, overlapped with the next
 * segments; the step joins them before the update. With a sharded
 * optimizer (`shardOptimizer`), the buckets are reduce-scattered instead,
 * the update is `shardedUpdate`'s and its all-gathers overlap the loss's
 * readback. Everything is enqueued
 * back to back and the step waits for the device once. The loss returned is
 * the mean over the ranks, the same on every rank.
 */
export async function dataParallelStep(options: DataParallelStepOptions): Promise<StepResult> {
  const { backend, optimizer, parallel } = options;
  // Not wired here: backward would be seeded with 1 while the update divided by S.
  refuseLossScaling(options, 'dataParallelStep');
  const communicator = parallel.communicator;
  const batched = options.batch ?? true;
  const overlap = options.overlap ?? true;
  const first: CommandBatch | undefined = batched ? backend.batch() : undefined;
  const batches: CommandBatch[] = [];
  // Awaited at the end; until then a failure must not count as unhandled.
  const submitted: Promise<void>[] = [];
  const tape = new Tape(backend, { runner: first ?? backend });
  let norm: Tensor | undefined;
  let local: Tensor | undefined;
  // A submit enqueues the batch before its promise settles: the collectives
  // and the update queue up behind it, and the step waits for the device once.
  const onSegment = (segment: BackwardSegment): void => {
    if (segment.batch) submit(segment.batch);
    for (const b of segment.buckets) parallel.reduceBucket(b, (p) => p.grad, { overlap });
  };
  // A batch made for the step is disposed with the others whether or not it was submitted.
  const newBatch = (): CommandBatch | undefined => {
    // The step's batches run one after another: they share the first one's scratch.
    const batch = batched ? backend.batch({ scratchFrom: first }) : undefined;
    if (batch) batches.push(batch);
    return batch;
  };
  const submit = (batch: CommandBatch): void => {
    if (!batches.includes(batch)) batches.push(batch);
    const done = batch.submit();
    done.catch(() => undefined);
    submitted.push(done);
  };
  const sharded = parallel.shardedOptimizer(optimizer, 'dataParallelStep');
  try {
    if (options.lr !== undefined) optimizer.lr = options.lr;
    const loss = options.loss(tape);
    try {
      segmentedBackward({ tape, loss, parallel, overlap, batch: first, onSegment });
    } finally {
      communicator.joinOverlapped();
    }
    const readLoss = options.readLoss ?? true;
    if (readLoss) communicator.allReduce([loss.value], 'avg');

    if (sharded) {
      ({ norm, local } = shardedUpdate(sharded, { ...options, newBatch, submit }));
    } else {
      const update = newBatch();
      norm = clipAndUpdate(optimizer, update ?? backend, options).norm;
      if (update) submit(update);
    }
    // Started before the join, so that they need not wait for the overlapped all-gathers.
    const lossRead = readLoss ? loss.value.read() : undefined;
    const normRead = options.readGradNorm && norm ? norm.read() : undefined;
    if (sharded) communicator.joinOverlapped();
    const [, lossData, normData] = await Promise.all([Promise.all(submitted), lossRead, normRead]);
    parallel.throwIfFailed();
    return { loss: lossData?.[0], gradNorm: normData?.[0] };
  } finally {
    norm?.dispose();
    local?.dispose();
    if (first && !batches.includes(first)) first.dispose();
    for (const b of batches) b.dispose();
    tape.dispose();
    optimizer.zeroGrad();
  }
}
