import type { PackedBpe } from './packedBpeTables.js';

/**
 * The key, not JSON (a symbol), under which a BPE model built here keeps its
 * vocabulary as a list by id (a GGUF file's tokens), so that its tables are
 * built from the list rather than by walking a 128k-key object.
 */
export const TOKENS_BY_ID = Symbol('tokens by id');

/**
 * The key, not JSON (a symbol), under which a BPE model built here keeps its
 * vocabulary and merges packed (a GGUF file's, `PackedBpe`): its `vocab` and
 * `merges` are then made from them only when read, and its tables are
 * indexed in the packed text (see packedBpeTables).
 */
export const PACKED_BPE = Symbol('packed vocabulary and merges');

type BpeModelOptions = Parameters<typeof bpeModel>[2];

/**
 * `bpeModel` of a packed vocabulary (tokens by id, the first of equal
 * tokens keeping its id) and merges: `vocab` and `merges` read as usual
 * but are made only when first read.
 */
export function packedBpeModel(
  packed: PackedBpe,
  options: Omit<NonNullable<BpeModelOptions>, 'tokensById'> = {},
): Readonly<Record<string, unknown>> {
  const { vocab: _vocab, merges: _merges, ...model } = bpeModel({}, [], options);
  let vocab: Record<string, number> | undefined;
  let merges: string[] | undefined;
  return Object.defineProperties(model, {
    vocab: {
      enumerable: true,
      get: () => {
        vocab ??= vocabularyOf(packed.tokens.toArray());
        return vocab;
      },
    },
    merges: {
      enumerable: true,
      get: () => {
        merges ??= packed.merges.toArray();
        return merges;
      },
    },
    [PACKED_BPE]: { value: packed },
  });
}

/** Tokens by id as a tokenizer.json vocabulary: the first of equal tokens keeps its id. */
export function vocabularyOf(tokens: readonly string[]): Record<string, number> {
  // No prototype: a token named 'toString' or '__proto__' is a key like any other.
  const vocab: Record<string, number> = Object.create(null);
  for (let id = 0; id < tokens.length; id++) if (!(tokens[id]! in vocab)) vocab[tokens[id]!] = id;
  return vocab;
}

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
