import type { IdDecoder } from '../tokenizer/tokenizerSource.js';

export interface TextStreamOptions {
  /** Leaves special tokens out of the text (default true: a stream is what a reader sees). */
  readonly skipSpecialTokens?: boolean;
  /**
   * Ids already in the text before the stream starts (the end of a prompt):
   * decoded for context only, never emitted. A SentencePiece tokenizer drops
   * the space of a word at the very start of a text; with the prompt's last
   * tokens as context, the first generated word keeps its space.
   */
  readonly context?: readonly number[];
}

const REPLACEMENT = '\uFFFD';

/** The length of the longest common prefix of two strings. */
function commonPrefix(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/**
 * Streaming detokenization: `push(id)` returns the text the new token adds,
 * or '' while the tokens so far end inside a UTF-8 character (a byte-level
 * or byte-fallback token that holds part of one), and `flush()` returns what
 * is still held at the end.
 *
 * Each step decodes a short window (the tokens of the last emitted delta and
 * the new ones) and emits what the window's text gained, so a decoder that
 * depends on context (SentencePiece's leading space, a byte sequence split
 * over tokens) gives the same text as decoding everything at once, at a cost
 * that does not grow with the length of the stream. The clean-up of spaces
 * some configs ask of `decode` (" ," → ",") is not applied: it rewrites
 * text on both sides of a token boundary, and streamed text is already
 * shown; a stream spells the text exactly as its tokens do.
 */
export class TextStream {
  readonly #tokenizer: IdDecoder;
  readonly #skipSpecial: boolean;
  /** The window: context ids first, then ids whose text is not yet emitted. */
  #ids: number[];
  /** How many leading ids of the window are context (already emitted or given). */
  #contextCount: number;
  #contextText: string;
  /** Every id pushed, for `text`. */
  #emitted = '';

  constructor(tokenizer: IdDecoder, options: TextStreamOptions = {}) {
    this.#tokenizer = tokenizer;
    this.#skipSpecial = options.skipSpecialTokens ?? true;
    const context = [...(options.context ?? [])].slice(-4);
    tokenizer.checkIds('TextStream', context);
    this.#ids = context;
    this.#contextCount = context.length;
    this.#contextText = this.#decode(context);
  }

  /** All the text emitted so far. */
  get text(): string {
    return this.#emitted;
  }

  #decode(ids: readonly number[]): string {
    return this.#tokenizer.decode(ids, {
      skipSpecialTokens: this.#skipSpecial,
      cleanUpTokenizationSpaces: false,
    });
  }

  /** The text `id` adds (possibly empty). */
  push(id: number): string {
    this.#tokenizer.checkIds('TextStream.push', [id]);
    this.#ids.push(id);
    const text = this.#decode(this.#ids);
    // Still inside a character: wait for the tokens that complete it.
    if (text.endsWith(REPLACEMENT)) return '';
    return this.#emit(text);
  }

  /** What is held back at the end (an incomplete character decodes as U+FFFD). */
  flush(): string {
    if (this.#ids.length === this.#contextCount) return '';
    return this.#emit(this.#decode(this.#ids));
  }

  #emit(text: string): string {
    // The window's text starts with the context's text, except where a
    // decoder rewrites across the boundary (clean-up of spaces): emit from
    // where they part.
    const delta = text.startsWith(this.#contextText)
      ? text.slice(this.#contextText.length)
      : text.slice(commonPrefix(text, this.#contextText));
    // The tokens just emitted become the context of the next step.
    this.#ids = this.#ids.slice(this.#contextCount);
    this.#contextCount = this.#ids.length;
    this.#contextText = this.#decode(this.#ids);
    this.#emitted += delta;
    return delta;
  }
}
