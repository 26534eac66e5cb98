import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, toHostArray, toNumbers } from '@rayo/core';
import { encodeSafetensors, Rng, type StoredTensor } from '@rayo/train';
import { TINY_SIZES } from './familyConfigs.js';

/** A Hugging Face config.json of a tiny Llama: 2 layers, d 64, 4 query / 2 kv heads, vocab 97, odd FFN. */
export function tinyLlamaConfig(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    ...TINY_SIZES,
    rope_theta: 1000,
    rms_norm_eps: 1e-5,
    tie_word_embeddings: false,
    max_position_embeddings: 32,
    hidden_act: 'silu',
    torch_dtype: 'float32',
    ...overrides,
  };
}

/** The sizes of a config the weights and the reference read: d, the FFN's width, heads, head width, vocab. */
function sizesOf(config: Record<string, unknown>) {
  const d = config.hidden_size as number;
  const heads = config.num_attention_heads as number;
  return {
    d,
    f: config.intermediate_size as number,
    heads,
    kvHeads: config.num_key_value_heads as number,
    headDim: (config.head_dim as number | undefined) ?? d / heads,
    vocab: config.vocab_size as number,
  };
}

export type TinyWeights = Map<string, { shape: number[]; data: Float32Array }>;

/**
 * Random weights by Hugging Face name, from a seed: projections uniform with
 * a 1/sqrt(fan-in) scale, norm weights near 1, an embedding of unit scale (so
 * that the logits spread and greedy choices are clear).
 */
export function tinyLlamaWeights(config: Record<string, unknown>, seed: number): TinyWeights {
  const rng = new Rng(seed);
  const { d, f, heads, kvHeads, headDim, vocab } = sizesOf(config);
  const weights: TinyWeights = new Map();
  const add = (name: string, shape: number[], value: () => number) => {
    weights.set(name, { shape, data: Float32Array.from({ length: shape[0]! * (shape[1] ?? 1) }, value) });
  };
  const linear = (name: string, out: number, inFeatures: number) => {
    const bound = Math.sqrt(3 / inFeatures);
    add(name, [out, inFeatures], () => rng.uniform(-bound, bound));
  };
  const norm = (name: string) => add(name, [d], () => rng.uniform(0.8, 1.2));
  const vector = (name: string, n: number, lo: number, hi: number) =>
    add(name, [n], () => rng.uniform(lo, hi));
  const features = familyFeatures(config);
  add('model.embed_tokens.weight', [vocab, d], () => rng.uniform(-1.7, 1.7));
  for (let i = 0; i < (config.num_hidden_layers as number); i++) {
    const p = `model.layers.${i}`;
    norm(`${p}.input_layernorm.weight`);
    linear(`${p}.self_attn.q_proj.weight`, heads * headDim, d);
    linear(`${p}.self_attn.k_proj.weight`, kvHeads * headDim, d);
    linear(`${p}.self_attn.v_proj.weight`, kvHeads * headDim, d);
    linear(`${p}.self_attn.o_proj.weight`, d, heads * headDim);
    norm(`${p}.post_attention_layernorm.weight`);
    linear(`${p}.mlp.gate_proj.weight`, f, d);
    linear(`${p}.mlp.up_proj.weight`, f, d);
    linear(`${p}.mlp.down_proj.weight`, d, f);
    // Biases as large as the products' spread, so that a bias left out or misplaced shows.
    if (features.qkvBias) {
      vector(`${p}.self_attn.q_proj.bias`, heads * headDim, -0.5, 0.5);
      vector(`${p}.self_attn.k_proj.bias`, kvHeads * headDim, -0.5, 0.5);
      vector(`${p}.self_attn.v_proj.bias`, kvHeads * headDim, -0.5, 0.5);
    }
    if (features.outputBias) vector(`${p}.self_attn.o_proj.bias`, d, -0.5, 0.5);
    if (features.qkNorm) {
      vector(`${p}.self_attn.q_norm.weight`, headDim, 0.5, 1.5);
      vector(`${p}.self_attn.k_norm.weight`, headDim, 0.5, 1.5);
    }
  }
  norm('model.norm.weight');
  if (!config.tie_word_embeddings) linear('lm_head.weight', vocab, d);
  return weights;
}

