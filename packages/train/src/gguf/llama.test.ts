import { tinyLlamaConfig } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { parseLlamaConfig } from '../models/llama/config.js';
import { llamaWeightShapes } from '../models/llama/weights.js';
import { Rng } from '../random.js';
import type { GgufTensorInfo } from './ggufFile.js';
import { ggufLlamaConfig, ggufLlamaMetadata } from './llamaConfig.js';
import { ggufNameOfHf, hfNameOfGguf } from './llamaNames.js';
import type { GgufValue } from './metadata.js';
import { ggufRowsToHf, hfRowsToGguf } from './ropePermutation.js';

const rowsOf = (labels: number[], width = 1) =>
  new Uint8Array(new Float32Array(labels.flatMap((r) => new Array(width).fill(r))).buffer);
const labelsOf = (bytes: Uint8Array, width = 1) =>
  Array.from(new Float32Array(bytes.slice().buffer)).filter((_, i) => i % width === 0);

describe("llama.cpp's Q/K row permutation", () => {
  it("is the converter's reshape(heads, 2, d/2, in).swapaxes(1, 2): [0, 2, 1, 3 | 4, 6, 5, 7] for 2 heads of 4", () => {
    const hf = rowsOf([0, 1, 2, 3, 4, 5, 6, 7], 3);
    expect(labelsOf(hfRowsToGguf(hf, 2, 8), 3)).toEqual([0, 2, 1, 3, 4, 6, 5, 7]);
    // The same from the converter's index arithmetic: GGUF row (h, i, p) is HF row (h, p, i).
    const heads = 3;
    const d = 6;
    const expected: number[] = [];
    for (let h = 0; h < heads; h++)
      for (let i = 0; i < d / 2; i++) for (let p = 0; p < 2; p++) expected.push(h * d + p * (d / 2) + i);
    const labels = Array.from({ length: heads * d }, (_, r) => r);
    expect(labelsOf(hfRowsToGguf(rowsOf(labels), heads, heads * d))).toEqual(expected);
  });

  it('round-trips exactly, on rows of any byte width', () => {
    const rng = new Rng(1);
    const bytes = Uint8Array.from({ length: 16 * 34 }, () => Math.floor(rng.uniform(0, 256)));
    expect(ggufRowsToHf(hfRowsToGguf(bytes, 4, 16), 4, 16)).toEqual(bytes);
    expect(hfRowsToGguf(bytes, 4, 16)).not.toEqual(bytes);
  });

  it("makes llama.cpp's adjacent-pair RoPE on GGUF rows equal Hugging Face's rotate-half RoPE on HF rows", () => {
    const rng = new Rng(2);
    const heads = 2;
    const d = 8;
    const inFeatures = 5;
    const w = Float32Array.from({ length: heads * d * inFeatures }, () => rng.uniform(-1, 1));
    const x = Array.from({ length: inFeatures }, () => rng.uniform(-1, 1));
    const project = (m: Float32Array) =>
      Array.from({ length: heads * d }, (_, r) => x.reduce((s, v, c) => s + m[r * inFeatures + c]! * v, 0));
    const angle = (i: number, position: number) => position * 10000 ** ((-2 * i) / d);
    const position = 7;
    // Hugging Face: pairs (i, i + d/2).
    const q = project(w);
    const hfRotated = [...q];
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < d / 2; i++) {
        const [a, b, t] = [q[h * d + i]!, q[h * d + i + d / 2]!, angle(i, position)];
        hfRotated[h * d + i] = a * Math.cos(t) - b * Math.sin(t);
        hfRotated[h * d + i + d / 2] = a * Math.sin(t) + b * Math.cos(t);
      }
    }
    // llama.cpp: pairs (2i, 2i + 1) of the permuted rows.
    const wGguf = new Float32Array(hfRowsToGguf(new Uint8Array(w.buffer), heads, heads * d).buffer);
    const g = project(wGguf);
    const ggufRotated = [...g];
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < d / 2; i++) {
        const [a, b, t] = [g[h * d + 2 * i]!, g[h * d + 2 * i + 1]!, angle(i, position)];
        ggufRotated[h * d + 2 * i] = a * Math.cos(t) - b * Math.sin(t);
        ggufRotated[h * d + 2 * i + 1] = a * Math.sin(t) + b * Math.cos(t);
      }
    }
    const back = new Float32Array(
      ggufRowsToHf(new Uint8Array(Float32Array.from(ggufRotated).buffer), heads, heads * d).buffer,
    );
    for (const [r, v] of back.entries()) expect(v).toBeCloseTo(hfRotated[r]!, 5);
  });

  it('refuses rows that do not split into heads of an even dimension', () => {
    expect(() => hfRowsToGguf(new Uint8Array(12), 4, 6)).toThrow(/even dimension/);
  });
});

