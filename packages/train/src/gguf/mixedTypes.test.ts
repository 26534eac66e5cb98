import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  type Backend,
  createBackend,
  createCpuBackend,
  probeBackends,
  RayoError,
  type Shape,
} from '@rayo/core';
import { temporaryDirectory } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { type LlamaConfig, parseLlamaConfig } from '../models/llama/config.js';
import { llamaToGguf } from './convertLlama.js';
import { GGML_TYPES, type GgmlType } from './ggmlTypes.js';
import { type LlamaCppMix, llamaCppTypeOf, writeLlamaCppMix } from './llamaCppMixes.js';
import { loadGgufLlama } from './loadLlama.js';
import {
  checkQuantizedDecode,
  q4kmTestConfig,
  seededLlamaWeights,
  useMoreBits,
} from './quantizedDecodeCheck.js';
import { repackOntoCoreFormats } from './repack.js';
import { writeGgufFile } from './writer.js';

const dir = await temporaryDirectory('gguf-mixed-');
let files = 0;
const pathFor = (label: string) => join(dir, `${label}-${files++}.gguf`);

/** Lavapipe compiles each pipeline on first use. */
const TIMEOUT = 240_000;
const PROMPT = [5, 17, 3, 60, 0, 42, 8];

/**
 * Rows that do not divide into 256, as Qwen2.5-0.5B's 896: hidden 224 (7 · 32) takes the 32-block
 * fallbacks, and a head dimension of 52 makes `o_proj` rows of 208 (6.5 · 32), which fall back to F16;
 * the FFN's 512 keeps `down_proj` in the mix's k-quants.
 */
function narrowConfig(tied: boolean): LlamaConfig {
  return parseLlamaConfig({
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    hidden_size: 224,
    intermediate_size: 512,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 52,
    num_hidden_layers: 3,
    vocab_size: 96,
    rope_theta: 10000,
    rms_norm_eps: 2 ** -17,
    tie_word_embeddings: tied,
    max_position_embeddings: 64,
    hidden_act: 'silu',
    torch_dtype: 'float32',
  });
}

