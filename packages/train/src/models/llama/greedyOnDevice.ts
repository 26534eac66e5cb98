import type { Tensor } from '@rayo/core';
import type { Continuation, DecodeStrategy } from './decoding.js';
import { type DecodeTarget, RecordedStep } from './recordedStep.js';

/**
 * Greedy decoding on the device: two recorded steps, each embedding the token
 * the other chose. Step k reads `tokens[k]` and writes its argmax into
 * `tokens[1 - k]`, so one step can run while the host reads the token of the
 * one before, which nothing in flight overwrites.
 */
interface GreedyChain {
  readonly steps: readonly [RecordedStep, RecordedStep];
  /** i32 [1] each: `tokens[0]` is the model's `tokenInput`. */
  readonly tokens: readonly [Tensor, Tensor];
}

/**
 * Greedy tokens chosen and fed back on the device (argmax, the lowest id on
 * a tie, as the host's pick at temperature 0): the step of the next token is
 * queued before the host waits for the current one, so the device does not
 * wait for the host between tokens.
 */
export class GreedyOnDevice implements DecodeStrategy {
  readonly #target: DecodeTarget;
  #chain: GreedyChain | undefined;

  constructor(target: DecodeTarget) {
    this.#target = target;
  }

  /**
   * The device picks (argmax: the pick of temperature 0), so `plan.pick` is
   * never called. The step queued after a stop token is taken back from the
   * context.
   */
  async *continue({ first, count, stop }: Continuation): AsyncGenerator<number> {
    const target = this.#target;
    const chain = this.#recorded();
    target.writeToken(first);
    let k: 0 | 1 = 0;
    let current: Promise<void> | undefined = this.#submit(chain, k);
    let queued: Promise<void> | undefined;
    try {
      for (let i = 1; i < count; i++) {
        // Step k writes token i into tokens[other]; the read is enqueued before the next step.
        const other: 0 | 1 = k === 0 ? 1 : 0;
        const read = chain.tokens[other].read();
        queued = i + 1 < count ? this.#submit(chain, other) : undefined;
        const [, values] = await Promise.all([current, read]);
        current = queued;
        queued = undefined;
        const token = values[0]!;
        if (stop.has(token)) return;
        yield token;
        k = other;
      }
    } finally {
      // A step queued past a stop (or an early return) ran for nothing: its cache row is not context.
      const pending = [current, queued].filter((p): p is Promise<void> => p !== undefined);
      target.advance(-pending.length);
      await Promise.allSettled(pending);
    }
  }

  /** The two steps, recorded on first use. */
  #recorded(): GreedyChain {
    if (this.#chain) return this.#chain;
    const target = this.#target;
    const spare = target.backend.zeros([1], 'i32');
    try {
      const first = RecordedStep.record(target, target.tokenInput, spare);
      try {
        const second = RecordedStep.record(target, spare, target.tokenInput);
        this.#chain = { steps: [first, second], tokens: [target.tokenInput, spare] };
      } catch (error) {
        first.dispose();
        throw error;
      }
    } catch (error) {
      spare.dispose();
      throw error;
    }
    return this.#chain;
  }

  /** Submits step `k` at the current position (its token is already on the device) and advances the position. */
  #submit(chain: GreedyChain, k: 0 | 1): Promise<void> {
    const submitted = chain.steps[k].submit();
    this.#target.advance(1);
    return submitted;
  }

  dispose(): void {
    if (!this.#chain) return;
    for (const step of this.#chain.steps) step.dispose();
    this.#chain.tokens[1].dispose();
    this.#chain = undefined;
  }
}
