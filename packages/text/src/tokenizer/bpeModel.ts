/**
 * The key, not JSON (a symbol), under which a BPE model built here keeps its
 * vocabulary as a list by id (a GGUF file's tokens), so that its tables are
 * built from the list rather than by walking a 128k-key object.
 */
export const TOKENS_BY_ID = Symbol('tokens by id');

/**
 * A tokenizer.json BPE model without dropout or subword affixes, the kind
 * every vocabulary built here has; what differs between them is given
 * (`ignoreMerges` is left out of the JSON where not given).
 */
export function bpeModel(
  vocab: Readonly<Record<string, number>>,
  merges: readonly unknown[],
  options: {
    readonly unkToken?: string | null;
    readonly fuseUnk?: boolean;
    readonly byteFallback?: boolean;
    readonly ignoreMerges?: boolean;
    /** The vocabulary as a list by id, the first of equal tokens in `vocab` (see `TOKENS_BY_ID`). */
    readonly tokensById?: readonly string[];
  } = {},
): Readonly<Record<string, unknown>> {
  return {
    type: 'BPE',
    dropout: null,
    unk_token: options.unkToken ?? null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: options.fuseUnk ?? false,
    byte_fallback: options.byteFallback ?? false,
    ...(options.ignoreMerges === undefined ? {} : { ignore_merges: options.ignoreMerges }),
    vocab,
    merges,
    ...(options.tokensById ? { [TOKENS_BY_ID]: options.tokensById } : {}),
  };
}
