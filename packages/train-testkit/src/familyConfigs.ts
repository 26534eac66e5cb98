// Tiny config.json files of each supported family: the key set of a real
// checkpoint's config (named below), with the sizes cut down to 2 layers,
// d 64, 4 query / 2 kv heads, vocab 97 and an odd FFN, and RoPE's original
// context cut so that Llama 3's three frequency bands all fall within a
// head of 16.

/** The model sizes of every tiny config, these and tinyLlama.ts's. */
export const TINY_SIZES = {
  hidden_size: 64,
  intermediate_size: 91,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  num_hidden_layers: 2,
  vocab_size: 97,
} as const;

/** The sizes every tiny family config shares. */
const TINY = { ...TINY_SIZES, max_position_embeddings: 64 } as const;

type Config = Record<string, unknown>;

/** A copy of `value` with the keys of each object in it sorted, as transformers writes a config.json. */
function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value === null || typeof value !== 'object') return value;
  const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(entries.map(([key, inner]) => [key, sortedKeys(inner)]));
}

/**
 * A family's config: its own keys in the order a saved config.json lists
 * them, then the tiny sizes, then a test's overrides. Each call copies the
 * family's keys afresh, so a test may change what it gets.
 */
function tinyConfig(keys: Config) {
  return (overrides: Config = {}): Config => ({ ...(sortedKeys(keys) as Config), ...TINY, ...overrides });
}

/** Keys every family's config carries, at the value most of them have. */
const COMMON = {
  bos_token_id: 1,
  eos_token_id: 2,
  hidden_act: 'silu',
  initializer_range: 0.02,
  rms_norm_eps: 1e-5,
  use_cache: true,
};

/** What every Llama-architecture checkpoint's config adds. */
const LLAMA = { ...COMMON, architectures: ['LlamaForCausalLM'], model_type: 'llama', pretraining_tp: 1 };

/** Llama 3's RoPE scaling, with its original context cut to the tiny one. */
const llama3Rope = (factor: number) => ({
  factor,
  high_freq_factor: 4.0,
  low_freq_factor: 1.0,
  original_max_position_embeddings: 64,
  rope_type: 'llama3',
});

/** Llama 3.2 1B's keys (tied head, head_dim, llama3 RoPE scaling). */
export const llama32Config = tinyConfig({
  ...LLAMA,
  attention_bias: false,
  attention_dropout: 0.0,
  head_dim: 16,
  mlp_bias: false,
  rope_scaling: llama3Rope(32.0),
  rope_theta: 500000.0,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.45.0.dev0',
});

/** Llama 3.1 8B's keys (untied, llama3 scaling of factor 8), as transformers 5 saves them: `rope_parameters`. */
export const llama31Transformers5Config = tinyConfig({
  ...LLAMA,
  attention_bias: false,
  attention_dropout: 0.0,
  dtype: 'bfloat16',
  head_dim: 16,
  mlp_bias: false,
  rope_parameters: { ...llama3Rope(8.0), rope_theta: 500000.0 },
  tie_word_embeddings: false,
  transformers_version: '5.0.0',
});

/** Llama 2 7B's keys (no head_dim, rope_scaling null, untied). */
export const llama2Config = tinyConfig({
  ...LLAMA,
  rope_scaling: null,
  tie_word_embeddings: false,
  torch_dtype: 'float16',
  transformers_version: '4.31.0.dev0',
});

/** TinyLlama 1.1B's keys. */
export const tinyLlama11Config = tinyConfig({
  ...LLAMA,
  attention_bias: false,
  rope_scaling: null,
  rope_theta: 10000.0,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
  transformers_version: '4.35.0',
});

/** SmolLM2 135M's keys (tied, rope_interleaved false, theta 100000). */
export const smolLM2Config = tinyConfig({
  ...LLAMA,
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 0,
  eos_token_id: 0,
  initializer_range: 0.041666666666666664,
  is_llama_config: true,
  mlp_bias: false,
  rope_interleaved: false,
  rope_scaling: null,
  rope_theta: 100000,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.42.3',
});

/** Qwen2.5 0.5B's keys (q, k, v biases, tied, sliding_window with use_sliding_window false). */
export const qwen25Config = tinyConfig({
  ...COMMON,
  architectures: ['Qwen2ForCausalLM'],
  attention_dropout: 0.0,
  eos_token_id: 1,
  max_window_layers: 2,
  model_type: 'qwen2',
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  sliding_window: 32,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.40.1',
  use_mrope: false,
  use_sliding_window: false,
});

/** Qwen3 0.6B's keys (q/k norms, head_dim apart from hidden_size / heads, tied, no biases). */
export const qwen3Config = tinyConfig({
  ...COMMON,
  architectures: ['Qwen3ForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  head_dim: 24,
  max_window_layers: 2,
  model_type: 'qwen3',
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.51.0',
  use_sliding_window: false,
});

/** Mistral 7B v0.3's keys (sliding_window null, untied). */
export const mistral03Config = tinyConfig({
  ...COMMON,
  architectures: ['MistralForCausalLM'],
  attention_dropout: 0.0,
  model_type: 'mistral',
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
  transformers_version: '4.42.0.dev0',
});

/** Mistral 7B v0.1's keys: a sliding window (cut to 48 here, beyond the 32 rows the tests use). */
export function mistral01Config(overrides: Config = {}): Config {
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
