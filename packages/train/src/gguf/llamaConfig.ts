import { InvalidArgumentError, RayoError } from '@rayo/core';
import { type LlamaConfig, parseLlamaConfig } from '../models/llama/config.js';
import { type LLAMA_FAMILIES, llamaFamily } from '../models/llama/families.js';
import type { GgufTensorInfo } from './ggufFile.js';
import {
  type GgufMetadata,
  type GgufValue,
  metadataArrayLength,
  metadataInteger,
  metadataNumber,
  metadataString,
} from './metadata.js';

/** The GGUF architectures the decoder reads, and the family each loads as. */
const ARCHITECTURES = {
  llama: 'llama',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
} as const satisfies Record<string, (typeof LLAMA_FAMILIES)[number]['name']>;

export type GgufLlamaArchitecture = keyof typeof ARCHITECTURES;

/** The key after `<architecture>.` that gives each Hugging Face config field. */
const KEYS = {
  hidden_size: 'embedding_length',
  num_hidden_layers: 'block_count',
  num_attention_heads: 'attention.head_count',
  num_key_value_heads: 'attention.head_count_kv',
  intermediate_size: 'feed_forward_length',
  head_dim: 'attention.key_length',
  rope_theta: 'rope.freq_base',
  rms_norm_eps: 'attention.layer_norm_rms_epsilon',
  max_position_embeddings: 'context_length',
  vocab_size: 'vocab_size',
} as const;

const KERNEL = 'ggufLlamaConfig';

function invalid(key: string, expected: string, actual: string): never {
  throw new InvalidArgumentError(`GGUF metadata '${key}' is invalid`, {
    operation: KERNEL,
    argument: key,
    expected,
    actual,
  });
}

/** The file's architecture, one the decoder reads (else an error naming `general.architecture`). */
export function ggufArchitecture(metadata: GgufMetadata): GgufLlamaArchitecture {
  const architecture = metadataString(metadata, 'general.architecture');
  if (architecture === undefined || !Object.hasOwn(ARCHITECTURES, architecture))
    invalid(
      'general.architecture',
      `one of ${Object.keys(ARCHITECTURES)
        .map((a) => `'${a}'`)
        .join(', ')} (Llama, Mistral, TinyLlama, SmolLM; Qwen2; Qwen3)`,
      JSON.stringify(architecture ?? 'absent'),
    );
  return architecture as GgufLlamaArchitecture;
}

/**
 * The vocabulary size: `<arch>.vocab_size` where the file has it, else the
 * length of `tokenizer.ggml.tokens`, else the embedding's rows.
 */
function vocabSizeOf(
  metadata: GgufMetadata,
  tensors: ReadonlyMap<string, GgufTensorInfo>,
  key: string,
): number | undefined {
  return (
    metadataInteger(metadata, key) ??
    metadataArrayLength(metadata, 'tokenizer.ggml.tokens') ??
    tensors.get('token_embd.weight')?.dims[1]
  );
}

/** `<arch>.rope.scaling.*` as a config.json `rope_scaling`: linear, or none (others refused by key). */
function ropeScalingOf(metadata: GgufMetadata, arch: string): Record<string, unknown> | undefined {
  const typeKey = `${arch}.rope.scaling.type`;
  const scaling = metadataString(metadata, typeKey);
  if (scaling === undefined || scaling === 'none') return undefined;
  if (scaling !== 'linear')
    invalid(
      typeKey,
      "'none', 'linear' or absent (YaRN and other scalings are not implemented)",
      JSON.stringify(scaling),
    );
  const factorKey = `${arch}.rope.scaling.factor`;
  const factor = metadataNumber(metadata, factorKey);
  if (factor === undefined || !(factor >= 1)) invalid(factorKey, 'a number >= 1', `${factor ?? 'absent'}`);
  return { type: 'linear', factor };
}

/** Keys whose other values change the computation in ways the decoder does not implement. */
function rejectUnsupported(metadata: GgufMetadata, arch: string, headDim: number): void {
  const experts = metadataInteger(metadata, `${arch}.expert_count`) ?? 0;
  if (experts > 0)
    invalid(`${arch}.expert_count`, '0 or absent (mixture of experts is not implemented)', `${experts}`);
  const valueLength = metadataInteger(metadata, `${arch}.attention.value_length`);
  if (valueLength !== undefined && valueLength !== headDim)
    invalid(`${arch}.attention.value_length`, `the key length (${headDim})`, `${valueLength}`);
  const ropeDims = metadataInteger(metadata, `${arch}.rope.dimension_count`);
  if (ropeDims !== undefined && ropeDims !== headDim)
    invalid(
      `${arch}.rope.dimension_count`,
      `the head dimension (${headDim}): partial RoPE is not implemented`,
      `${ropeDims}`,
    );
}

