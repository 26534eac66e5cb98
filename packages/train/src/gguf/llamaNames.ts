import type { LlamaConfig } from '../models/llama/config.js';
import { llamaFamily } from '../models/llama/families.js';

/**
 * llama.cpp's tensor names of a decoder of the supported families and the
 * Hugging Face names the decoder uses, one to one. `output.weight` is absent
 * from a file whose head is tied to the embedding; the biases and the q/k
 * norms are present where the family (or its `attention_bias`) has them.
 */
const GLOBAL: Readonly<Record<string, string>> = {
  'token_embd.weight': 'model.embed_tokens.weight',
  'output_norm.weight': 'model.norm.weight',
  'output.weight': 'lm_head.weight',
};

const LAYER: Readonly<Record<string, string>> = {
  'attn_norm.weight': 'input_layernorm.weight',
  'attn_q.weight': 'self_attn.q_proj.weight',
  'attn_k.weight': 'self_attn.k_proj.weight',
  'attn_v.weight': 'self_attn.v_proj.weight',
  'attn_output.weight': 'self_attn.o_proj.weight',
  'ffn_norm.weight': 'post_attention_layernorm.weight',
  'ffn_gate.weight': 'mlp.gate_proj.weight',
  'ffn_up.weight': 'mlp.up_proj.weight',
  'ffn_down.weight': 'mlp.down_proj.weight',
  'attn_q.bias': 'self_attn.q_proj.bias',
  'attn_k.bias': 'self_attn.k_proj.bias',
  'attn_v.bias': 'self_attn.v_proj.bias',
  'attn_output.bias': 'self_attn.o_proj.bias',
  'attn_q_norm.weight': 'self_attn.q_norm.weight',
  'attn_k_norm.weight': 'self_attn.k_norm.weight',
};

/** llama.cpp's table of llama3 RoPE frequency factors (frequency i is divided by factor i). */
export const ROPE_FREQS = 'rope_freqs.weight';

const HF_LAYER = Object.fromEntries(Object.entries(LAYER).map(([gguf, hf]) => [hf, gguf]));
const HF_GLOBAL = Object.fromEntries(Object.entries(GLOBAL).map(([gguf, hf]) => [hf, gguf]));

/** The Hugging Face name of a GGUF decoder tensor, or undefined for a name the decoder does not use. */
export function hfNameOfGguf(name: string): string | undefined {
  const global = GLOBAL[name];
  if (global) return global;
  const match = /^blk\.(\d+)\.(.+)$/.exec(name);
  const suffix = match ? LAYER[match[2]!] : undefined;
  return suffix ? `model.layers.${match![1]}.${suffix}` : undefined;
}

/** The GGUF name of a Hugging Face decoder weight, or undefined for a name outside the decoder. */
export function ggufNameOfHf(name: string): string | undefined {
  const global = HF_GLOBAL[name];
  if (global) return global;
  const match = /^model\.layers\.(\d+)\.(.+)$/.exec(name);
  const part = match ? HF_LAYER[match[2]!] : undefined;
  return part ? `blk.${match![1]}.${part}` : undefined;
}

/**
 * How many heads the rows of a weight (or the elements of a bias) are split
 * into for llama.cpp's RoPE layout: the query heads for Q, the key/value
 * heads for K, none otherwise. Only the `llama` architecture is permuted by
 * the converter; Qwen2 and Qwen3 files keep Hugging Face's order (llama.cpp
 * rotates their halves, as Hugging Face does).
 */
export function ropeHeadsOf(config: LlamaConfig, hfName: string): number | undefined {
  if (llamaFamily(config.family).ggufArchitecture !== 'llama') return undefined;
  if (/\.self_attn\.q_proj\.(weight|bias)$/.test(hfName)) return config.numAttentionHeads;
  if (/\.self_attn\.k_proj\.(weight|bias)$/.test(hfName)) return config.numKeyValueHeads;
  return undefined;
}
