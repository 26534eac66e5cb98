import { InvalidArgumentError, type Tensor } from '@rayo/core';
import type { LlamaModel } from '@rayo/train';
import { checkSamplingOptions, Rng, sampleToken } from '@rayo/train';
import { median } from '../median.js';

/**
 * Wall-clock medians (µs) of what one replayed greedy token costs the host,
 * phase by phase, as `generate` does it: the three 4-byte writes, the
 * submit (which resolves once the device is done, so it holds the step's
 * device time), the logits' readback and the argmax. Then, with the device
 * idle, the readback alone of the logits and of one i32, and a `sync`, to
 * show what the readback itself costs.
 */
export interface HostPhases {
  readonly tokens: number;
  readonly position: number;
  readonly writesUs: number;
  /** The submit call until it returns: encoding and queueing the step on the host, before any wait. */
  readonly enqueueUs: number;
  readonly submitUs: number;
  readonly readLogitsUs: number;
  readonly argmaxUs: number;
  /** Median of the whole token (not the sum of the medians). */
  readonly tokenUs: number;
  /** The logits [1, vocab] read with the device idle. */
  readonly idleReadLogitsUs: number;
  readonly logitsBytes: number;
  /** One i32 read with the device idle: what reading a token id chosen on the device would cost. */
  readonly idleReadScalarUs: number;
  /** `backend.sync()` with nothing in flight. */
  readonly idleSyncUs: number;
}

/**
 * Records `model`'s decode step into its own batch and replays it `tokens`
 * times (after `warmup` untimed ones) at cache row `position`, timing each
 * phase with `performance.now`. Each argmax is fed back as the next token.
 */
export async function measureHostPhases(
  model: LlamaModel,
  options: { readonly position: number; readonly tokens?: number; readonly warmup?: number },
): Promise<HostPhases> {
  const { backend } = model;
  const tokens = options.tokens ?? 32;
  const warmup = options.warmup ?? 4;
  const { position } = options;
  if (!Number.isInteger(tokens) || tokens < 1 || !Number.isInteger(warmup) || warmup < 0) {
    throw new InvalidArgumentError('tokens must be >= 1 and warmup >= 0 (integers)', {
      operation: 'measureHostPhases',
      argument: 'tokens',
      expected: 'integers: tokens >= 1, warmup >= 0',
      actual: `tokens ${tokens}, warmup ${warmup}`,
    });
  }
  if (!Number.isInteger(position) || position < 0 || position >= model.maxSequence) {
    throw new InvalidArgumentError('position must be a row of the cache', {
      operation: 'measureHostPhases',
      argument: 'position',
      expected: `an integer in [0, ${model.maxSequence})`,
      actual: String(position),
    });
  }
  const greedy = checkSamplingOptions({ temperature: 0 });
  // Greedy draws nothing from it.
  const rng = new Rng(0);
  const batch = backend.batch();
  const made: Tensor[] = [];
  try {
    const logits = model.recordStep(batch, made);
    const phases = {
      writes: [] as number[],
      enqueue: [] as number[],
      submit: [] as number[],
      read: [] as number[],
      argmax: [] as number[],
    };
    const whole: number[] = [];
    let token = 0;
    for (let i = 0; i < warmup + tokens; i++) {
      const t0 = performance.now();
      backend.write(model.tokenInput, Int32Array.of(token));
      backend.write(model.positionInput, Int32Array.of(position));
      backend.write(model.lengthInput, Int32Array.of(position + 1));
      const t1 = performance.now();
      const submitted = batch.submit();
      const queued = performance.now();
      await submitted;
      const t2 = performance.now();
      const row = (await logits.read()) as Float32Array;
      const t3 = performance.now();
      token = sampleToken(row, greedy, rng);
      const t4 = performance.now();
      if (i < warmup) continue;
      phases.writes.push(t1 - t0);
      phases.enqueue.push(queued - t1);
      phases.submit.push(t2 - t1);
      phases.read.push(t3 - t2);
      phases.argmax.push(t4 - t3);
      whole.push(t4 - t0);
    }
    await backend.sync();
    const idle = { logits: [] as number[], scalar: [] as number[], sync: [] as number[] };
    for (let i = 0; i < warmup + tokens; i++) {
      const t0 = performance.now();
      await logits.read();
      const t1 = performance.now();
      await model.tokenInput.read();
      const t2 = performance.now();
      await backend.sync();
      const t3 = performance.now();
      if (i < warmup) continue;
      idle.logits.push(t1 - t0);
      idle.scalar.push(t2 - t1);
      idle.sync.push(t3 - t2);
    }
    const us = (ms: readonly number[]) => median(ms) * 1e3;
    return {
      tokens,
      position,
      writesUs: us(phases.writes),
      enqueueUs: us(phases.enqueue),
      submitUs: us(phases.submit),
      readLogitsUs: us(phases.read),
      argmaxUs: us(phases.argmax),
      tokenUs: us(whole),
      idleReadLogitsUs: us(idle.logits),
      logitsBytes: logits.byteLength,
      idleReadScalarUs: us(idle.scalar),
      idleSyncUs: us(idle.sync),
    };
  } finally {
    batch.dispose();
    for (const t of made) t.dispose();
  }
}
