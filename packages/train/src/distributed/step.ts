import type { CommandBatch, Tensor } from '@rayo/core';
import { Tape } from '../autograd/tape.js';
import type { StepOptions, StepResult } from '../loop/step.js';
import { clipAndUpdate } from '../loop/update.js';
import { type BackwardSegment, segmentedBackward } from './backwardSegments.js';
import type { DataParallel } from './dataParallel.js';

export interface DataParallelStepOptions extends Omit<StepOptions, 'kernelsUsed'> {
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
 * segments; the step joins them before the update. Everything is enqueued
 * back to back and the step waits for the device once. The loss returned is
 * the mean over the ranks, the same on every rank.
 */
export async function dataParallelStep(options: DataParallelStepOptions): Promise<StepResult> {
  const { backend, optimizer, parallel } = options;
  const communicator = parallel.communicator;
  const batched = options.batch ?? true;
  const overlap = options.overlap ?? true;
  const first: CommandBatch | undefined = batched ? backend.batch() : undefined;
  const batches: CommandBatch[] = [];
  const submitted: Promise<void>[] = [];
  let update: CommandBatch | undefined;
  const tape = new Tape(backend, { runner: first ?? backend });
  let norm: Tensor | undefined;
  // A submit enqueues the batch before its promise settles: the collectives
  // and the update queue up behind it, and the step waits for the device once.
  const onSegment = (segment: BackwardSegment): void => {
    if (segment.batch) {
      batches.push(segment.batch);
      const done = segment.batch.submit();
      // Awaited below; until then a failure must not count as unhandled.
      done.catch(() => undefined);
      submitted.push(done);
    }
    for (const b of segment.buckets) parallel.allReduceBucket(b, (p) => p.grad, { overlap });
  };
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

    update = batched ? backend.batch() : undefined;
    norm = clipAndUpdate(optimizer, update ?? backend, options);
    const updateDone = update?.submit();
    await Promise.all([...submitted, updateDone]);
    const lossValue = readLoss ? (await loss.value.read())[0]! : undefined;
    const gradNorm = options.readGradNorm && norm ? (await norm.read())[0]! : undefined;
    parallel.throwIfFailed();
    return { loss: lossValue, gradNorm };
  } finally {
    norm?.dispose();
    if (first && !batches.includes(first)) first.dispose();
    for (const b of batches) b.dispose();
    update?.dispose();
    tape.dispose();
    optimizer.zeroGrad();
  }
}
