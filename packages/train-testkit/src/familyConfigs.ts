// Tiny config.json files of each supported family: the key set of a real
// checkpoint's config (named below), with the sizes cut down to 2 layers,
// d 64, 4 query / 2 kv heads, vocab 97 and an odd FFN, and RoPE's original
// context cut so that Llama 3's three frequency bands all fall within a
// head of 16.

/** The sizes every tiny family config shares. */
const TINY = {
  hidden_size: 64,
  intermediate_size: 91,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  num_hidden_layers: 2,
  vocab_size: 97,
  max_position_embeddings: 64,
} as const;

/** Llama 3.2 1B's keys (tied head, head_dim, llama3 RoPE scaling). */
export function llama32Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: 1,
    eos_token_id: 2,
    head_dim: 16,
    hidden_act: 'silu',
    initializer_range: 0.02,
    mlp_bias: false,
    model_type: 'llama',
    pretraining_tp: 1,
    rms_norm_eps: 1e-5,
    rope_scaling: {
      factor: 32.0,
      high_freq_factor: 4.0,
      low_freq_factor: 1.0,
      original_max_position_embeddings: 64,
      rope_type: 'llama3',
    },
    rope_theta: 500000.0,
    tie_word_embeddings: true,
    torch_dtype: 'bfloat16',
    transformers_version: '4.45.0.dev0',
    use_cache: true,
    ...TINY,
    ...overrides,
  };
}

/** Llama 3.1 8B's keys (untied, llama3 scaling of factor 8), as transformers 5 saves them: `rope_parameters`. */
export function llama31Transformers5Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: 1,
    dtype: 'bfloat16',
    eos_token_id: 2,
    head_dim: 16,
    hidden_act: 'silu',
    initializer_range: 0.02,
    mlp_bias: false,
    model_type: 'llama',
    pretraining_tp: 1,
    rms_norm_eps: 1e-5,
    rope_parameters: {
      factor: 8.0,
      high_freq_factor: 4.0,
      low_freq_factor: 1.0,
      original_max_position_embeddings: 64,
      rope_theta: 500000.0,
      rope_type: 'llama3',
    },
    tie_word_embeddings: false,
    transformers_version: '5.0.0',
    use_cache: true,
    ...TINY,
    ...overrides,
  };
}

/** Llama 2 7B's keys (no head_dim, rope_scaling null, untied). */
export function llama2Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    bos_token_id: 1,
    eos_token_id: 2,
    hidden_act: 'silu',
    initializer_range: 0.02,
    model_type: 'llama',
    pretraining_tp: 1,
    rms_norm_eps: 1e-5,
    rope_scaling: null,
    tie_word_embeddings: false,
    torch_dtype: 'float16',
    transformers_version: '4.31.0.dev0',
    use_cache: true,
    ...TINY,
    ...overrides,
  };
}

/** TinyLlama 1.1B's keys. */
export function tinyLlama11Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    attention_bias: false,
    bos_token_id: 1,
    eos_token_id: 2,
    hidden_act: 'silu',
    initializer_range: 0.02,
    model_type: 'llama',
    pretraining_tp: 1,
    rms_norm_eps: 1e-5,
    rope_scaling: null,
    rope_theta: 10000.0,
    tie_word_embeddings: false,
    torch_dtype: 'bfloat16',
    transformers_version: '4.35.0',
    use_cache: true,
    ...TINY,
    ...overrides,
  };
}

/** SmolLM2 135M's keys (tied, rope_interleaved false, theta 100000). */
export function smolLM2Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: 0,
    eos_token_id: 0,
    hidden_act: 'silu',
    initializer_range: 0.041666666666666664,
    is_llama_config: true,
    mlp_bias: false,
    model_type: 'llama',
    pretraining_tp: 1,
    rms_norm_eps: 1e-5,
    rope_interleaved: false,
    rope_scaling: null,
    rope_theta: 100000,
    tie_word_embeddings: true,
    torch_dtype: 'bfloat16',
    transformers_version: '4.42.3',
    use_cache: true,
    ...TINY,
    ...overrides,
  };
}

/** Qwen2.5 0.5B's keys (q, k, v biases, tied, sliding_window with use_sliding_window false). */
export function qwen25Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['Qwen2ForCausalLM'],
    attention_dropout: 0.0,
    bos_token_id: 1,
    eos_token_id: 1,
    hidden_act: 'silu',
    initializer_range: 0.02,
    max_window_layers: 2,
    model_type: 'qwen2',
    rms_norm_eps: 1e-6,
    rope_theta: 1000000.0,
    sliding_window: 32,
    tie_word_embeddings: true,
    torch_dtype: 'bfloat16',
    transformers_version: '4.40.1',
    use_cache: true,
    use_mrope: false,
    use_sliding_window: false,
    ...TINY,
    ...overrides,
  };
}

/** Qwen3 0.6B's keys (q/k norms, head_dim apart from hidden_size / heads, tied, no biases). */
export function qwen3Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['Qwen3ForCausalLM'],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: 1,
    eos_token_id: 2,
    head_dim: 24,
    hidden_act: 'silu',
    initializer_range: 0.02,
    max_window_layers: 2,
    model_type: 'qwen3',
    rms_norm_eps: 1e-6,
    rope_scaling: null,
    rope_theta: 1000000,
    sliding_window: null,
    tie_word_embeddings: true,
    torch_dtype: 'bfloat16',
    transformers_version: '4.51.0',
    use_cache: true,
    use_sliding_window: false,
    ...TINY,
    ...overrides,
  };
}

/** Mistral 7B v0.3's keys (sliding_window null, untied). */
export function mistral03Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['MistralForCausalLM'],
    attention_dropout: 0.0,
    bos_token_id: 1,
    eos_token_id: 2,
    hidden_act: 'silu',
    initializer_range: 0.02,
    model_type: 'mistral',
    rms_norm_eps: 1e-5,
    rope_theta: 1000000.0,
    sliding_window: null,
    tie_word_embeddings: false,
    torch_dtype: 'bfloat16',
    transformers_version: '4.42.0.dev0',
    use_cache: true,
    ...TINY,
    ...overrides,
  };
}

/** Mistral 7B v0.1's keys: a sliding window (cut to 48 here, beyond the 32 rows the tests use). */
export function mistral01Config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return mistral03Config({
    rope_theta: 10000.0,
    sliding_window: 48,
    transformers_version: '4.34.0.dev0',
    ...overrides,
  });
}

/** Every family's tiny config, by the checkpoint it copies. */
export const FAMILY_CONFIGS: readonly (readonly [string, () => Record<string, unknown>])[] = [
  ['Llama 3.2 (llama3 RoPE, tied)', () => llama32Config()],
  ['Llama 3.1 saved by transformers 5 (rope_parameters)', () => llama31Transformers5Config()],
  ['Llama 2', () => llama2Config()],
  ['Llama 2 with attention_bias (q, k, v and o biases)', () => llama2Config({ attention_bias: true })],
  ['TinyLlama', () => tinyLlama11Config()],
  ['SmolLM2', () => smolLM2Config()],
  ['Qwen2.5 (q, k, v biases)', () => qwen25Config()],
  ['Qwen3 (q/k norms)', () => qwen3Config()],
  ['Qwen3 with attention_bias', () => qwen3Config({ attention_bias: true })],
  ['Mistral v0.3', () => mistral03Config()],
  ['Mistral v0.1 (window 48 > context)', () => mistral01Config()],
];