/**
 * The decoder's config from a GGUF file of the `llama`, `qwen2` or `qwen3`
 * architecture: the `<arch>.*` keys mapped onto the Hugging Face fields and
 * checked as `parseLlamaConfig` checks a config.json (an error names the
 * GGUF key). The head is tied to the embedding where the file has no
 * `output.weight`; a `llama` or `qwen3` file has attention biases where its
 * first block has `attn_q.bias`. llama3 RoPE factors (`rope_freqs.weight`)
 * are data, read by `openGgufLlama`.
 */
export function ggufLlamaConfig(
  metadata: GgufMetadata,
  tensors: ReadonlyMap<string, GgufTensorInfo>,
): LlamaConfig {
  const arch = ggufArchitecture(metadata);
  const key = (field: keyof typeof KEYS) => `${arch}.${KEYS[field]}`;
  const json: Record<string, unknown> = { model_type: ARCHITECTURES[arch] };
  for (const field of Object.keys(KEYS) as (keyof typeof KEYS)[]) {
    const value =
      field === 'rope_theta' || field === 'rms_norm_eps'
        ? metadataNumber(metadata, key(field))
        : metadataInteger(metadata, key(field));
    if (value !== undefined) json[field] = value;
  }
  json.vocab_size = vocabSizeOf(metadata, tensors, key('vocab_size'));
  json.tie_word_embeddings = !tensors.has('output.weight');
  if (arch !== 'qwen2') json.attention_bias = tensors.has('blk.0.attn_q.bias');
  const scaling = ropeScalingOf(metadata, arch);
  if (scaling) json.rope_scaling = scaling;
  // llama.cpp requires these; transformers' defaults would hide a broken file.
  for (const field of ['rms_norm_eps', 'max_position_embeddings'] as const)
    if (json[field] === undefined) invalid(key(field), 'present', 'absent');
  let config: LlamaConfig;
  try {
    config = parseLlamaConfig(json);
  } catch (error) {
    if (!(error instanceof RayoError) || error.argument === undefined) throw error;
    const field = error.argument;
    const mapped =
      field === 'vocab_size'
        ? `${key('vocab_size')} (or tokenizer.ggml.tokens)`
        : field.startsWith('rope_scaling')
          ? `${arch}.rope.scaling.factor`
          : field in KEYS
            ? key(field as keyof typeof KEYS)
            : field;
    throw new InvalidArgumentError(`GGUF metadata '${mapped}' is invalid`, {
      operation: KERNEL,
      argument: mapped,
      expected: error.expected,
      actual: error.actual,
    });
  }
  rejectUnsupported(metadata, arch, config.headDim);
  return config;
}

/**
 * The GGUF metadata of a decoder of `config` (what a converter writes
 * besides the tokenizer): its family's architecture and keys, and a linear
 * RoPE scaling's type and factor (llama3 factors are the `rope_freqs.weight`
 * tensor, which `llamaToGguf` writes).
 */
export function ggufLlamaMetadata(config: LlamaConfig, name?: string): [string, GgufValue][] {
  const arch = llamaFamily(config.family).ggufArchitecture;
  const key = (field: keyof typeof KEYS) => `${arch}.${KEYS[field]}`;
  const u32 = (value: number): GgufValue => ({ type: 'uint32', value });
  const scaling = config.ropeScaling;
  return [
    ['general.architecture', { type: 'string', value: arch }],
    ['general.name', { type: 'string', value: name ?? arch }],
    [key('max_position_embeddings'), u32(config.maxPositionEmbeddings)],
    [key('hidden_size'), u32(config.hiddenSize)],
    [key('num_hidden_layers'), u32(config.numHiddenLayers)],
    [key('intermediate_size'), u32(config.intermediateSize)],
    [key('num_attention_heads'), u32(config.numAttentionHeads)],
    [key('num_key_value_heads'), u32(config.numKeyValueHeads)],
    [key('head_dim'), u32(config.headDim)],
    [`${arch}.attention.value_length`, u32(config.headDim)],
    [`${arch}.rope.dimension_count`, u32(config.headDim)],
    [key('rope_theta'), { type: 'float32', value: config.ropeTheta }],
    [key('rms_norm_eps'), { type: 'float32', value: config.rmsNormEps }],
    [key('vocab_size'), u32(config.vocabSize)],
    ...(scaling?.type === 'linear'
      ? ([
          [`${arch}.rope.scaling.type`, { type: 'string', value: 'linear' }],
          [`${arch}.rope.scaling.factor`, { type: 'float32', value: scaling.factor }],
        ] as [string, GgufValue][])
      : []),
  ];
}
