import { argmax, type CommandBatch, InvalidArgumentError, increment, type Tensor } from '@rayo/core';
import type { LlamaModel } from '@rayo/train';
import { checkSamplingOptions, Rng, sampleToken } from '@rayo/train';
import { median } from '../median.js';

/**
 * Wall-clock medians (µs) of what one replayed greedy token costs the host,
 * phase by phase, as `generate` does it on a backend that picks on the
 * device: no write (the step advances its position and length and writes
 * its argmax as the next token), the submit (which resolves once the device
 * is done, so it holds the step's device time), and the read of the chosen
 * token. Then, with the device idle, the readback of the logits, of one
 * i32, the host's argmax of those logits and a `sync`: what picking on the
 * host would cost instead.
 */
export interface HostPhases {
  readonly tokens: number;
  readonly position: number;
  /** The submit call until it returns: encoding and queueing the step on the host, before any wait. */
  readonly enqueueUs: number;
  readonly submitUs: number;
  /** The chosen token (one i32) read after the step. */
  readonly readTokenUs: number;
  /** Median of the whole token (not the sum of the medians). */
  readonly tokenUs: number;
  /** The logits [1, vocab] read with the device idle. */
  readonly idleReadLogitsUs: number;
  readonly logitsBytes: number;
  /** One i32 read with the device idle. */
  readonly idleReadScalarUs: number;
  /** The host's argmax of the logits [vocab]: what the device's pick saves. */
  readonly hostArgmaxUs: number;
  /** `backend.sync()` with nothing in flight. */
  readonly idleSyncUs: number;
}

/**
 * Records `model`'s decode step into two batches, each ending with the
 * argmax into the token the step embeds and with the step's position and
 * length moved on the device (by +1 in one, −1 in the other, so that the
 * replays stay at rows `position` and `position + 1` however many run),
 * and replays them `tokens` times (after `warmup` untimed ones), timing each
 * phase with `performance.now`.
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
  if (!Number.isInteger(position) || position < 0 || position + 1 >= model.maxSequence) {
    throw new InvalidArgumentError('position and the row after it must be rows of the cache', {
      operation: 'measureHostPhases',
      argument: 'position',
      expected: `an integer in [0, ${model.maxSequence - 1})`,
      actual: String(position),
    });
  }
  const greedy = checkSamplingOptions({ temperature: 0 });
  // Greedy draws nothing from it.
  const rng = new Rng(0);
  const batches: CommandBatch[] = [];
  const made: Tensor[] = [];
  try {
    let logits: Tensor | undefined;
    for (const by of [1, -1]) {
      const batch = backend.batch();
      batches.push(batch);
      logits = model.recordStep(batch, made);
      batch.run(argmax, [logits], {}, { out: [model.tokenInput] });
      batch.run(increment, [model.positionInput, model.lengthInput], { by });
    }
    backend.write(model.tokenInput, Int32Array.of(0));
    backend.write(model.positionInput, Int32Array.of(position));
    backend.write(model.lengthInput, Int32Array.of(position + 1));
    const phases = { enqueue: [] as number[], submit: [] as number[], read: [] as number[] };
    const whole: number[] = [];
    for (let i = 0; i < warmup + tokens; i++) {
      const t0 = performance.now();
      const submitted = batches[i % 2]!.submit();
      const queued = performance.now();
      await submitted;
      const t1 = performance.now();
      await model.tokenInput.read();
      const t2 = performance.now();
      if (i < warmup) continue;
      phases.enqueue.push(queued - t0);
      phases.submit.push(t1 - t0);
      phases.read.push(t2 - t1);
      whole.push(t2 - t0);
    }
    await backend.sync();
    const idle = {
      logits: [] as number[],
      scalar: [] as number[],
      argmax: [] as number[],
      sync: [] as number[],
    };
    for (let i = 0; i < warmup + tokens; i++) {
      const t0 = performance.now();
      const row = (await logits!.read()) as Float32Array;
      const t1 = performance.now();
      await model.tokenInput.read();
      const t2 = performance.now();
      sampleToken(row, greedy, rng);
      const t3 = performance.now();
      await backend.sync();
      const t4 = performance.now();
      if (i < warmup) continue;
      idle.logits.push(t1 - t0);
      idle.scalar.push(t2 - t1);
      idle.argmax.push(t3 - t2);
      idle.sync.push(t4 - t3);
    }
    const us = (ms: readonly number[]) => median(ms) * 1e3;
    return {
      tokens,
      position,
      enqueueUs: us(phases.enqueue),
      submitUs: us(phases.submit),
      readTokenUs: us(phases.read),
      tokenUs: us(whole),
      idleReadLogitsUs: us(idle.logits),
      logitsBytes: logits!.byteLength,
      idleReadScalarUs: us(idle.scalar),
      hostArgmaxUs: us(idle.argmax),
      idleSyncUs: us(idle.sync),
    };
  } finally {
    for (const batch of batches) batch.dispose();
    for (const t of made) t.dispose();
  }
}
