import { type Backend, createCpuBackend, type Shape } from '@rayo/core';
import { type LlamaConfig, parseLlamaConfig } from '../models/llama/config.js';
import type { LlamaModel } from '../models/llama/model.js';
import { LLAMA_PROJECTIONS, type LlamaWeightDTypeChoice } from '../models/llama/weights.js';
import { Rng } from '../random.js';
import { type HfWeight, llamaToGguf } from './convertLlama.js';
import { dequantize } from './dequantize.js';
import { type GgmlType, isGgmlQuantizedType } from './ggmlTypes.js';
import { loadGgufLlama } from './loadLlama.js';
import { type GgufRepack, refuseQuantized, repackOntoCoreFormats } from './repack.js';
import { writeGgufFile } from './writer.js';

// The check that a quantized GGUF Llama decodes on a backend as its own
// weights do: the file loaded with `repackOntoCoreFormats` (the weights stay
// quantized on the device) against the same file dequantized on the host by
// ggml's reference dequantization and decoded in f32 on the cpu backend.
// Both read the same values (the repacks are exact), so they differ only in
// the order the kernels sum, and greedy tokens must agree.

/**
 * llama.cpp's choice for a Q4_K_M file (`llama_tensor_get_type`): Q6_K for
 * `output.weight`, and for `attn_v` and `ffn_down` of the layers that
 * `use_more_bits` picks (the first and last eighth, and every third in
 * between); Q4_K for every other matrix, the token embedding included;
 * norms F32.
 */
export function q4kmTypeOf(numLayers: number): (hfName: string) => GgmlType {
  return (hfName) => {
    if (hfName.endsWith('norm.weight')) return 'F32';
    if (hfName === 'lm_head.weight') return 'Q6_K';
    const layer = /^model\.layers\.(\d+)\.(self_attn\.v_proj|mlp\.down_proj)\.weight$/.exec(hfName);
    if (layer && useMoreBits(Number(layer[1]), numLayers)) return 'Q6_K';
    return 'Q4_K';
  };
}

/**
 * llama.cpp's `use_more_bits`: the first and last eighth of the layers and
 * every third in between (integer division, as in C).
 */
export function useMoreBits(layer: number, layers: number): boolean {
  const eighth = Math.floor(layers / 8);
  return layer < eighth || layer >= Math.floor((7 * layers) / 8) || (layer - eighth) % 3 === 2;
}

/**
 * A small Llama whose every matrix divides into 256-element k-quant blocks,
 * unless `intermediate` (default 512) does not: then the MLP's down rows take
 * llama.cpp's fallbacks (Q5_0, Q5_1 or Q8_0 for Q4_K, Q5_K or Q6_K).
 */
export function q4kmTestConfig(
  options: { layers?: number; tied?: boolean; vocab?: number; intermediate?: number } = {},
): LlamaConfig {
  return parseLlamaConfig({
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    hidden_size: 256,
    intermediate_size: options.intermediate ?? 512,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    num_hidden_layers: options.layers ?? 3,
    vocab_size: options.vocab ?? 96,
    rope_theta: 10000,
    rms_norm_eps: 2 ** -17,
    tie_word_embeddings: options.tied ?? false,
    max_position_embeddings: 64,
    hidden_act: 'silu',
    torch_dtype: 'float32',
  });
}

/**
 * Weights by Hugging Face name from a seed, uniform with standard
 * deviations 1 (embedding), 0.5/sqrt(fan-in) (projections) and 0.2 (an
 * untied head), norm weights near 1: greedy choices are decisive (the
 * logits spread by about 10), so a summation order cannot flip a token,
 * and an untied model walks through varied tokens (a tied one tends to
 * repeat its last token, its own row of the table).
 */
export function seededLlamaWeights(config: LlamaConfig, seed: number): Map<string, HfWeight> {
  const rng = new Rng(seed);
  const { hiddenSize: d, intermediateSize: f, numAttentionHeads: heads, numKeyValueHeads: kv } = config;
  const { headDim, vocabSize: vocab } = config;
  const weights = new Map<string, HfWeight>();
  const add = (name: string, shape: Shape, bound: number, centre = 0) => {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    // fillUniform gives uniform()'s numbers many times faster (a 1B model's weights in seconds).
    if (centre === 0) rng.fillUniform(data, -bound, bound);
    else for (let i = 0; i < data.length; i++) data[i] = centre + rng.uniform(-bound, bound);
    weights.set(name, { shape, data });
  };
  const linear = (name: string, out: number, inFeatures: number) =>
    add(name, [out, inFeatures], 0.5 * Math.sqrt(3 / inFeatures));
  add('model.embed_tokens.weight', [vocab, d], Math.sqrt(3));
  for (let i = 0; i < config.numHiddenLayers; i++) {
    const p = `model.layers.${i}`;
    add(`${p}.input_layernorm.weight`, [d], 0.2, 1);
    linear(`${p}.self_attn.q_proj.weight`, heads * headDim, d);
    linear(`${p}.self_attn.k_proj.weight`, kv * headDim, d);
    linear(`${p}.self_attn.v_proj.weight`, kv * headDim, d);
    linear(`${p}.self_attn.o_proj.weight`, d, heads * headDim);
    add(`${p}.post_attention_layernorm.weight`, [d], 0.2, 1);
    linear(`${p}.mlp.gate_proj.weight`, f, d);
    linear(`${p}.mlp.up_proj.weight`, f, d);
    linear(`${p}.mlp.down_proj.weight`, d, f);
  }
  add('model.norm.weight', [d], 0.2, 1);
  if (!config.tieWordEmbeddings) add('lm_head.weight', [vocab, d], 0.2 * Math.sqrt(3));
  return weights;
}

