import { InvalidArgumentError } from '@rayo/core';

/** How the text is split and normalized before byte-level BPE, per GGUF `tokenizer.ggml.pre`. */
export interface ByteLevelPreTokenizer {
  /** The tokenizer.json pieces that reproduce it. */
  readonly normalizer: Readonly<Record<string, unknown>> | null;
  readonly preTokenizer: Readonly<Record<string, unknown>>;
  /** A word that is itself in the vocabulary is taken whole (Llama 3). */
  readonly ignoreMerges: boolean;
}

/** The split of Llama 3 (`llama-bpe`): digits in groups of up to three. */
const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/** The split of Qwen 2 and 3 (`qwen2`): every digit on its own. */
const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function splitThenBytes(pattern: string): Readonly<Record<string, unknown>> {
  return {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    ],
  };
}

const PRE_TOKENIZERS: Readonly<Record<string, ByteLevelPreTokenizer>> = {
  'llama-bpe': { normalizer: null, preTokenizer: splitThenBytes(LLAMA3_SPLIT), ignoreMerges: true },
  qwen2: { normalizer: { type: 'NFC' }, preTokenizer: splitThenBytes(QWEN2_SPLIT), ignoreMerges: false },
  // GPT-2's own split, which the ByteLevel pre-tokenizer applies itself.
  'gpt-2': {
    normalizer: null,
    preTokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true },
    ignoreMerges: false,
  },
};

/** The `tokenizer.ggml.pre` values a GGUF byte-level vocabulary may name here. */
export const GGUF_PRE_TOKENIZERS: readonly string[] = Object.keys(PRE_TOKENIZERS);

/** The split of a GGUF byte-level BPE vocabulary; an unknown one is refused by name. */
export function byteLevelPreTokenizer(pre: string | undefined): ByteLevelPreTokenizer {
  const found = pre === undefined ? undefined : PRE_TOKENIZERS[pre];
  if (!found) {
    throw new InvalidArgumentError('the GGUF pre-tokenizer is not one this tokenizer knows', {
      operation: 'Tokenizer.fromGguf',
      argument: 'tokenizer.ggml.pre',
      expected: GGUF_PRE_TOKENIZERS.map((p) => `'${p}'`).join(' | '),
      actual: pre === undefined ? 'absent' : `'${pre}'`,
    });
  }
  return found;
}
