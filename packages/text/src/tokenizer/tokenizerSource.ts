// What a Tokenizer is made of and how it decodes: types only, shared by the
// tokenizer, its sources (a Hugging Face folder, GGUF metadata) and the text stream.

export interface DecodeOptions {
  /** Leaves special tokens (BOS, EOS, chat markers) out of the text. Default false. */
  readonly skipSpecialTokens?: boolean;
  /**
   * Removes the space before punctuation and contractions (" ." → ".",
   * " n't" → "n't"). Default false whatever the config's
   * `clean_up_tokenization_spaces` says, as transformers 5 decodes.
   */
  readonly cleanUpTokenizationSpaces?: boolean;
}

/** A parsed `tokenizer.json` (the Hugging Face tokenizers format): only its shape is checked here. */
export type TokenizerJson = Readonly<Record<string, unknown>>;

/** Everything a `Tokenizer` is made of, as read from a Hugging Face folder or built from GGUF metadata. */
export interface TokenizerSource {
  /** The parsed `tokenizer.json`. */
  readonly tokenizer: TokenizerJson;
  /** The parsed `tokenizer_config.json` (absent: no chat template, the post-processor decides BOS). */
  readonly config?: Readonly<Record<string, unknown>>;
  /** Chat templates found beside the config (`chat_template.jinja`, `chat_template.json`), by name. */
  readonly chatTemplates?: ReadonlyMap<string, string>;
  /** Extra end-of-sequence ids (GGUF's end-of-turn token, say) beyond the EOS token. */
  readonly extraEosTokenIds?: readonly number[];
  /** Names the files in error messages, e.g. `model/tokenizer.json`. */
  readonly name: string;
}

/** What a text stream needs of a tokenizer. */
export interface IdDecoder {
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /** Throws a RayoError naming `kernel` when an id is outside the vocabulary. */
  checkIds(kernel: string, ids: readonly number[]): void;
}
