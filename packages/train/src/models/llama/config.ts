import { InvalidArgumentError, type RopeScaling } from '@rayo/core';
import { familyOfConfig, type LlamaFamily, type LlamaFamilyName } from './families.js';
import { parseRope } from './ropeConfig.js';

/** The shape of a Llama-family decoder, from a Hugging Face `config.json`. */
export interface LlamaConfig {
  readonly hiddenSize: number;
  readonly intermediateSize: number;
  readonly numAttentionHeads: number;
  readonly numKeyValueHeads: number;
  readonly numHiddenLayers: number;
  readonly vocabSize: number;
  /** hidden_size / num_attention_heads unless the config says `head_dim`. */
  readonly headDim: number;
  readonly ropeTheta: number;
  readonly rmsNormEps: number;
  readonly tieWordEmbeddings: boolean;
  readonly maxPositionEmbeddings: number;
  /** The model family (see `LLAMA_FAMILIES`); what follows are its switches, read from the config. */
  readonly family: LlamaFamilyName;
  /** Biases on the q, k and v projections. */
  readonly qkvBias: boolean;
  /** A bias on the output projection. */
  readonly outputBias: boolean;
  /** RMSNorm of every query and key head (weights [headDim], `rms_norm_eps`) before RoPE. */
  readonly qkNorm: boolean;
  /** How RoPE's frequencies are scaled; absent: theta^(−2i/headDim) as they are. */
  readonly ropeScaling?: RopeScaling;
  /**
   * The attention window of the layers that have one; absent: every layer
   * attends to the whole context. A model is refused where its context
   * (`maxSequence`) is longer than the window: sliding-window attention is
   * not implemented, and within the window it changes nothing.
   */
  readonly slidingWindow?: number;
}

const KERNEL = 'llamaConfig';

/**
 * The largest value each size field may take. Far above any published
 * checkpoint, low enough that a hostile config (`num_hidden_layers: 1e9`)
 * is refused before anything is built from it.
 */
export const LLAMA_CONFIG_LIMITS = {
  hidden_size: 2 ** 20,
  intermediate_size: 2 ** 22,
  num_attention_heads: 2 ** 14,
  num_key_value_heads: 2 ** 14,
  head_dim: 2 ** 14,
  num_hidden_layers: 4096,
  vocab_size: 2 ** 24,
  max_position_embeddings: 2 ** 24,
  sliding_window: 2 ** 24,
} as const;

type LimitedField = keyof typeof LLAMA_CONFIG_LIMITS;

function invalid(field: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(`config field '${field}' is invalid`, {
    operation: KERNEL,
    argument: field,
    expected,
    actual: actual === undefined ? 'absent' : JSON.stringify(actual).slice(0, 200),
  });
}

function positiveInteger(json: Record<string, unknown>, field: LimitedField): number {
  const value = json[field];
  const most = LLAMA_CONFIG_LIMITS[field];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    invalid(field, 'a positive integer', value);
  if (value > most) invalid(field, `at most ${most}`, value);
  return value;
}

function positiveNumber(json: Record<string, unknown>, field: string, fallback?: number): number {
  const value = json[field] ?? fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0)
    invalid(field, 'a positive number', value);
  return value;
}

function booleanField(json: Record<string, unknown>, field: string, fallback: boolean): boolean {
  const value = json[field] ?? fallback;
  if (typeof value !== 'boolean') invalid(field, 'a boolean', value);
  return value;
}

/** Fields whose other values change the computation in ways this decoder does not implement. */
function rejectUnsupported(json: Record<string, unknown>, family: LlamaFamily): void {
  if (json.hidden_act !== undefined && json.hidden_act !== 'silu')
    invalid('hidden_act', '"silu" (SwiGLU)', json.hidden_act);
  if (json.mlp_bias !== undefined && json.mlp_bias !== false)
    invalid('mlp_bias', 'false or absent (no MLP biases)', json.mlp_bias);
  if (json.rope_interleaved !== undefined && json.rope_interleaved !== false)
    invalid(
      'rope_interleaved',
      "false or absent (rotate-half RoPE, as transformers' Llama)",
      json.rope_interleaved,
    );
  if (json.use_mrope !== undefined && json.use_mrope !== false)
    invalid('use_mrope', 'false or absent (multimodal RoPE is not implemented)', json.use_mrope);
  if (json.attention_bias === undefined) return;
  if (typeof json.attention_bias !== 'boolean') invalid('attention_bias', 'a boolean', json.attention_bias);
  if (family.qkvBias === 'never' && json.attention_bias)
    invalid('attention_bias', `false or absent (${family.architecture} has no attention biases)`, true);
  if (family.qkvBias === 'always' && !json.attention_bias)
    invalid('attention_bias', `true or absent (${family.architecture} always biases q, k and v)`, false);
}

