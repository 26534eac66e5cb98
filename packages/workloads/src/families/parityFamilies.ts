/**
 * The checkpoints the family parity harness writes with `transformers`: each
 * real model's config.json keys and sizes, with its layers cut to
 * `PARITY_LAYERS` (the weights random). The tied head and RoPE scaling are
 * the real ones', so that what a family does differently is exercised at
 * its real width.
 */
export interface ParityFamily {
  /** A short name, e.g. `llama-3.2-1b`: the checkpoint folders are `<name>-f32`, `<name>-bf16`. */
  readonly name: string;
  /** The Hugging Face checkpoint whose config this copies. */
  readonly source: string;
  /** The config's keys as `transformers`' config class takes them (`rope_theta`, `rope_scaling`). */
  readonly config: Readonly<Record<string, unknown>>;
}

/** Decoder layers of every parity checkpoint: two, so that layer-to-layer wiring shows. */
export const PARITY_LAYERS = 2;

const LLAMA3_SCALING = {
  low_freq_factor: 1.0,
  high_freq_factor: 4.0,
  original_max_position_embeddings: 8192,
};

/** Mistral 7B v0.3's config; v0.1 differs in its vocabulary, RoPE theta and window. */
const MISTRAL_7B = {
  model_type: 'mistral',
  architectures: ['MistralForCausalLM'],
  hidden_size: 4096,
  intermediate_size: 14336,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  vocab_size: 32768,
  max_position_embeddings: 32768,
  rms_norm_eps: 1e-5,
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  hidden_act: 'silu',
};

export const PARITY_FAMILIES: readonly ParityFamily[] = [
  {
    name: 'llama-3.2-1b',
    source: 'meta-llama/Llama-3.2-1B',
    config: {
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
      hidden_size: 2048,
      intermediate_size: 8192,
      num_attention_heads: 32,
      num_key_value_heads: 8,
      head_dim: 64,
      vocab_size: 128256,
      max_position_embeddings: 131072,
      rms_norm_eps: 1e-5,
      rope_theta: 500000.0,
      rope_scaling: { rope_type: 'llama3', factor: 32.0, ...LLAMA3_SCALING },
      tie_word_embeddings: true,
      attention_bias: false,
      mlp_bias: false,
      hidden_act: 'silu',
    },
  },
  {
    name: 'llama-3.1-8b',
    source: 'meta-llama/Llama-3.1-8B (Llama 3.3 70B has the same config form)',
    config: {
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
      hidden_size: 4096,
      intermediate_size: 14336,
      num_attention_heads: 32,
      num_key_value_heads: 8,
      vocab_size: 128256,
      max_position_embeddings: 131072,
      rms_norm_eps: 1e-5,
      rope_theta: 500000.0,
      rope_scaling: { rope_type: 'llama3', factor: 8.0, ...LLAMA3_SCALING },
      tie_word_embeddings: false,
      attention_bias: false,
      mlp_bias: false,
      hidden_act: 'silu',
    },
  },
  {
    name: 'llama-2-7b',
    source: 'meta-llama/Llama-2-7b-hf',
    config: {
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
      hidden_size: 4096,
      intermediate_size: 11008,
      num_attention_heads: 32,
      num_key_value_heads: 32,
      vocab_size: 32000,
      max_position_embeddings: 4096,
      rms_norm_eps: 1e-5,
      rope_theta: 10000.0,
      tie_word_embeddings: false,
      hidden_act: 'silu',
    },
  },
  {
    name: 'tinyllama-1.1b',
    source: 'TinyLlama/TinyLlama-1.1B-Chat-v1.0',
    config: {
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
      hidden_size: 2048,
      intermediate_size: 5632,
      num_attention_heads: 32,
      num_key_value_heads: 4,
      vocab_size: 32000,
      max_position_embeddings: 2048,
      rms_norm_eps: 1e-5,
      rope_theta: 10000.0,
      tie_word_embeddings: false,
      attention_bias: false,
      hidden_act: 'silu',
    },
  },
  {
    name: 'smollm2-135m',
    source: 'HuggingFaceTB/SmolLM2-135M',
    config: {
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
      hidden_size: 576,
      intermediate_size: 1536,
      num_attention_heads: 9,
      num_key_value_heads: 3,
      vocab_size: 49152,
      max_position_embeddings: 8192,
      rms_norm_eps: 1e-5,
      rope_theta: 100000.0,
      tie_word_embeddings: true,
      attention_bias: false,
      mlp_bias: false,
      hidden_act: 'silu',
    },
  },
  {
    name: 'qwen2.5-0.5b',
    source: 'Qwen/Qwen2.5-0.5B',
    config: {
      model_type: 'qwen2',
      architectures: ['Qwen2ForCausalLM'],
      hidden_size: 896,
      intermediate_size: 4864,
      num_attention_heads: 14,
      num_key_value_heads: 2,
      vocab_size: 151936,
      max_position_embeddings: 32768,
      rms_norm_eps: 1e-6,
      rope_theta: 1000000.0,
      sliding_window: 32768,
      use_sliding_window: false,
      max_window_layers: 24,
      tie_word_embeddings: true,
      hidden_act: 'silu',
    },
  },
  {
    name: 'qwen3-0.6b',
    source: 'Qwen/Qwen3-0.6B',
    config: {
      model_type: 'qwen3',
      architectures: ['Qwen3ForCausalLM'],
      hidden_size: 1024,
      intermediate_size: 3072,
      num_attention_heads: 16,
      num_key_value_heads: 8,
      head_dim: 128,
      vocab_size: 151936,
      max_position_embeddings: 40960,
      rms_norm_eps: 1e-6,
      rope_theta: 1000000.0,
      attention_bias: false,
      use_sliding_window: false,
      max_window_layers: 28,
      tie_word_embeddings: true,
      hidden_act: 'silu',
    },
  },
  {
    name: 'mistral-7b-v0.3',
    source: 'mistralai/Mistral-7B-v0.3',
    config: MISTRAL_7B,
  },
  {
    name: 'mistral-7b-v0.1',
    source: 'mistralai/Mistral-7B-v0.1 (a 4096 window, wider than the parity context)',
    config: { ...MISTRAL_7B, vocab_size: 32000, rope_theta: 10000.0, sliding_window: 4096 },
  },
];

/** The family named `name`, or undefined. */
export function parityFamily(name: string): ParityFamily | undefined {
  return PARITY_FAMILIES.find((f) => f.name === name);
}
