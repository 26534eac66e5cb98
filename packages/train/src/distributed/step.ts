import type { CommandBatch, KernelRunner, Tensor } from '@rayo/core';
import { Tape } from '../autograd/tape.js';
import type { StepOptions, StepResult } from '../loop/step.js';
import { AdamW } from '../optim/adamw.js';
import { clipGradNorm, gradNorm as globalGradNorm, NO_CLIP } from '../optim/clip.js';
import type { DataParallel } from './dataParallel.js';

export interface DataParallelStepOptions extends Omit<StepOptions, 'kernelsUsed'> {
  readonly parallel: DataParallel;
}

/**
 * One data-parallel training step: forward and backward on this rank's
 * share of the batch (one command batch), the gradients averaged across the
 * ranks in buckets, then clipping and the update (a second command batch), as
 * `trainStep` does on one device. Collectives run on the backend's queue
 * outside batches, hence two batches, enqueued back to back. The loss returned is the mean over
 * the ranks, the same on every rank.
 */
export async function dataParallelStep(options: DataParallelStepOptions): Promise<StepResult> {
  const { backend, optimizer, parallel } = options;
  const batched = options.batch ?? true;
  const forward: CommandBatch | undefined = batched ? backend.batch() : undefined;
  let update: CommandBatch | undefined;
  const tape = new Tape(backend, { runner: forward ?? backend });
  let norm: Tensor | undefined;
  try {
    if (options.lr !== undefined) optimizer.lr = options.lr;
    const loss = options.loss(tape);
    tape.backward(loss);
    // A submit enqueues the batch before its promise settles: the collectives
    // and the update queue up behind it, and the step waits for the device once.
    const backwardDone = forward?.submit();
    // Awaited below; until then a failure must not count as unhandled.
    backwardDone?.catch(() => undefined);
    parallel.allReduceGradients();
    const readLoss = options.readLoss ?? true;
    if (readLoss) parallel.communicator.allReduce([loss.value], 'avg');

    update = batched ? backend.batch() : undefined;
    const runner: KernelRunner = update ?? backend;
    const { clipNorm } = options;
    if (optimizer instanceof AdamW) {
      if (clipNorm !== undefined || options.readGradNorm) norm = globalGradNorm(optimizer.params, { runner });
      optimizer.step(runner, norm && clipNorm !== undefined ? { norm, maxNorm: clipNorm } : undefined);
    } else {
      if (clipNorm !== undefined || options.readGradNorm) {
        norm = clipGradNorm(optimizer.params, clipNorm ?? NO_CLIP, { runner });
      }
      optimizer.step(runner);
    }
    const updateDone = update?.submit();
    await Promise.all([backwardDone, updateDone]);
    const lossValue = readLoss ? (await loss.value.read())[0]! : undefined;
    const gradNorm = options.readGradNorm && norm ? (await norm.read())[0]! : undefined;
    parallel.throwIfFailed();
    return { loss: lossValue, gradNorm };
  } finally {
    norm?.dispose();
    forward?.dispose();
    update?.dispose();
    tape.dispose();
    optimizer.zeroGrad();
  }
}