/** The tensors `names` in `dtype` (rounded to nearest even from the f32 values for a half dtype). */
function stored(
  weights: TinyWeights,
  names: readonly string[],
  dtype: 'f32' | 'f16' | 'bf16',
): Map<string, StoredTensor> {
  return new Map(
    names.map((n) => {
      const { shape, data } = weights.get(n)!;
      return [n, { dtype, shape, data: dtype === 'f32' ? data : toHostArray(dtype, data) }];
    }),
  );
}

/**
 * The values a model of `dtype` weights loaded from f32 `weights` holds: the
 * matrices and the embedding rounded to `dtype` (and widened back), the norm
 * weights as they are (the model keeps them f32).
 */
export function roundedTinyWeights(weights: TinyWeights, dtype: 'f16' | 'bf16'): TinyWeights {
  const rounded: TinyWeights = new Map();
  for (const [name, { shape, data }] of weights) {
    if (name.endsWith('norm.weight') || name.endsWith('.bias')) {
      rounded.set(name, { shape, data });
      continue;
    }
    const words = toHostArray(dtype, data);
    rounded.set(name, { shape, data: Float32Array.from(toNumbers(dtype, words)) });
  }
  return rounded;
}

const written: string[] = [];

/** Removes every directory `writeTinyLlama` made (call it after the tests). */
export async function removeTinyLlamas(): Promise<void> {
  for (const dir of written.splice(0)) await rm(dir, { recursive: true, force: true });
}

/**
 * Writes a checkpoint directory: config.json and either model.safetensors or
 * `shards` shard files with a model.safetensors.index.json, every tensor in
 * `dtype` (default f32).
 */
