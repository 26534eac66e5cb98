import { InvalidArgumentError, RayoError } from '@rayo/core';
import { type LlamaConfig, parseLlamaConfig } from '../models/llama/config.js';
import type { GgufTensorInfo } from './ggufFile.js';
import {
  type GgufMetadata,
  type GgufValue,
  metadataArrayLength,
  metadataInteger,
  metadataNumber,
  metadataString,
} from './metadata.js';

/** The Hugging Face config field each GGUF key of the `llama` architecture gives. */
const KEYS = {
  hidden_size: 'llama.embedding_length',
  num_hidden_layers: 'llama.block_count',
  num_attention_heads: 'llama.attention.head_count',
  num_key_value_heads: 'llama.attention.head_count_kv',
  intermediate_size: 'llama.feed_forward_length',
  head_dim: 'llama.attention.key_length',
  rope_theta: 'llama.rope.freq_base',
  rms_norm_eps: 'llama.attention.layer_norm_rms_epsilon',
  max_position_embeddings: 'llama.context_length',
  vocab_size: 'llama.vocab_size',
} as const;

const KERNEL = 'ggufLlamaConfig';

function invalid(key: string, expected: string, actual: string): never {
  throw new InvalidArgumentError(`GGUF metadata '${key}' is invalid`, {
    kernel: KERNEL,
    argument: key,
    expected,
    actual,
  });
}

/**
 * The vocabulary size: `llama.vocab_size` where the file has it, else the
 * length of `tokenizer.ggml.tokens`, else the embedding's rows.
 */
function vocabSizeOf(
  metadata: GgufMetadata,
  tensors: ReadonlyMap<string, GgufTensorInfo>,
): number | undefined {
  return (
    metadataInteger(metadata, KEYS.vocab_size) ??
    metadataArrayLength(metadata, 'tokenizer.ggml.tokens') ??
    tensors.get('token_embd.weight')?.dims[1]
  );
}

/** Keys whose other values change the computation in ways the decoder does not implement. */
function rejectUnsupported(metadata: GgufMetadata, headDim: number): void {
  const scaling = metadataString(metadata, 'llama.rope.scaling.type');
  if (scaling !== undefined && scaling !== 'none')
    invalid(
      'llama.rope.scaling.type',
      "'none' or absent (scaled RoPE is not implemented)",
      JSON.stringify(scaling),
    );
  const experts = metadataInteger(metadata, 'llama.expert_count') ?? 0;
  if (experts > 0)
    invalid('llama.expert_count', '0 or absent (mixture of experts is not implemented)', `${experts}`);
  const valueLength = metadataInteger(metadata, 'llama.attention.value_length');
  if (valueLength !== undefined && valueLength !== headDim)
    invalid('llama.attention.value_length', `the key length (${headDim})`, `${valueLength}`);
  const ropeDims = metadataInteger(metadata, 'llama.rope.dimension_count');
  if (ropeDims !== undefined && ropeDims !== headDim)
    invalid(
      'llama.rope.dimension_count',
      `the head dimension (${headDim}): partial RoPE is not implemented`,
      `${ropeDims}`,
    );
}

/**
 * The decoder's config from a GGUF file of the `llama` architecture: the
 * `llama.*` keys mapped onto the Hugging Face fields and checked as
 * `parseLlamaConfig` checks a config.json (an error names the GGUF key).
 * The head is tied to the embedding where the file has no `output.weight`.
 */
export function ggufLlamaConfig(
  metadata: GgufMetadata,
  tensors: ReadonlyMap<string, GgufTensorInfo>,
): LlamaConfig {
  const architecture = metadataString(metadata, 'general.architecture');
  if (architecture !== 'llama')
    invalid('general.architecture', "'llama'", JSON.stringify(architecture ?? 'absent'));
  const json: Record<string, unknown> = {};
  for (const [field, key] of Object.entries(KEYS)) {
    const value =
      field === 'rope_theta' || field === 'rms_norm_eps'
        ? metadataNumber(metadata, key)
        : metadataInteger(metadata, key);
    if (value !== undefined) json[field] = value;
  }
  json.vocab_size = vocabSizeOf(metadata, tensors);
  json.tie_word_embeddings = !tensors.has('output.weight');
  // llama.cpp requires these; transformers' defaults would hide a broken file.
  for (const field of ['rms_norm_eps', 'max_position_embeddings'] as const)
    if (json[field] === undefined) invalid(KEYS[field], 'present', 'absent');
  let config: LlamaConfig;
  try {
    config = parseLlamaConfig(json);
  } catch (error) {
    if (!(error instanceof RayoError) || error.argument === undefined) throw error;
    const key =
      error.argument === 'vocab_size'
        ? `${KEYS.vocab_size} (or tokenizer.ggml.tokens)`
        : KEYS[error.argument as keyof typeof KEYS];
    throw new InvalidArgumentError(`GGUF metadata '${key ?? error.argument}' is invalid`, {
      kernel: KERNEL,
      argument: key ?? error.argument,
      expected: error.expected,
      actual: error.actual,
    });
  }
  rejectUnsupported(metadata, config.headDim);
  return config;
}

/** The GGUF metadata of a Llama decoder of `config` (what a converter writes besides the tokenizer). */
export function ggufLlamaMetadata(config: LlamaConfig, name = 'llama'): [string, GgufValue][] {
  const u32 = (value: number): GgufValue => ({ type: 'uint32', value });
  return [
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.name', { type: 'string', value: name }],
    [KEYS.max_position_embeddings, u32(config.maxPositionEmbeddings)],
    [KEYS.hidden_size, u32(config.hiddenSize)],
    [KEYS.num_hidden_layers, u32(config.numHiddenLayers)],
    [KEYS.intermediate_size, u32(config.intermediateSize)],
    [KEYS.num_attention_heads, u32(config.numAttentionHeads)],
    [KEYS.num_key_value_heads, u32(config.numKeyValueHeads)],
    [KEYS.head_dim, u32(config.headDim)],
    ['llama.attention.value_length', u32(config.headDim)],
    ['llama.rope.dimension_count', u32(config.headDim)],
    [KEYS.rope_theta, { type: 'float32', value: config.ropeTheta }],
    [KEYS.rms_norm_eps, { type: 'float32', value: config.rmsNormEps }],
    [KEYS.vocab_size, u32(config.vocabSize)],
  ];
}
