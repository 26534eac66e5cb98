import { InvalidArgumentError } from '@rayo/core';
import { bpeModel } from './bpeModel.js';

export interface CharacterTokenizerOptions {
  /** Special tokens, given ids before the characters, in order (e.g. `['<s>', '</s>']`). */
  readonly specialTokens?: readonly string[];
  /** BOS and EOS: special tokens or characters of the vocabulary. */
  readonly bosToken?: string;
  readonly eosToken?: string;
  /** Whether `encode` starts a text with BOS (default: true when there is a BOS token). */
  readonly addBosToken?: boolean;
  /** A chat template for tokenizer_config.json. */
  readonly chatTemplate?: string;
}

/** The two files of a Hugging Face tokenizer, as objects to write with `JSON.stringify`. */
export interface TokenizerFiles {
  readonly tokenizer: Record<string, unknown>;
  readonly config: Record<string, unknown>;
}

/**
 * The `tokenizer.json` and `tokenizer_config.json` of a character-level
 * vocabulary (special tokens first, then one token per character): a BPE
 * model without merges, so every character is its own token, decoded by
 * joining them. transformers and `Tokenizer` read it as any other; a
 * character outside the vocabulary has no token and is left out, as the
 * tokenizers library does for a BPE vocabulary without an unknown token.
 */
export function characterTokenizerFiles(
  characters: readonly string[],
  options: CharacterTokenizerOptions = {},
): TokenizerFiles {
  const specials = options.specialTokens ?? [];
  const vocab: Record<string, number> = {};
  for (const [i, token] of [...specials, ...characters].entries()) {
    if (token in vocab || (i >= specials.length && [...token].length !== 1)) {
      throw new InvalidArgumentError('characters must be distinct single characters', {
        operation: 'characterTokenizerFiles',
        argument: i < specials.length ? `specialTokens[${i}]` : `characters[${i - specials.length}]`,
        expected: 'a single character not already in the vocabulary',
        actual: JSON.stringify(token),
      });
    }
    vocab[token] = i;
  }
  for (const [field, token] of [
    ['bosToken', options.bosToken],
    ['eosToken', options.eosToken],
  ] as const) {
    if (token !== undefined && !(token in vocab)) {
      throw new InvalidArgumentError(`${field} is not in the vocabulary`, {
        operation: 'characterTokenizerFiles',
        argument: field,
        expected: 'a special token or a character of the vocabulary',
        actual: JSON.stringify(token),
      });
    }
  }
  const addBos = options.addBosToken ?? options.bosToken !== undefined;
  const bos = options.bosToken;
  const single = [
    ...(addBos && bos !== undefined ? [{ SpecialToken: { id: bos, type_id: 0 } }] : []),
    { Sequence: { id: 'A', type_id: 0 } },
  ];
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: specials.map((content, id) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: null,
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single,
      pair: [...single, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens:
        addBos && bos !== undefined ? { [bos]: { id: bos, ids: [vocab[bos]], tokens: [bos] } } : {},
    },
    decoder: { type: 'Fuse' },
    model: bpeModel(vocab, [], { ignoreMerges: false }),
  };
  const config: Record<string, unknown> = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    add_bos_token: addBos,
    add_eos_token: false,
    clean_up_tokenization_spaces: false,
    ...(bos !== undefined ? { bos_token: bos } : {}),
    ...(options.eosToken !== undefined ? { eos_token: options.eosToken } : {}),
    ...(options.chatTemplate !== undefined ? { chat_template: options.chatTemplate } : {}),
  };
  return { tokenizer, config };
}
