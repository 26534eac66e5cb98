import { existsSync } from 'node:fs';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Shape } from '@rayo/core';
import { ggufVocabulary, readHuggingFaceTokenizer, type TokenizerSource } from '@rayo/text';
import {
  type GgmlType,
  type LlamaConfig,
  llamaCppTypeOf,
  llamaToGguf,
  parseLlamaConfig,
  seededLlamaWeights,
  writeGgufFile,
} from '@rayo/train';
import { DECODE_CONFIGS } from '../decode/decodeBench.js';
import { parityVocabulary, vocabularyFolder } from '../text/parityVocabularies.js';

// The model web-bench measures: a GGUF file of a Llama shape with seeded
// weights in a 4-bit mix and a real vocabulary, written once (host
// quantization of a 1B model takes minutes) and reused while its shape,
// quantization and seed match the record beside it.
//
// GGUF rather than a Hugging Face folder with a 4-bit format: the page's
// `load` options carry no `weightFormat` (a folder loads in its checkpoint's
// float dtype), and one file that holds the 4-bit blocks is what a page
// downloads: about 0.77 GB for Llama-3.2-1B in Q4_0 against 2.5 GB in bf16,
// uploaded without quantizing anything at load.

/** Model shapes (Hugging Face config.json fields) with the vocabulary their files carry. */
export const WEB_BENCH_SHAPES: Readonly<
  Record<string, { readonly config: Record<string, unknown>; readonly vocabulary: string }>
> = {
  // Llama-3.2-1B's shape (tied head, vocabulary 128256) with Llama 3's tokenizer.
  'llama-3.2-1b': { config: DECODE_CONFIGS['llama-3.2-1b']!, vocabulary: 'llama3' },
  // 2 layers of 64 over Llama 3's first 2046 tokens, BOS and EOS: seconds on the cpu backend (the test's model).
  'llama-tiny': { config: { ...DECODE_CONFIGS['llama-tiny']!, vocab_size: 2048 }, vocabulary: 'llama3' },
  // Llama 3's whole vocabulary (128256 tokens, 280k merges) over 4 layers of 256, tied head: a 1B's header
  // and tokenizer with 31 MB of weights, so that a load's host phases are measured on a CPU in minutes.
  'llama-small-vocab128k': {
    config: {
      ...DECODE_CONFIGS['llama-tiny']!,
      hidden_size: 256,
      intermediate_size: 1024,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      num_hidden_layers: 4,
      vocab_size: 128256,
      tie_word_embeddings: true,
    },
    vocabulary: 'llama3',
  },
};

/** The 4-bit mixes: llama.cpp's Q4_0 and Q4_K_M. */
export const WEB_BENCH_QUANTS = ['q4_0', 'q4_k_m'] as const;
export type WebBenchQuant = (typeof WEB_BENCH_QUANTS)[number];

const STAMP = 'rayo-web-bench-model/1';

/**
 * llama.cpp's Q4_0 file: the head (or the embedding a tied head shares) Q6_K,
 * Q8_0 where its rows do not divide into 256; other matrices Q4_0 (F16 where
 * rows do not divide into 32); vectors F32.
 */
function q4_0TypeOf(config: LlamaConfig): (hfName: string, shape: Shape) => GgmlType {
  return (hfName, shape) => {
    if (shape.length === 1) return 'F32';
    const row = shape[shape.length - 1]!;
    const isHead =
      hfName === 'lm_head.weight' || (config.tieWordEmbeddings && hfName === 'model.embed_tokens.weight');
    if (isHead) return row % 256 === 0 ? 'Q6_K' : 'Q8_0';
    return row % 32 === 0 ? 'Q4_0' : 'F16';
  };
}

interface BpeJson {
  readonly vocab: Readonly<Record<string, number>>;
  readonly merges: readonly string[];
}

