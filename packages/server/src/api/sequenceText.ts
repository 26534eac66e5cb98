import { StopStrings, type TextStream, type Tokenizer } from '@rayo/text';

/**
 * One sequence's tokens as text deltas: streamed detokenization (never
 * splitting a character) with the request's stop strings held back until
 * they can no longer start one, as `TextModel.generateText` does.
 */
export class SequenceText {
  readonly #stream: TextStream;
  readonly #stops: StopStrings;
  #text = '';

  constructor(tokenizer: Tokenizer, promptIds: readonly number[], stop: readonly string[]) {
    this.#stream = tokenizer.decodeStream({ context: promptIds });
    this.#stops = new StopStrings(stop);
  }

  /** The text shown so far. */
  get text(): string {
    return this.#text;
  }

  /** Whether a stop string has appeared (the text ends before it). */
  get stopped(): boolean {
    return this.#stops.stopped;
  }

  /** The text `token` adds (possibly empty). */
  push(token: number): string {
    return this.#shown(this.#stops.push(this.#stream.push(token)));
  }

  /** What is still held at the end of the sequence. */
  finish(): string {
    const rest = this.#stops.push(this.#stream.flush());
    return this.#shown(this.#stops.stopped ? rest : rest + this.#stops.flush());
  }

  #shown(delta: string): string {
    this.#text += delta;
    return delta;
  }
}
