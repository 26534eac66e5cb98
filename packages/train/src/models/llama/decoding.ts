import { embedding, type Tensor } from '@rayo/core';
import { type DecodeTarget, RecordedStep } from './recordedStep.js';

/** What `generate` asks of a strategy once it has yielded the first token. */
export interface Continuation {
  /** The first token, chosen from the prompt's logits (already yielded). */
  readonly first: number;
  /** Tokens to generate in all, the first included. */
  readonly count: number;
  /** Chooses a token from a step's logits [vocab]. */
  readonly pick: (logits: Float32Array) => number;
  /** Tokens that end generation (not yielded). */
  readonly stop: ReadonlySet<number>;
}

/**
 * How `generate` runs the tokens after the first: chosen once, when the
 * model is made, from its options and its backend.
 */
export interface DecodeStrategy {
  /** Tokens 1 … count − 1, each fed back for the next; ends before a `stop` token. */
  continue(plan: Continuation): AsyncGenerator<number>;
  /** Frees what the strategy recorded. */
  dispose(): void;
}

/**
 * The last row of `logits` [T, vocab] on the host; `logits` is freed. A
 * prompt's rows but the last stay on the device: the row is gathered there
 * (`embedding` of row T − 1), so that T × vocab floats never cross to the host.
 */
export async function lastRow(logits: Tensor, vocab: number): Promise<Float32Array> {
  try {
    const rows = logits.size / vocab;
    if (rows <= 1) return (await logits.read()) as Float32Array;
    const { backend } = logits;
    using id = backend.upload(Int32Array.of(rows - 1), [1], 'i32');
    using row = backend.run(embedding, [logits.reshape([rows, vocab]), id])[0]!;
    return (await row.read()) as Float32Array;
  } finally {
    logits.dispose();
  }
}

/** A strategy that reads every step's logits back and picks the next token on the host. */
abstract class HostPicked implements DecodeStrategy {
  constructor(protected readonly target: DecodeTarget) {}

  /** The logits of the token after `token`, which is fed at the current position (advanced). */
  protected abstract next(token: number): Promise<Float32Array>;

  async *continue({ first, count, pick, stop }: Continuation): AsyncGenerator<number> {
    let token = first;
    for (let i = 1; i < count; i++) {
      token = pick(await this.next(token));
      if (stop.has(token)) return;
      yield token;
    }
  }

  dispose(): void {}
}

/** Every step run eagerly (`LlamaModel.decode`): the `replay: false` option. */
export class EagerDecoding extends HostPicked {
  protected next(token: number): Promise<Float32Array> {
    return lastRow(this.target.decode(token), this.target.vocabSize);
  }
}

/**
 * One step recorded into a batch on first use and replayed for every token:
 * the token's four bytes written (the step moves its position), one batch
 * submitted, the logits read.
 */
export class ReplayedDecoding extends HostPicked {
  #recorded: RecordedStep | undefined;

  protected async next(token: number): Promise<Float32Array> {
    const { target } = this;
    target.checkNext(token);
    this.#recorded ??= RecordedStep.record(target, target.tokenInput);
    target.writeToken(token);
    const recorded = this.#recorded;
    // Reads are ordered after submitted work: waiting for the read alone
    // saves a round trip to the device per token.
    const [, logits] = await Promise.all([recorded.submit(), recorded.logits.read()]);
    target.advance(1);
    return logits as Float32Array;
  }

  override dispose(): void {
    this.#recorded?.dispose();
    this.#recorded = undefined;
  }
}
