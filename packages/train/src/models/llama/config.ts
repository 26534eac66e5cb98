import { InvalidArgumentError } from '@rayo/core';

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
}

const KERNEL = 'llamaConfig';

function invalid(field: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(`config field '${field}' is invalid`, {
    kernel: KERNEL,
    argument: field,
    expected,
    actual: actual === undefined ? 'absent' : JSON.stringify(actual),
  });
}

function positiveInteger(json: Record<string, unknown>, field: string): number {
  const value = json[field];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    invalid(field, 'a positive integer', value);
  return value;
}

function positiveNumber(json: Record<string, unknown>, field: string, fallback?: number): number {
  const value = json[field] ?? fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0)
    invalid(field, 'a positive number', value);
  return value;
}

/** Fields whose other values change the computation in ways this decoder does not implement. */
function rejectUnsupported(json: Record<string, unknown>): void {
  if (json.rope_scaling !== undefined && json.rope_scaling !== null)
    invalid('rope_scaling', 'null or absent (scaled RoPE is not implemented)', json.rope_scaling);
  if (json.hidden_act !== undefined && json.hidden_act !== 'silu')
    invalid('hidden_act', '"silu" (SwiGLU)', json.hidden_act);
  for (const bias of ['attention_bias', 'mlp_bias']) {
    if (json[bias] !== undefined && json[bias] !== false)
      invalid(bias, 'false or absent (no biases)', json[bias]);
  }
}

/**
 * Reads and checks a Hugging Face Llama config: sizes are positive integers,
 * the heads divide as grouped-query attention needs, the head dimension is
 * even (RoPE rotates pairs). Defaults follow `transformers`: key/value heads
 * default to the attention heads, `rope_theta` to 10000, `rms_norm_eps` to
 * 1e-6, `tie_word_embeddings` to false. Anything else is an
 * InvalidArgumentError naming the field.
 */
export function parseLlamaConfig(json: unknown): LlamaConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    invalid('config', 'a JSON object', json);
  const c = json as Record<string, unknown>;
  rejectUnsupported(c);
  const hiddenSize = positiveInteger(c, 'hidden_size');
  const numAttentionHeads = positiveInteger(c, 'num_attention_heads');
  const numKeyValueHeads =
    c.num_key_value_heads === undefined ? numAttentionHeads : positiveInteger(c, 'num_key_value_heads');
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
  const tie = c.tie_word_embeddings ?? false;
  if (typeof tie !== 'boolean') invalid('tie_word_embeddings', 'a boolean', tie);
  return {
    hiddenSize,
    intermediateSize: positiveInteger(c, 'intermediate_size'),
    numAttentionHeads,
    numKeyValueHeads,
    numHiddenLayers: positiveInteger(c, 'num_hidden_layers'),
    vocabSize: positiveInteger(c, 'vocab_size'),
    headDim,
    ropeTheta: positiveNumber(c, 'rope_theta', 10000),
    rmsNormEps: positiveNumber(c, 'rms_norm_eps', 1e-6),
    tieWordEmbeddings: tie,
    maxPositionEmbeddings: positiveInteger(c, 'max_position_embeddings'),
  };
}