/** Writes a GGUF file of `config` with seeded weights in llama.cpp's Q4_K_M mix; returns each tensor's type. */
export async function writeQ4kmLlama(
  path: string,
  config: LlamaConfig,
  seed: number,
): Promise<Map<string, GgmlType>> {
  const typeOf = q4kmTypeOf(config.numHiddenLayers);
  const weights = seededLlamaWeights(config, seed);
  await writeGgufFile(path, llamaToGguf(config, weights, { typeOf }));
  return new Map([...weights.keys()].map((name) => [name, typeOf(name)]));
}

/**
 * The oracle: every quantized tensor dequantized on the host by ggml's
 * reference (`dequantize`) and uploaded as f32. For checks only; a model
 * loaded to run keeps its weights quantized (`repackOntoCoreFormats`).
 */
export const dequantizeOnHost: GgufRepack = (backend, tensor) => {
  if (!isGgmlQuantizedType(tensor.type)) return refuseQuantized(backend, tensor);
  return backend.upload(dequantize(tensor.type, tensor.bytes), tensor.shape, 'f32');
};

export interface QuantizedDecodeResult {
  /** Greedy tokens of the quantized model on the backend. */
  readonly tokens: number[];
  /** Greedy tokens of the file dequantized by the reference, in f32 on the cpu backend. */
  readonly referenceTokens: number[];
  /** max |logit − reference logit| over a prefill of the prompt and the reference's tokens. */
  readonly maxLogitError: number;
  /** max |reference logit| over that prefill, to put the error in scale. */
  readonly maxLogit: number;
  /** The matrices the quantized model holds dense (float tensors): none for a file that quantizes them all. */
  readonly denseMatrices: string[];
  /** The KV caches' dtypes: the quantized model's, and the reference's (the same). */
  readonly kvCacheDtypes: { readonly model: string; readonly reference: string };
}

async function greedy(model: LlamaModel, prompt: readonly number[], maxNewTokens: number): Promise<number[]> {
  const out: number[] = [];
  for await (const t of model.generate(prompt, { maxNewTokens })) out.push(t);
  return out;
}

async function prefillLogits(model: LlamaModel, tokens: readonly number[]): Promise<Float32Array> {
  using logits = model.prefill(tokens);
  return (await logits.read()) as Float32Array;
}

/**
 * Decodes the GGUF file at `path` greedily on `backend` with its weights
 * repacked onto core's quantized formats (float ones as the file stores
 * them), and the same file dequantized on the host in f32 on the cpu backend; compares the tokens and the logits of
 * a prefill over the prompt and the reference's tokens (the tiled product
 * path, where decoding takes the GEMV).
 */
export async function checkQuantizedDecode(
  backend: Backend,
  path: string,
  options: {
    prompt: readonly number[];
    maxNewTokens: number;
    /** The dtype of the file's float matrices on `backend` (default: the file's); the reference's are f32. */
    weightDtype?: LlamaWeightDTypeChoice;
    /**
     * The KV cache: `f32` (the default) on both sides, or `default`, the
     * cache the quantized model keeps by default on `backend` (f16 where
     * every matrix is quantized, as llama.cpp), which the reference then
     * keeps too, so that only the kernels differ.
     */
    cache?: 'f32' | 'default';
  },
): Promise<QuantizedDecodeResult> {
  const cpu = createCpuBackend();
  try {
    using quantized = await loadGgufLlama(backend, path, {
      repack: repackOntoCoreFormats,
      // The formats' decoding is what is checked: x exact and an f32 cache, as the reference's, not a
      // model's defaults (int8 blocks of x; a half cache where every matrix is quantized).
      quantizedActivations: 'exact',
      ...(options.cache === 'default' ? {} : { kvCacheDtype: 'f32' }),
      ...(options.weightDtype ? { weightDtype: options.weightDtype } : {}),
    });
    using reference = await loadGgufLlama(cpu, path, {
      repack: dequantizeOnHost,
      weightDtype: 'f32',
      kvCacheDtype: quantized.kvCacheDtype,
    });
    const referenceTokens = await greedy(reference, options.prompt, options.maxNewTokens);
    const tokens = await greedy(quantized, options.prompt, options.maxNewTokens);
    const sequence = [...options.prompt, ...referenceTokens.slice(0, -1)];
    const [got, want] = [await prefillLogits(quantized, sequence), await prefillLogits(reference, sequence)];
    let maxLogitError = 0;
    let maxLogit = 0;
    for (let i = 0; i < want.length; i++) {
      maxLogitError = Math.max(maxLogitError, Math.abs(got[i]! - want[i]!));
      maxLogit = Math.max(maxLogit, Math.abs(want[i]!));
    }
    if (Number.isNaN(got.reduce((a, b) => a + b, 0))) maxLogitError = Number.NaN;
    const { weights } = quantized;
    const denseMatrices = [
      ...(weights.embedding ? ['embedding'] : []),
      ...(weights.head ? ['head'] : []),
      ...weights.layers.flatMap((layer, i) =>
        LLAMA_PROJECTIONS.filter((p) => layer[p] !== undefined).map((p) => `layers.${i}.${p}`),
      ),
    ];
    const kvCacheDtypes = { model: quantized.kvCacheDtype, reference: reference.kvCacheDtype };
    return { tokens, referenceTokens, maxLogitError, maxLogit, denseMatrices, kvCacheDtypes };
  } finally {
    cpu.dispose();
  }
}