describe('GGUF Llama names and config', () => {
  const config = parseLlamaConfig(tinyLlamaConfig());

  it('maps every Hugging Face weight to its llama.cpp name and back', () => {
    const names = [...llamaWeightShapes(config).keys()].map((hf) => [hf, ggufNameOfHf(hf)]);
    expect(names.slice(0, 10)).toEqual([
      ['model.embed_tokens.weight', 'token_embd.weight'],
      ['model.layers.0.input_layernorm.weight', 'blk.0.attn_norm.weight'],
      ['model.layers.0.self_attn.q_proj.weight', 'blk.0.attn_q.weight'],
      ['model.layers.0.self_attn.k_proj.weight', 'blk.0.attn_k.weight'],
      ['model.layers.0.self_attn.v_proj.weight', 'blk.0.attn_v.weight'],
      ['model.layers.0.self_attn.o_proj.weight', 'blk.0.attn_output.weight'],
      ['model.layers.0.post_attention_layernorm.weight', 'blk.0.ffn_norm.weight'],
      ['model.layers.0.mlp.gate_proj.weight', 'blk.0.ffn_gate.weight'],
      ['model.layers.0.mlp.up_proj.weight', 'blk.0.ffn_up.weight'],
      ['model.layers.0.mlp.down_proj.weight', 'blk.0.ffn_down.weight'],
    ]);
    expect(names.slice(-2)).toEqual([
      ['model.norm.weight', 'output_norm.weight'],
      ['lm_head.weight', 'output.weight'],
    ]);
    for (const [hf, gguf] of names) expect(hfNameOfGguf(gguf!)).toBe(hf);
    expect(hfNameOfGguf('blk.0.attn_rot_embd.weight')).toBeUndefined();
  });

  /** Tensor infos of the config's weights, by GGUF name (only names and dims matter to the config). */
  function infos(tied: boolean): Map<string, GgufTensorInfo> {
    const out = new Map<string, GgufTensorInfo>();
    for (const [hf, shape] of llamaWeightShapes({ ...config, tieWordEmbeddings: tied })) {
      const name = ggufNameOfHf(hf)!;
      out.set(name, { name, type: 'F32', dims: [...shape].reverse(), shape, offset: 0, byteLength: 0 });
    }
    return out;
  }

  it('reads the llama.* keys back into the config; a missing output.weight ties the head', () => {
    const metadata = new Map(ggufLlamaMetadata(config));
    const read = ggufLlamaConfig(metadata, infos(false));
    expect(read).toEqual(config);
    expect(ggufLlamaConfig(metadata, infos(true)).tieWordEmbeddings).toBe(true);
  });

  it('takes the vocabulary from the tokenizer, else from the embedding; the head dimension from the heads', () => {
    const base = ggufLlamaMetadata(config).filter(
      ([k]) =>
        k !== 'llama.vocab_size' &&
        k !== 'llama.attention.key_length' &&
        k !== 'llama.attention.value_length',
    );
    const tokens: GgufValue = {
      type: 'array',
      itemType: 'string',
      value: Array.from({ length: 97 }, (_, i) => `t${i}`),
    };
    const withTokens = new Map([...base, ['tokenizer.ggml.tokens', tokens] as const]);
    expect(ggufLlamaConfig(withTokens, infos(false)).vocabSize).toBe(97);
    expect(ggufLlamaConfig(new Map(base), infos(false))).toMatchObject({ vocabSize: 97, headDim: 16 });
  });

  it('names the GGUF key of a config it cannot run', () => {
    const edit = (key: string, value: GgufValue | undefined) => {
      const m = new Map(ggufLlamaMetadata(config));
      if (value === undefined) m.delete(key);
      else m.set(key, value);
      return () => ggufLlamaConfig(m, infos(false));
    };
    expect(edit('general.architecture', { type: 'string', value: 'gemma2' })).toThrow(
      /general\.architecture.*'llama', 'qwen2', 'qwen3'.*got "gemma2"/,
    );
    expect(edit('llama.attention.layer_norm_rms_epsilon', undefined)).toThrow(/layer_norm_rms_epsilon/);
    expect(edit('llama.attention.head_count_kv', { type: 'uint32', value: 3 })).toThrow(
      /'llama\.attention\.head_count_kv'.*a divisor of num_attention_heads/,
    );
    expect(edit('llama.embedding_length', { type: 'float32', value: 64 })).toThrow(
      /embedding_length.*an integer/,
    );
    expect(edit('llama.rope.scaling.type', { type: 'string', value: 'yarn' })).toThrow(
      /'llama\.rope\.scaling\.type'.*YaRN and other scalings are not implemented/,
    );
    expect(edit('llama.rope.scaling.type', { type: 'string', value: 'linear' })).toThrow(
      /'llama\.rope\.scaling\.factor'.*a number >= 1, got absent/,
    );
    expect(edit('llama.rope.dimension_count', { type: 'uint32', value: 8 })).toThrow(/partial RoPE/);
    expect(edit('llama.expert_count', { type: 'uint32', value: 8 })).toThrow(/mixture of experts/);
    expect(edit('llama.attention.value_length', { type: 'uint32', value: 8 })).toThrow(
      /value_length.*the key length \(16\)/,
    );
  });
});
