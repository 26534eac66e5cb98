import type { DecodeEngine, EngineUsage, SequenceRequest, StepResult } from '../src/engine/decodeEngine.js';

/**
 * A real engine whose steps wait for permission: tests hold the steps to
 * keep sequences running (a full server, a cancel in the middle of a
 * stream) without depending on how fast the model decodes.
 */
export class GatedEngine<S> implements DecodeEngine<S> {
  readonly inner: DecodeEngine<S>;
  /** Steps started so far. */
  steps = 0;
  /** The most sequences one step has advanced. */
  widest = 0;
  /** Whether a step is waiting for permission now. */
  waiting = false;
  #permits = Number.POSITIVE_INFINITY;
  #waiters: (() => void)[] = [];

  constructor(inner: DecodeEngine<S>) {
    this.inner = inner;
  }

  get maxSequence(): number {
    return this.inner.maxSequence;
  }

  /** Steps wait from now on, until `allow`. */
  hold(): void {
    this.#permits = 0;
  }

  /** Lets `count` more steps run (all, by default). */
  allow(count = Number.POSITIVE_INFINITY): void {
    this.#permits += count;
    for (const wake of this.#waiters.splice(0)) wake();
  }

  admit(request: SequenceRequest): S | undefined {
    return this.inner.admit(request);
  }

  async step(sequences: readonly S[]): Promise<readonly StepResult[]> {
    while (this.#permits <= 0) {
      this.waiting = true;
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
    this.waiting = false;
    this.#permits--;
    this.steps++;
    this.widest = Math.max(this.widest, sequences.length);
    return this.inner.step(sequences);
  }

  release(sequence: S): void {
    this.inner.release(sequence);
  }

  usage(): EngineUsage {
    return this.inner.usage();
  }
}