describe('llama.cpp’s k-quant mixes', () => {
  it('use_more_bits with C’s integer division', () => {
    const picked = (n: number) => Array.from({ length: n }, (_, i) => i).filter((i) => useMoreBits(i, n));
    expect(picked(16)).toEqual([0, 1, 4, 7, 10, 13, 14, 15]);
    expect(picked(3)).toEqual([2]);
    expect(picked(24)).toEqual([0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
  });

  it('give each tensor its type: Q6_K where more bits go, fallbacks where rows do not divide into 256', () => {
    const wide = (mix: LlamaCppMix, tied: boolean) => {
      const config = q4kmTestConfig({ layers: 3, tied });
      return (name: string, shape: Shape) => llamaCppTypeOf(mix, config)(name, shape);
    };
    expect(wide('Q5_K_M', false)('model.layers.0.self_attn.q_proj.weight', [256, 256])).toBe('Q5_K');
    expect(wide('Q5_K_M', false)('model.layers.2.mlp.down_proj.weight', [256, 512])).toBe('Q6_K');
    expect(wide('Q5_K_M', false)('model.embed_tokens.weight', [96, 256])).toBe('Q5_K');
    // Tied, the embedding is the head: Q6_K.
    expect(wide('Q5_K_M', true)('model.embed_tokens.weight', [96, 256])).toBe('Q6_K');
    expect(wide('Q4_K_M', false)('lm_head.weight', [96, 256])).toBe('Q6_K');
    expect(wide('Q4_K_M', false)('model.norm.weight', [256])).toBe('F32');
    const narrow = (mix: LlamaCppMix) => llamaCppTypeOf(mix, narrowConfig(false));
    expect(narrow('Q4_K_M')('model.layers.0.self_attn.q_proj.weight', [208, 224])).toBe('Q5_0');
    expect(narrow('Q5_K_M')('model.layers.0.self_attn.q_proj.weight', [208, 224])).toBe('Q5_1');
    expect(narrow('Q4_K_M')('model.layers.2.self_attn.v_proj.weight', [104, 224])).toBe('Q8_0');
    expect(narrow('Q4_K_M')('model.layers.0.self_attn.o_proj.weight', [224, 208])).toBe('F16');
    expect(narrow('Q4_K_M')('model.layers.0.mlp.down_proj.weight', [224, 512])).toBe('Q4_K');
    expect(narrow('Q4_K_M')('lm_head.weight', [96, 224])).toBe('Q8_0');
  });
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const onWgpu = wgpu.available || process.env.CI === 'true';

/** Every type a file's matrices use, and the check's result on `backend`. */
async function decodeCheck(backend: Backend, path: string, types: Map<string, GgmlType>) {
  const r = await checkQuantizedDecode(backend, path, { prompt: PROMPT, maxNewTokens: 8 });
  expect(r.tokens).toHaveLength(8);
  expect(r.tokens).toEqual(r.referenceTokens);
  expect(r.maxLogit).toBeGreaterThan(1);
  // F16 matrices multiply a prompt's rows rounded to half (the tensor-core path); quantized ones in f32.
  const half = [...types.values()].includes('F16');
  expect(r.maxLogitError).toBeLessThan((half ? 1e-2 : 1e-4) * Math.max(1, r.maxLogit));
  // Only the F16 matrices stay dense.
  const dense = [...types].filter(([name, t]) => t === 'F16' && !name.endsWith('norm.weight')).length;
  expect(r.denseMatrices).toHaveLength(dense);
  return r;
}

const CASES: { mix: LlamaCppMix; narrow: boolean; tied: boolean; types: GgmlType[]; wgpu?: boolean }[] = [
  { mix: 'Q5_K_M', narrow: false, tied: false, types: ['F32', 'Q5_K', 'Q6_K'], wgpu: true },
  { mix: 'Q5_K_M', narrow: false, tied: true, types: ['F32', 'Q5_K', 'Q6_K'] },
  { mix: 'Q4_K_M', narrow: true, tied: false, types: ['F16', 'F32', 'Q4_K', 'Q5_0', 'Q6_K', 'Q8_0'] },
  { mix: 'Q4_K_M', narrow: true, tied: true, types: ['F16', 'F32', 'Q4_K', 'Q5_0', 'Q6_K', 'Q8_0'] },
  {
    mix: 'Q5_K_M',
    narrow: true,
    tied: false,
    types: ['F16', 'F32', 'Q5_1', 'Q5_K', 'Q6_K', 'Q8_0'],
    wgpu: true,
  },
];

const backends: [string, () => Promise<Backend>, boolean][] = [['cpu', async () => createCpuBackend(), true]];
if (onWgpu) backends.push(['wgpu', () => createBackend('wgpu'), false]);

describe.each(backends)('GGUF files as llama.cpp mixes them, on %s', (name, create, every) => {
  for (const c of CASES.filter((c) => every || c.wgpu)) {
    const label = `${c.mix}, ${c.narrow ? 'rows of 224 and 208' : 'rows of 256'}, ${c.tied ? 'tied' : 'untied'} head`;
    it(
      `${label}: ${c.types.join(', ')} decode as their weights dequantized, in f32`,
      async () => {
        const config = c.narrow ? narrowConfig(c.tied) : q4kmTestConfig({ layers: 3, tied: c.tied });
        const path = pathFor(`${name}-${c.mix}`);
        const types = await writeLlamaCppMix(path, config, c.mix, 41);
        expect([...new Set(types.values())].sort()).toEqual(c.types);
        const backend = await create();
        try {
          await decodeCheck(backend, path, types);
        } finally {
          backend.dispose();
        }
      },
      TIMEOUT,
    );
  }
});

describe('a hand-made mix of every type rayo reads', () => {
  // Per projection a type (blk.0 and blk.1 swap theirs), the embedding Q5_1, the head Q4_0.
  const BY_PROJECTION: Record<string, [GgmlType, GgmlType]> = {
    q_proj: ['Q4_K', 'Q5_K'],
    k_proj: ['Q5_0', 'Q4_1'],
    v_proj: ['Q6_K', 'Q8_0'],
    o_proj: ['Q8_0', 'F16'],
    gate_proj: ['F16', 'Q4_0'],
    up_proj: ['Q5_K', 'Q5_1'],
    down_proj: ['Q4_1', 'Q4_K'],
  };
  const typeOf = (hfName: string, shape: Shape): GgmlType => {
    if (shape.length === 1) return 'F32';
    if (hfName === 'model.embed_tokens.weight') return 'Q5_1';
    if (hfName === 'lm_head.weight') return 'Q4_0';
    const m = /^model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.weight$/.exec(hfName)!;
    return BY_PROJECTION[m[2]!]![Number(m[1]) % 2]!;
  };

  it(
    'loads each tensor by its own type and decodes as its weights dequantized, in f32',
    async () => {
      const config = q4kmTestConfig({ layers: 2 });
      const weights = seededLlamaWeights(config, 43);
      const path = pathFor('hand-mix');
      await writeGgufFile(path, llamaToGguf(config, weights, { typeOf }));
      const types = new Map([...weights].map(([n, { shape }]) => [n, typeOf(n, shape)]));
      expect(new Set(types.values()).size).toBe(10);
      const backend = createCpuBackend();
      try {
        await decodeCheck(backend, path, types);
        // With F16 widened to f32 on the device, only the summation order differs.
        const r = await checkQuantizedDecode(backend, path, {
          prompt: PROMPT,
          maxNewTokens: 4,
          weightDtype: 'f32',
        });
        expect(r.tokens).toEqual(r.referenceTokens);
        expect(r.maxLogitError).toBeLessThan(1e-4 * Math.max(1, r.maxLogit));
      } finally {
        backend.dispose();
      }
    },
    TIMEOUT,
  );
});

describe('hostile mixed files are refused with a RayoError', () => {
  const config = narrowConfig(false);
  const written = (async () => {
    const path = pathFor('hostile');
    await writeLlamaCppMix(path, config, 'Q5_K_M', 47);
    return readFile(path);
  })();
  const load = async (bytes: Uint8Array) => {
    const path = pathFor('edited');
    await writeFile(path, bytes);
    const backend = createCpuBackend();
    try {
      return await loadGgufLlama(backend, path, { repack: repackOntoCoreFormats }).then(
        (m) => {
          m.dispose();
          return undefined;
        },
        (e: unknown) => e,
      );
    } finally {
      backend.dispose();
    }
  };
  /** The byte offset of tensor `name`'s type id in the header (after its name, n_dims and dims). */
  const typeFieldOf = (bytes: Uint8Array, name: string, dims: number) => {
    const needle = new TextEncoder().encode(name);
    for (let at = 0; at < bytes.length - needle.length; at++) {
      if (needle.every((b, i) => bytes[at + i] === b) && bytes[at + needle.length] !== 0x2e)
        return at + needle.length + 4 + 8 * dims;
    }
    throw new Error(`no tensor '${name}' in the header`);
  };

  it('a file cut short inside its tensor data', async () => {
    const bytes = await written;
    const error = await load(bytes.subarray(0, bytes.length - 100));
    expect(error).toBeInstanceOf(RayoError);
    expect(String(error)).toMatch(/lies beyond the end of the file/);
  });

  it('a tensor whose type claims larger blocks than its bytes hold (Q5_1 read as Q8_0)', async () => {
    const bytes = new Uint8Array(await written);
    const at = typeFieldOf(bytes, 'blk.0.attn_q.weight', 2);
    expect(new DataView(bytes.buffer).getUint32(at, true)).toBe(GGML_TYPES.Q5_1.id);
    new DataView(bytes.buffer).setUint32(at, GGML_TYPES.Q8_0.id, true);
    const error = await load(bytes);
    expect(error).toBeInstanceOf(RayoError);
    expect(String(error)).toMatch(/overlaps|beyond the end/);
  });

  it('a row that does not divide into its type’s blocks (224 as Q5_K)', async () => {
    const bytes = new Uint8Array(await written);
    const at = typeFieldOf(bytes, 'blk.1.attn_k.weight', 2);
    new DataView(bytes.buffer).setUint32(at, GGML_TYPES.Q5_K.id, true);
    const error = await load(bytes);
    expect(error).toBeInstanceOf(RayoError);
    expect(String(error)).toMatch(/multiple of 256/);
  });
});
