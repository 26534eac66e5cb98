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
  };
}