/** Whether any layer of the config slides its attention window (Qwen's `use_sliding_window`, `layer_types`). */
function anyLayerSlides(json: Record<string, unknown>, layers: number): boolean {
  const types = json.layer_types;
  if (types !== undefined && types !== null) {
    const kinds = ['full_attention', 'sliding_attention'];
    if (!Array.isArray(types) || types.length !== layers || !types.every((t) => kinds.includes(t)))
      invalid('layer_types', `${layers} entries, each "full_attention" or "sliding_attention"`, types);
    return types.includes('sliding_attention');
  }
  if (!booleanField(json, 'use_sliding_window', false)) return false;
  const full = json.max_window_layers ?? 28;
  if (typeof full !== 'number' || !Number.isInteger(full) || full < 0)
    invalid('max_window_layers', 'a non-negative integer', full);
  return full < layers;
}

/** The attention window that binds some layer, or undefined (see `LlamaConfig.slidingWindow`). */
function slidingWindowOf(
  json: Record<string, unknown>,
  family: LlamaFamily,
  layers: number,
): number | undefined {
  if (family.slidingWindow === 'none') return undefined;
  if (family.slidingWindow === 'use_sliding_window' && !anyLayerSlides(json, layers)) return undefined;
  const window = json.sliding_window === undefined ? family.defaultSlidingWindow : json.sliding_window;
  if (window === null || window === undefined) return undefined;
  return positiveInteger({ sliding_window: window }, 'sliding_window');
}

/**
 * Reads and checks a Hugging Face config of a supported family (Llama and
 * its TinyLlama and SmolLM2 checkpoints, Mistral, Qwen2, Qwen3; see
 * `LLAMA_FAMILIES`): sizes are positive integers, the heads divide as
 * grouped-query attention needs, the head dimension is even (RoPE rotates
 * pairs), RoPE's scaling is one this decoder computes (`rope_scaling`, or
 * transformers 5's `rope_parameters`). Defaults follow `transformers`:
 * key/value heads default to the attention heads, `rope_theta` to 10000,
 * `rms_norm_eps` to 1e-6, `tie_word_embeddings` to the family's. Anything
 * else is an InvalidArgumentError naming the field.
 */
export function parseLlamaConfig(json: unknown): LlamaConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    invalid('config', 'a JSON object', json);
  const c = json as Record<string, unknown>;
  const family = familyOfConfig(c);
  rejectUnsupported(c, family);
  const hiddenSize = positiveInteger(c, 'hidden_size');
  const numAttentionHeads = positiveInteger(c, 'num_attention_heads');
  const numKeyValueHeads =
    c.num_key_value_heads === undefined || c.num_key_value_heads === null
      ? numAttentionHeads
      : positiveInteger(c, 'num_key_value_heads');
  if (numAttentionHeads % numKeyValueHeads !== 0)
    invalid(
      'num_key_value_heads',
      `a divisor of num_attention_heads (${numAttentionHeads})`,
      numKeyValueHeads,
    );
  let headDim: number;
  if (c.head_dim === undefined || c.head_dim === null) {
    if (hiddenSize % numAttentionHeads !== 0)
      invalid('num_attention_heads', `a divisor of hidden_size (${hiddenSize})`, numAttentionHeads);
    headDim = hiddenSize / numAttentionHeads;
  } else {
    headDim = positiveInteger(c, 'head_dim');
  }
  if (headDim % 2 !== 0)
    invalid(
      c.head_dim === undefined ? 'num_attention_heads' : 'head_dim',
      'an even head dimension (RoPE rotates pairs)',
      headDim,
    );
  const numHiddenLayers = positiveInteger(c, 'num_hidden_layers');
  const { ropeTheta, ropeScaling } = parseRope(c);
  const attentionBias = c.attention_bias === true;
  const slidingWindow = slidingWindowOf(c, family, numHiddenLayers);
  return {
    hiddenSize,
    intermediateSize: positiveInteger(c, 'intermediate_size'),
    numAttentionHeads,
    numKeyValueHeads,
    numHiddenLayers,
    vocabSize: positiveInteger(c, 'vocab_size'),
    headDim,
    ropeTheta,
    rmsNormEps: positiveNumber(c, 'rms_norm_eps', 1e-6),
    tieWordEmbeddings: booleanField(c, 'tie_word_embeddings', family.tieWordEmbeddings),
    maxPositionEmbeddings: positiveInteger(c, 'max_position_embeddings'),
    family: family.name,
    qkvBias: family.qkvBias === 'always' || (family.qkvBias === 'attention_bias' && attentionBias),
    outputBias: family.outputBias === 'attention_bias' && attentionBias,
    qkNorm: family.qkNorm,
    ...(ropeScaling ? { ropeScaling } : {}),
    ...(slidingWindow !== undefined ? { slidingWindow } : {}),
  };
}

/**
 * Refuses a context longer than the config's sliding window, naming
 * `sliding_window`: within the window the attention is the full one, past
 * it the window would bind, and sliding-window attention is not implemented.
 */
export function checkSlidingWindow(config: LlamaConfig, maxSequence: number): void {
  if (config.slidingWindow === undefined || maxSequence <= config.slidingWindow) return;
  throw new InvalidArgumentError('the context is longer than the sliding attention window', {
    operation: 'LlamaModel',
    argument: 'sliding_window',
    expected: `maxSequence <= sliding_window (${config.slidingWindow}), where the window never binds: sliding-window attention is not implemented`,
    actual: `maxSequence ${maxSequence}`,
  });
}
