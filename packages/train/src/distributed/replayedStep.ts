import type { Backend, CommandBatch, OverlapMark, Tensor } from '@rayo/core';
import { Tape, type Variable } from '../autograd/tape.js';
import type { StepResult } from '../loop/step.js';
import {
  checkNotDisposed,
  DeviceSchedule,
  disposeRecorded,
  refuseLossScaling,
  takeGradients,
} from '../loop/update.js';
import type { Parameter } from '../nn/module.js';
import type { AdamW } from '../optim/adamw.js';
import { type BackwardSegment, segmentedBackward } from './backwardSegments.js';
import type { DataParallel } from './dataParallel.js';
import { type ForwardCut, ForwardCuts } from './forwardCuts.js';

export interface ReplayedDataParallelStepOptions {
  readonly backend: Backend;
  /** AdamW: its step count and learning rate are read on the device, so replays need no re-recording. */
  readonly optimizer: AdamW;
  readonly parallel: DataParallel;
  /**
   * Builds the loss on the tape once, when the step is recorded, from device
   * tensors the caller refills (`write`, `copy`) before every `run`: the
   * replays read whatever they hold then.
   */
  readonly loss: (tape: Tape) => Variable;
  readonly clipNorm?: number;
  readonly readGradNorm?: boolean;
  /**
   * All-reduce each gradient bucket as soon as backward has finished it,
   * overlapped with the rest of backward (default true); false records
   * backward as one batch and all-reduces every bucket after it.
   */
  readonly overlap?: boolean;
  /**
   * With a sharded optimizer: leave the parameters' all-gathers running when
   * `run` returns, and let the next `run` wait for each bucket just before
   * the piece of forward that first reads it (default false: `run` waits
   * for every all-gather before it returns). Between steps the parameters
   * are then still being written: call `optimizer.settle()` before reading
   * them (`saveCheckpoint` does; so do a collective without overlap and
   * the step's `dispose()`).
   */
  readonly gatherAhead?: boolean;
  /**
   * With `gatherAhead`: the fewest kernels a piece of forward holds before
   * a bucket's first read cuts it (default MIN_CUT_KERNELS, 64); each piece
   * is a command batch with scratch memory of its own.
   */
  readonly forwardCutKernels?: number;
}

/** What a recorded step's backward looks like: per segment, its kernels and the buckets all-reduced after it. */
export interface RecordedSegment {
  readonly kernels: number;
  readonly buckets: readonly number[];
}

interface Recording {
  /** The forward's pieces up to its last, which is the first backward segment's batch (gatherAhead). */
  readonly forward: readonly ForwardCut[];
  /** The buckets in the order the forward first reads them (gatherAhead). */
  readonly firstUse: readonly number[] | undefined;
  readonly segments: readonly BackwardSegment[];
  /** With a sharded optimizer and a norm to compute: this rank's local norm, before the gather. */
  readonly normBatch: CommandBatch | undefined;
  readonly local: Tensor | undefined;
  readonly update: CommandBatch;
  readonly tape: Tape;
  readonly loss: Tensor;
  readonly norm: Tensor | undefined;
  readonly grads: ReadonlyMap<Parameter, Tensor>;
}

/**
 * A data-parallel training step recorded once and replayed, as `ReplayedStep`
 * is on one device. Forward and backward are recorded as a few command
 * batches (CUDA graphs on cuda), cut where backward finishes a gradient
 * bucket (`segmentedBackward`); the gradient norm and the AdamW update are
 * one more. Each `run` writes the step number and the learning rate, then
 * submits segment 0, starts the all-reduce of the buckets it finished
 * overlapped with what follows (`{ overlap: true }`: on cuda, NCCL on a
 * stream of its own), submits segment 1, and so on; then joins the
 * overlapped collectives (`joinOverlapped`), averages the loss and submits
 * the update. Everything is enqueued back to back and the step waits for the
 * device once, for the loss. The collectives are the same, bucket for
 * bucket, as without overlap (`overlap: false`: one backward batch, then
 * every bucket), so the results are the same bits; only the timing changes.
 * From the first replay on a step allocates nothing. The gradients stay with
 * the recording, not on the parameters. With a sharded optimizer
 * (`shardOptimizer`) the buckets are reduce-scattered instead; a norm, when
 * needed, is this rank's local one in a batch of its own, all-gathered
 * before the update, and the update's all-gathers of the parameters overlap
 * the readbacks.
 */
