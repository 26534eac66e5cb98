import type { CommandBatch } from '@rayo/core';
import type { Tape, Variable } from '../autograd/tape.js';
import type { DataParallel } from './dataParallel.js';

/** A piece of a data-parallel step's forward and backward, and the buckets it finishes. */
export interface BackwardSegment {
  /** The command batch holding the piece's kernels; undefined where the tape runs kernels eagerly. */
  readonly batch: CommandBatch | undefined;
  /** The buckets (indices into `DataParallel.buckets`) whose gradients are final once the piece has run, in issue order. */
  readonly buckets: readonly number[];
}

export interface SegmentedBackwardOptions {
  readonly tape: Tape;
  readonly loss: Variable;
  readonly parallel: DataParallel;
  /**
   * Cut backward where buckets become final (true), or run it as one
   * segment followed by every bucket in order (false: nothing to overlap).
   */
  readonly overlap: boolean;
  /** The batch the tape records into now (forward is in it); undefined for eager kernels. */
  readonly batch: CommandBatch | undefined;
  /**
   * Called with each segment as soon as its last kernel is recorded (e.g. to
   * submit it and start its buckets' all-reduces); from then on the caller
   * owns its batch, even if backward fails later.
   */
  readonly onSegment?: (segment: BackwardSegment) => void;
}

/**
 * Runs `tape.backward(loss)` cut into segments, DDP's way: whenever
 * backward finishes the last gradient of one or more buckets, the segment
 * so far closes with those buckets and the tape switches to a new batch of
 * the backend, so that the buckets' all-reduces can run while the next
 * segments compute. Buckets that never become final (a parameter the loss
 * does not use) close the last segment, where the all-reduce reports the
 * missing gradient. Every rank cuts at the same points, so every rank
 * issues the same collectives in the same order. A batch made here and not
 * yet handed to `onSegment` is disposed if backward throws.
 */
export function segmentedBackward(options: SegmentedBackwardOptions): BackwardSegment[] {
  const { tape, parallel } = options;
  const backend = tape.backend;
  const segments: BackwardSegment[] = [];
  const reduced = new Set<number>();
  let batch = options.batch;
  let handed = false;
  const close = (buckets: readonly number[]): void => {
    for (const b of buckets) {
      reduced.add(b);
      // Recorded at the end of the segment, before it is handed on (submitted).
      parallel.stageBucket(b, batch ?? backend, (p) => p.grad);
    }
    const segment = { batch, buckets };
    segments.push(segment);
    handed = true;
    options.onSegment?.(segment);
  };
  const track = parallel.bucketTracker();
  const onGradientsFinal = (leaves: readonly Variable[]): void => {
    const ready = track(leaves);
    if (ready.length === 0) return;
    close(ready);
    if (batch) {
      // One after another on the backend's queue: the segments share the first batch's scratch.
      batch = backend.batch({ scratchFrom: options.batch });
      handed = false;
      tape.switchRunner(batch);
    }
  };
  try {
    tape.backward(options.loss, options.overlap ? { onGradientsFinal } : {});
  } catch (error) {
    if (!handed && batch !== options.batch) batch?.dispose();
    throw error;
  }
  const rest = [...parallel.buckets.keys()].filter((b) => !reduced.has(b));
  // Backward usually finishes the last bucket with its very last rule, leaving a batch with nothing to do.
  if (rest.length === 0 && batch && batch !== options.batch && batch.size === 0) {
    batch.dispose();
    // Whatever the tape runs later (nothing, in the steps) runs eagerly in queue order.
    tape.switchRunner(backend);
  } else {
    close(rest);
  }
  return segments;
}
