import type { LlamaConfig } from '../models/llama/config.js';

/**
 * llama.cpp's tensor names of a Llama decoder and the Hugging Face names the
 * decoder uses, one to one. `output.weight` is absent from a file whose head
 * is tied to the embedding.
 */
const GLOBAL: Readonly<Record<string, string>> = {
  'token_embd.weight': 'model.embed_tokens.weight',
  'output_norm.weight': 'model.norm.weight',
  'output.weight': 'lm_head.weight',
};

const LAYER: Readonly<Record<string, string>> = {
  attn_norm: 'input_layernorm',
  attn_q: 'self_attn.q_proj',
  attn_k: 'self_attn.k_proj',
  attn_v: 'self_attn.v_proj',
  attn_output: 'self_attn.o_proj',
  ffn_norm: 'post_attention_layernorm',
  ffn_gate: 'mlp.gate_proj',
  ffn_up: 'mlp.up_proj',
  ffn_down: 'mlp.down_proj',
};

const HF_LAYER = Object.fromEntries(Object.entries(LAYER).map(([gguf, hf]) => [hf, gguf]));
const HF_GLOBAL = Object.fromEntries(Object.entries(GLOBAL).map(([gguf, hf]) => [hf, gguf]));

/** The Hugging Face name of a GGUF Llama tensor, or undefined for a name the decoder does not use. */
export function hfNameOfGguf(name: string): string | undefined {
  const global = GLOBAL[name];
  if (global) return global;
  const match = /^blk\.(\d+)\.(\w+)\.weight$/.exec(name);
  const suffix = match ? LAYER[match[2]!] : undefined;
  return suffix ? `model.layers.${match![1]}.${suffix}.weight` : undefined;
}

/** The GGUF name of a Hugging Face Llama weight, or undefined for a name outside the decoder. */
export function ggufNameOfHf(name: string): string | undefined {
  const global = HF_GLOBAL[name];
  if (global) return global;
  const match = /^model\.layers\.(\d+)\.(.+)\.weight$/.exec(name);
  const part = match ? HF_LAYER[match[2]!] : undefined;
  return part ? `blk.${match![1]}.${part}.weight` : undefined;
}

/**
 * How many heads the rows of a weight are split into for llama.cpp's RoPE
 * layout: the query heads for Q, the key/value heads for K, none otherwise.
 */
export function ropeHeadsOf(config: LlamaConfig, hfName: string): number | undefined {
  if (hfName.endsWith('.self_attn.q_proj.weight')) return config.numAttentionHeads;
  if (hfName.endsWith('.self_attn.k_proj.weight')) return config.numKeyValueHeads;
  return undefined;
}