export class ReplayedDataParallelStep {
  readonly backend: Backend;
  readonly #options: ReplayedDataParallelStepOptions;
  readonly #schedule: DeviceSchedule;
  #recording: Recording | undefined;
  /** The marks of the parameters' all-gathers left running by the last run (gatherAhead). */
  #gathering: (OverlapMark | undefined)[] | undefined;
  #disposed = false;

  constructor(options: ReplayedDataParallelStepOptions) {
    // Not wired here: backward would be seeded with 1 while the update divided by S.
    refuseLossScaling(options, 'ReplayedDataParallelStep');
    this.backend = options.backend;
    this.#options = options;
    this.#schedule = new DeviceSchedule(this.backend, options.optimizer, 'ReplayedDataParallelStep');
  }

  get recorded(): boolean {
    return this.#recording !== undefined;
  }

  /** The recorded backward, segment by segment (empty before the first `run`). */
  get segments(): readonly RecordedSegment[] {
    return (this.#recording?.segments ?? []).map((s) => ({ kernels: s.batch!.size, buckets: s.buckets }));
  }

  /** The recorded forward's pieces (one unless `gatherAhead`), each with the buckets it is the first to read. */
  get forward(): readonly RecordedSegment[] {
    return (this.#recording?.forward ?? []).map((c) => ({ kernels: c.batch.size, buckets: c.buckets }));
  }

  /** Trains on what the loss's tensors hold now: records the step the first time, replays it afterwards. */
  async run(options: { readonly lr?: number; readonly readLoss?: boolean } = {}): Promise<StepResult> {
    checkNotDisposed(this.#disposed, 'ReplayedDataParallelStep');
    const { optimizer, parallel } = this.#options;
    const sharded = parallel.shardedOptimizer(optimizer, 'ReplayedDataParallelStep');
    if (options.lr !== undefined) optimizer.lr = options.lr;
    const r = this.#recording ?? this.#record();
    this.#schedule.write();
    const readLoss = options.readLoss ?? true;
    const readNorm = this.#options.readGradNorm === true && r.norm !== undefined;
    // Each submit enqueues its batch before its promise settles, so every
    // collective runs in queue order after the segment before it; an
    // overlapped one does not hold back the segments after it.
    const overlap = this.#options.overlap ?? true;
    const gradientOf = (p: Parameter) => r.grads.get(p);
    const submitted: Promise<void>[] = [];
    const marks = this.#gathering;
    this.#gathering = undefined;
    // Each piece of forward waits for the all-gathers of the buckets it is the first to read.
    const join = (buckets: readonly number[]) => {
      for (const b of buckets) {
        const mark = marks?.[b];
        if (mark) parallel.communicator.joinOverlapped(mark);
      }
    };
    try {
      for (const [i, cut] of r.forward.entries()) {
        join(cut.buckets);
        if (i === r.forward.length - 1) break;
        const done = cut.batch.submit();
        done.catch(() => undefined);
        submitted.push(done);
      }
      for (const segment of r.segments) {
        const done = segment.batch!.submit();
        done.catch(() => undefined);
        submitted.push(done);
        for (const b of segment.buckets) parallel.reduceBucket(b, gradientOf, { overlap });
      }
    } finally {
      // The update (and anything after a failure) must see the averaged gradients.
      parallel.communicator.joinOverlapped();
    }
    if (readLoss) parallel.communicator.allReduce([r.loss], 'avg');
    if (r.normBatch) {
      const done = r.normBatch.submit();
      done.catch(() => undefined);
      submitted.push(done);
      sharded!.gatherNorms(r.local!);
    }
    const updated = r.update.submit();
    updated.catch(() => undefined);
    // Overlapped with the readbacks below, which are started before the join,
    // or with the next run's forward, first-read buckets first.
    const gathered = sharded?.gatherParameters({ overlap: true }, r.firstUse);
    const reads = [readLoss ? r.loss.read() : undefined, readNorm ? r.norm!.read() : undefined];
    if (sharded && r.firstUse) this.#gathering = gathered;
    else if (sharded) parallel.communicator.joinOverlapped();
    const [done, updateDone, loss, norm] = await Promise.allSettled([
      Promise.all(submitted),
      updated,
      ...reads,
    ]);
    // A failed submit explains a failed (or meaningless) readback: it comes first.
    for (const result of [done, updateDone, loss, norm])
      if (result!.status === 'rejected') throw result!.reason;
    parallel.throwIfFailed();
    optimizer.stepCount++;
    return {
      loss: loss?.status === 'fulfilled' ? loss.value?.[0] : undefined,
      gradNorm: norm?.status === 'fulfilled' ? norm.value?.[0] : undefined,
    };
  }

  #record(): Recording {
    const { optimizer, parallel } = this.#options;
    const sharded = parallel.shardedOptimizer(optimizer, 'ReplayedDataParallelStep');
    // Gradients left by an eager step would be added to, and read by every replay.
    optimizer.zeroGrad();
    const first = this.backend.batch();
    // The step's batches run one after another: they share the first one's scratch.
    const update = this.backend.batch({ scratchFrom: first });
    // Cut where forward first reads each bucket, when its all-gather may still be running.
    const cuts =
      sharded && this.#options.gatherAhead
        ? new ForwardCuts(this.backend, first, (t) => sharded.bucketOf(t), this.#options.forwardCutKernels)
        : undefined;
    const tape = new Tape(this.backend, { runner: cuts ?? first });
    const segments: BackwardSegment[] = [];
    let normBatch: CommandBatch | undefined;
    let local: Tensor | undefined;
    let norm: Tensor | undefined;
    try {
      const loss = this.#options.loss(tape);
      segmentedBackward({
        tape,
        loss,
        parallel,
        overlap: this.#options.overlap ?? true,
        batch: cuts?.current ?? first,
        onSegment: (s) => segments.push(s),
      });
      const { clipNorm, readGradNorm } = this.#options;
      if (sharded && (clipNorm !== undefined || readGradNorm)) {
        // The global norm needs every rank's local one: a gather between two batches.
        normBatch = this.backend.batch({ scratchFrom: first });
        local = sharded.localNorm(normBatch);
        norm = sharded.globalNorm(update);
      }
      norm = this.#schedule.recordUpdate(update, this.#options, norm);
      // The model's gradients (a sharded optimizer's are views of its flat buckets).
      const grads = takeGradients(sharded ? parallel.parameters : optimizer.params);
      const forward = cuts?.cuts ?? [{ batch: first, buckets: [] }];
      const firstUse = cuts?.firstUse;
      this.#recording = {
        forward,
        firstUse,
        segments,
        normBatch,
        local,
        update,
        tape,
        loss: loss.value,
        norm,
        grads,
      };
      return this.#recording;
    } catch (error) {
      const pieces = (cuts?.cuts ?? []).slice(0, -1).map((c) => c.batch);
      const recorded = [
        ...pieces,
        ...(segments.length === 0 ? [cuts?.current ?? first] : segments.map((s) => s.batch!)),
      ];
      disposeRecorded({ batches: [...recorded, update, ...(normBatch ? [normBatch] : [])], norm, tape });
      local?.dispose();
      optimizer.zeroGrad();
      throw error;
    }
  }

  /** Frees the recording, its gradients and the device step and rate; later work waits for all-gathers left running. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    if (this.#gathering) this.#options.parallel.communicator.joinOverlapped();
    this.#gathering = undefined;
    const r = this.#recording;
    if (r) {
      const batches = [
        ...r.forward.slice(0, -1).map((c) => c.batch),
        ...r.segments.map((s) => s.batch!),
        r.update,
        ...(r.normBatch ? [r.normBatch] : []),
      ];
      disposeRecorded({ batches, norm: r.norm, tape: r.tape, grads: r.grads.values() });
      r.local?.dispose();
    }
    this.#schedule.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
