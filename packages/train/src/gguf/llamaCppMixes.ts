import type { Shape } from '@rayo/core';
import type { LlamaConfig } from '../models/llama/config.js';
import { llamaToGguf } from './convertLlama.js';
import { GGML_TYPES, type GgmlType } from './ggmlTypes.js';
import { seededLlamaWeights, useMoreBits } from './quantizedDecodeCheck.js';
import { writeGgufFile } from './writer.js';

// Which type llama.cpp's quantizer gives each tensor of a Llama for the
// Q4_K_M and Q5_K_M mixes (`llama_tensor_get_type`), so that tests write the
// files people publish: the mix's k-quant, Q6_K where it spends more bits,
// and the fallbacks for rows that do not divide into 256-element blocks.

/** The k-quant mixes written here: their base type for the matrices. */
export const LLAMA_CPP_MIXES = { Q4_K_M: 'Q4_K', Q5_K_M: 'Q5_K' } as const;
export type LlamaCppMix = keyof typeof LLAMA_CPP_MIXES;

/** A k-quant whose row does not divide into 256: Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0; F16 where 32 fails too. */
function fallback(type: GgmlType, rowLength: number): GgmlType {
  if (rowLength % GGML_TYPES[type].blockSize === 0) return type;
  const next: GgmlType =
    type === 'Q4_K' ? 'Q5_0' : type === 'Q5_K' ? 'Q5_1' : type === 'Q6_K' ? 'Q8_0' : type;
  return rowLength % GGML_TYPES[next].blockSize === 0 ? next : 'F16';
}

/**
 * The type llama.cpp writes for each weight of `config` in `mix`: vectors
 * F32; the head (or, tied, the embedding it shares) Q6_K, Q8_0 where its
 * rows do not divide into 256; `attn_v` and `ffn_down` of the layers
 * `useMoreBits` picks Q6_K; every other matrix the mix's base type; then the
 * fallbacks of rows that do not divide into 256 (see `fallback`).
 */
export function llamaCppTypeOf(
  mix: LlamaCppMix,
  config: LlamaConfig,
): (hfName: string, shape: Shape) => GgmlType {
  const layers = config.numHiddenLayers;
  return (hfName, shape) => {
    if (shape.length === 1) return 'F32';
    const rowLength = shape[shape.length - 1]!;
    const isHead =
      hfName === 'lm_head.weight' || (config.tieWordEmbeddings && hfName === 'model.embed_tokens.weight');
    if (isHead) return rowLength % 256 === 0 ? 'Q6_K' : 'Q8_0';
    const more = /^model\.layers\.(\d+)\.(self_attn\.v_proj|mlp\.down_proj)\.weight$/.exec(hfName);
    const type = more && useMoreBits(Number(more[1]), layers) ? 'Q6_K' : LLAMA_CPP_MIXES[mix];
    return fallback(type, rowLength);
  };
}

/** Writes a GGUF file of `config` with seeded weights in llama.cpp's `mix`; returns each tensor's type. */
export async function writeLlamaCppMix(
  path: string,
  config: LlamaConfig,
  mix: LlamaCppMix,
  seed: number,
): Promise<Map<string, GgmlType>> {
  const typeOf = llamaCppTypeOf(mix, config);
  const weights = seededLlamaWeights(config, seed);
  await writeGgufFile(path, llamaToGguf(config, weights, { typeOf }));
  return new Map([...weights].map(([name, { shape }]) => [name, typeOf(name, shape)]));
}