export async function writeTinyLlama(
  config: Record<string, unknown>,
  weights: TinyWeights,
  options: { shards?: number; dir?: string; dtype?: 'f32' | 'f16' | 'bf16' } = {},
): Promise<string> {
  const dtype = options.dtype ?? 'f32';
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), 'tiny-llama-')));
  if (!options.dir) written.push(dir);
  await writeFile(join(dir, 'config.json'), JSON.stringify(config));
  const names = [...weights.keys()];
  const shards = options.shards ?? 1;
  if (shards === 1) {
    await writeFile(join(dir, 'model.safetensors'), encodeSafetensors(stored(weights, names, dtype)));
    return dir;
  }
  const weightMap: Record<string, string> = {};
  for (let s = 0; s < shards; s++) {
    const file = `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
    const mine = names.filter((_, i) => i % shards === s);
    for (const n of mine) weightMap[n] = file;
    await writeFile(join(dir, file), encodeSafetensors(stored(weights, mine, dtype)));
  }
  await writeFile(
    join(dir, 'model.safetensors.index.json'),
    JSON.stringify({ metadata: {}, weight_map: weightMap }),
  );
  return dir;
}

// ---- an independent f64 reference forward pass ------------------------------------------

/**
 * What the raw config.json asks for beyond the Llama block, read here
 * without rayo's parser: Qwen2 always biases q, k and v; Llama and Qwen3 do
 * (and o) where `attention_bias` is true; Qwen3 norms each q and k head.
 */
export function familyFeatures(config: Record<string, unknown>): {
  qkvBias: boolean;
  outputBias: boolean;
  qkNorm: boolean;
} {
  const architecture = (config.architectures as string[] | undefined)?.[0] ?? 'LlamaForCausalLM';
  const attentionBias = config.attention_bias === true && architecture !== 'MistralForCausalLM';
  return {
    qkvBias: architecture === 'Qwen2ForCausalLM' || attentionBias,
    outputBias: attentionBias && architecture !== 'Qwen2ForCausalLM',
    qkNorm: architecture === 'Qwen3ForCausalLM',
  };
}

/**
 * RoPE's frequencies in f64 from the raw config: transformers 5's
 * `rope_parameters` or `rope_theta` with `rope_scaling`; default, linear or
 * llama3 (Llama 3.1's three bands), written from the paper's formula.
 */
export function ropeFrequenciesOf(config: Record<string, unknown>, headDim: number): number[] {
  const parameters = (config.rope_parameters ?? config.rope_scaling ?? {}) as Record<string, number | string>;
  const theta = (parameters.rope_theta ?? config.rope_theta ?? 10000) as number;
  const kind = parameters.rope_type ?? parameters.type ?? 'default';
  return Array.from({ length: headDim / 2 }, (_, i) => {
    const f = 1 / theta ** ((2 * i) / headDim);
    if (kind === 'linear') return f / (parameters.factor as number);
    if (kind !== 'llama3') return f;
    const factor = parameters.factor as number;
    const low = parameters.low_freq_factor as number;
    const high = parameters.high_freq_factor as number;
    const original = parameters.original_max_position_embeddings as number;
    const wavelength = (2 * Math.PI) / f;
    if (wavelength < original / high) return f;
    if (wavelength > original / low) return f / factor;
    const smooth = (original / wavelength - low) / (high - low);
    return (1 - smooth) * (f / factor) + smooth * f;
  });
}

const roundBf16 = (x: number) => bf16BitsToF32(f32ToBf16Bits(x));
const roundF16 = (x: number) => f16BitsToF32(f32ToF16Bits(x));

function matVec(w: Float32Array, rows: number, cols: number, x: Float64Array): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let acc = 0;
    for (let c = 0; c < cols; c++) acc += w[r * cols + c]! * x[c]!;
    y[r] = acc;
  }
  return y;
}

function rmsNormed(x: Float64Array, weight: Float32Array, eps: number): Float64Array {
  let ms = 0;
  for (const v of x) ms += v * v;
  const scale = 1 / Math.sqrt(ms / x.length + eps);
  return x.map((v, i) => v * scale * weight[i]!);
}

/** Rotate-half RoPE of every head of `x` at `position` with pair i turning `frequencies[i]` per position, in place. */
function rotate(
  x: Float64Array,
  heads: number,
  headDim: number,
  position: number,
  frequencies: number[],
): void {
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < half; i++) {
      const angle = position * frequencies[i]!;
      const a = x[h * headDim + i]!;
      const b = x[h * headDim + i + half]!;
      x[h * headDim + i] = a * Math.cos(angle) - b * Math.sin(angle);
      x[h * headDim + i + half] = a * Math.sin(angle) + b * Math.cos(angle);
    }
  }
}

/**
 * Logits [T][vocab] of every position of `tokens`, in f64, attending over the
 * whole prefix from scratch at each position: shares no code with the model.
 * `roundedInputs` rounds the inputs of every weight product of the first
 * `rows` positions to `dtype` (nearest even), as a prompt's products under
 * half weights do (matmul's precision 'half').
 */
export function referenceLogits(
  config: Record<string, unknown>,
  weights: TinyWeights,
  tokens: readonly number[],
  roundedInputs?: { readonly dtype: 'bf16' | 'f16'; readonly rows: number },
): Float64Array[] {
  const { d, f, heads, kvHeads, headDim, vocab } = sizesOf(config);
  const eps = config.rms_norm_eps as number;
  const frequencies = ropeFrequenciesOf(config, headDim);
  const features = familyFeatures(config);
  const w = (name: string) => weights.get(name)!.data;
  const round = roundedInputs?.dtype === 'f16' ? roundF16 : roundBf16;
  /** W·x for position t, x rounded where `roundedInputs` says. */
  const times = (weight: Float32Array, rows: number, cols: number, x: Float64Array, t: number) =>
    matVec(weight, rows, cols, roundedInputs && t < roundedInputs.rows ? x.map(round) : x);
  /** x·Wᵀ (+ the bias, where the checkpoint has one). */
  const project = (name: string, rows: number, cols: number, x: Float64Array, t: number) => {
    const y = times(w(`${name}.weight`), rows, cols, x, t);
    const bias = weights.get(`${name}.bias`)?.data;
    if (bias) for (let r = 0; r < rows; r++) y[r]! += bias[r]!;
    return y;
  };
  /** Each head of x normed by `norm` ([headDim]), in place (Qwen3's q/k norms). */
  const headNorm = (x: Float64Array, n: number, norm: Float32Array) => {
    for (let h = 0; h < n; h++)
      x.set(rmsNormed(x.subarray(h * headDim, (h + 1) * headDim), norm, eps), h * headDim);
  };
  const embed = w('model.embed_tokens.weight');
  let xs = tokens.map((t) => Float64Array.from(embed.subarray(t * d, (t + 1) * d)));
  for (let l = 0; l < (config.num_hidden_layers as number); l++) {
    const p = `model.layers.${l}`;
    const normed = xs.map((x) => rmsNormed(x, w(`${p}.input_layernorm.weight`), eps));
    const qs = normed.map((h, t) => {
      const q = project(`${p}.self_attn.q_proj`, heads * headDim, d, h, t);
      if (features.qkNorm) headNorm(q, heads, w(`${p}.self_attn.q_norm.weight`));
      rotate(q, heads, headDim, t, frequencies);
      return q;
    });
    const ks = normed.map((h, t) => {
      const k = project(`${p}.self_attn.k_proj`, kvHeads * headDim, d, h, t);
      if (features.qkNorm) headNorm(k, kvHeads, w(`${p}.self_attn.k_norm.weight`));
      rotate(k, kvHeads, headDim, t, frequencies);
      return k;
    });
    const vs = normed.map((h, t) => project(`${p}.self_attn.v_proj`, kvHeads * headDim, d, h, t));
    xs = xs.map((x, t) => {
      const attended = new Float64Array(heads * headDim);
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / (heads / kvHeads));
        const scores = Array.from({ length: t + 1 }, (_, j) => {
          let dot = 0;
          for (let i = 0; i < headDim; i++) dot += qs[t]![h * headDim + i]! * ks[j]![g * headDim + i]!;
          return dot / Math.sqrt(headDim);
        });
        const max = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - max));
        const sum = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j <= t; j++) {
          for (let i = 0; i < headDim; i++)
            attended[h * headDim + i]! += (e[j]! / sum) * vs[j]![g * headDim + i]!;
        }
      }
      const o = project(`${p}.self_attn.o_proj`, d, heads * headDim, attended, t);
      const x1 = x.map((v, i) => v + o[i]!);
      const h2 = rmsNormed(x1, w(`${p}.post_attention_layernorm.weight`), eps);
      const gate = times(w(`${p}.mlp.gate_proj.weight`), f, d, h2, t);
      const up = times(w(`${p}.mlp.up_proj.weight`), f, d, h2, t);
      const act = gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]!);
      const down = times(w(`${p}.mlp.down_proj.weight`), d, f, act, t);
      return x1.map((v, i) => v + down[i]!);
    });
  }
  const head = config.tie_word_embeddings ? embed : w('lm_head.weight');
  return xs.map((x, t) => times(head, vocab, d, rmsNormed(x, w('model.norm.weight'), eps), t));
}

/** Greedy continuation of `prompt` by the reference, recomputing every position each step. */
export function referenceGreedy(
  config: Record<string, unknown>,
  weights: TinyWeights,
  prompt: readonly number[],
  count: number,
): { tokens: number[]; margins: number[] } {
  const tokens = [...prompt];
  const margins: number[] = [];
  for (let i = 0; i < count; i++) {
    const last = referenceLogits(config, weights, tokens).at(-1)!;
    const order = Array.from(last.keys()).sort((a, b) => last[b]! - last[a]!);
    margins.push(last[order[0]!]! - last[order[1]!]!);
    tokens.push(order[0]!);
  }
  return { tokens: tokens.slice(prompt.length), margins };
}