/**
 * A byte-level BPE vocabulary cut to `size` tokens, where it has more: its
 * first `size` − 2 tokens (ranked as their merges are, so every merge that
 * makes one joins two kept ones) with the merges among them, then BOS and
 * EOS. A tiny model's vocabulary that still tokenizes any text.
 */
function firstTokens(source: TokenizerSource, size: number): TokenizerSource {
  const json = source.tokenizer as { model: BpeJson; added_tokens?: readonly { content: string }[] };
  const total = Object.keys(json.model.vocab).length + (json.added_tokens?.length ?? 0);
  if (total <= size) return source;
  const kept = size - 2;
  const vocab = Object.fromEntries(Object.entries(json.model.vocab).filter(([, id]) => id < kept));
  const merges = json.model.merges.filter((m) => {
    const [a, b] = m.split(' ');
    return vocab[`${a}${b}`] !== undefined && vocab[a!] !== undefined && vocab[b!] !== undefined;
  });
  const specials = [source.config?.bos_token, source.config?.eos_token].map((content, i) => ({
    id: kept + i,
    content: String(content),
    special: true,
  }));
  return {
    ...source,
    tokenizer: { ...json, model: { ...json.model, vocab, merges }, added_tokens: specials },
  };
}

export interface WebBenchModelOptions {
  readonly shape: string;
  readonly quant: WebBenchQuant;
  readonly seed: number;
  /** Where the file is written once and reused. */
  readonly dir: string;
  /** A folder with one subfolder per vocabulary (default: beside the program, else the packages'). */
  readonly vocabularies?: string;
}

export interface WebBenchModelFile {
  readonly path: string;
  readonly bytes: number;
  /** Seconds the file took to write; absent where it was reused. */
  readonly writeSeconds?: number;
}

/** The GGUF file of `options`' shape, quantization and seed: reused where it is there, else written (timed). */
export async function webBenchModel(
  options: WebBenchModelOptions,
  log: (line: string) => void = () => {},
): Promise<WebBenchModelFile> {
  const shape = WEB_BENCH_SHAPES[options.shape];
  if (!shape) {
    throw new Error(`--shape takes ${Object.keys(WEB_BENCH_SHAPES).join(', ')}, got ${options.shape}`);
  }
  const path = join(options.dir, `${options.shape}-${options.quant}-seed${options.seed}.gguf`);
  const record = join(options.dir, `${options.shape}-${options.quant}-seed${options.seed}.json`);
  const stamp = JSON.stringify({
    stamp: STAMP,
    config: shape.config,
    quant: options.quant,
    seed: options.seed,
    vocabulary: shape.vocabulary,
  });
  if (existsSync(path) && (await readFile(record, 'utf8').catch(() => '')) === stamp) {
    return { path, bytes: (await stat(path)).size };
  }
  log(`writing ${path} (${options.shape}, ${options.quant}, seed ${options.seed}): a one-off, reused after`);
  const started = performance.now();
  await mkdir(options.dir, { recursive: true });
  const config = parseLlamaConfig(shape.config);
  const vocabulary = parityVocabulary(shape.vocabulary);
  const tokenizer = await readHuggingFaceTokenizer(vocabularyFolder(vocabulary, options.vocabularies));
  const source = firstTokens(tokenizer, config.vocabSize);
  const metadata = ggufVocabulary(source, vocabulary.pre !== undefined ? { pre: vocabulary.pre } : {});
  const typeOf = options.quant === 'q4_0' ? q4_0TypeOf(config) : llamaCppTypeOf('Q4_K_M', config);
  await writeGgufFile(
    path,
    llamaToGguf(config, seededLlamaWeights(config, options.seed), { typeOf, metadata }),
  );
  await writeFile(record, stamp);
  const writeSeconds = (performance.now() - started) / 1000;
  const bytes = (await stat(path)).size;
  log(`wrote ${(bytes / 1e9).toFixed(3)} GB in ${writeSeconds.toFixed(1)} s`);
  return { path, bytes, writeSeconds };
}
