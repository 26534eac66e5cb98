import type { Tensor } from '@rayo/core';
import type { PagedDecodeRow, PagedLlama } from '@rayo/train';
import { median } from '../median.js';
import { type StepDetail, stepDetail } from './stepDetail.js';
import { profileStep } from './stepProfile.js';

/**
 * One batched decode step of B rows, taken apart: its kernels (core's
 * backend-neutral `profileStep` over `PagedLlama.recordDecodeStep`) and
 * the host's phases around a replay of it, so that the device time of a
 * step and the host time outside it can be set side by side.
 */

/** Wall-clock medians (µs) of the phases of one replayed batched step. */
export interface BatchStepPhases {
  readonly steps: number;
  /** `writeDecodeInputs`: the rows checked, the host arrays built, the five input uploads. */
  readonly writeUs: number;
  /** The submit call until it returns: encoding and queueing the step on the host. */
  readonly enqueueUs: number;
  /** The submit until the device is done (holds the step's device time). */
  readonly submitUs: number;
  /** Reading what a greedy step reads: B i32 ids where the backend picks on the device, else B × vocab logits. */
  readonly readUs: number;
  readonly readBytes: number;
  /** Median of the whole step (not the sum of the medians). */
  readonly stepUs: number;
}

/** The runs themselves stand whatever failed of the two. */
export type BatchStepDetail = StepDetail<BatchStepPhases>;

export interface BatchStepOptions {
  /** Time each group of identical kernel calls (else the step's device time and the call table only). */
  readonly kernels: boolean;
  /** Back-to-back repetitions of a group per timing. */
  readonly repetitions: number;
  /** Replays timed phase by phase (after 4 untimed). */
  readonly steps: number;
}

/** Replays the step of `rows` from a batch of its own, `steps` times, timing each phase. */
export async function measureBatchStepPhases(
  paged: PagedLlama,
  rows: readonly PagedDecodeRow[],
  steps: number,
  warmup = 4,
): Promise<BatchStepPhases> {
  const { backend } = paged;
  const batch = backend.batch();
  const made: Tensor[] = [];
  try {
    const { logits, chosen } = paged.recordDecodeStep(batch, made, paged.writeDecodeInputs(rows));
    const read = chosen ?? logits;
    const phases = {
      write: [] as number[],
      enqueue: [] as number[],
      submit: [] as number[],
      read: [] as number[],
    };
    const whole: number[] = [];
    for (let i = 0; i < warmup + steps; i++) {
      const t0 = performance.now();
      paged.writeDecodeInputs(rows);
      const t1 = performance.now();
      const submitted = batch.submit();
      const queued = performance.now();
      await submitted;
      const t2 = performance.now();
      await read.read();
      const t3 = performance.now();
      if (i < warmup) continue;
      phases.write.push(t1 - t0);
      phases.enqueue.push(queued - t1);
      phases.submit.push(t2 - t1);
      phases.read.push(t3 - t2);
      whole.push(t3 - t0);
    }
    const us = (ms: readonly number[]) => median(ms) * 1e3;
    return {
      steps,
      writeUs: us(phases.write),
      enqueueUs: us(phases.enqueue),
      submitUs: us(phases.submit),
      readUs: us(phases.read),
      readBytes: read.byteLength,
      stepUs: us(whole),
    };
  } finally {
    batch.dispose();
    for (const t of made) t.dispose();
  }
}

/**
 * The step of `rows` profiled kernel by kernel (untimed on a backend
 * without a device clock: the call table alone), then its host phases.
 * A failure of either is kept as the detail's error.
 */
export async function batchStepDetail(
  paged: PagedLlama,
  rows: readonly PagedDecodeRow[],
  options: BatchStepOptions,
): Promise<BatchStepDetail> {
  return stepDetail(
    () => {
      const inputs = paged.writeDecodeInputs(rows);
      // The lengths are device tensors, not attributes: attention's bytes are counted at the tables' bound.
      return profileStep(paged.backend, (runner, made) => paged.recordDecodeStep(runner, made, inputs), {
        kernels: options.kernels,
        repetitions: options.repetitions,
      });
    },
    () => measureBatchStepPhases(paged, rows, options.steps),
  );
}
