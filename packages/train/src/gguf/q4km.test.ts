import { join } from 'node:path';
import { type Backend, createBackend, createCpuBackend, probeBackends } from '@rayo/core';
import { temporaryDirectory } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { loadGgufLlama } from './loadLlama.js';
import {
  checkQuantizedDecode,
  dequantizeOnHost,
  q4kmTestConfig,
  q4kmTypeOf,
  writeQ4kmLlama,
} from './quantizedDecodeCheck.js';
import { repackOntoCoreFormats } from './repack.js';

const dir = await temporaryDirectory('gguf-q4km-');

/** Lavapipe compiles each pipeline on first use. */
const TIMEOUT = 180_000;
const PROMPT = [5, 17, 3, 60, 0, 42, 8];

describe('llama.cpp’s Q4_K_M mix', () => {
  it('Q6_K for the head and for attn_v / ffn_down of the first and last eighth and every third layer', () => {
    const typeOf = q4kmTypeOf(16);
    const more = Array.from({ length: 16 }, (_, i) => typeOf(`model.layers.${i}.mlp.down_proj.weight`));
    // llama.cpp's use_more_bits(i, 16): i < 2, i >= 14, (i − 2) % 3 == 2.
    expect(more.map((t, i) => (t === 'Q6_K' ? i : -1)).filter((i) => i >= 0)).toEqual([
      0, 1, 4, 7, 10, 13, 14, 15,
    ]);
    expect(typeOf('model.layers.4.self_attn.v_proj.weight')).toBe('Q6_K');
    expect(typeOf('model.layers.4.self_attn.q_proj.weight')).toBe('Q4_K');
    expect(typeOf('model.layers.3.mlp.down_proj.weight')).toBe('Q4_K');
    expect(typeOf('lm_head.weight')).toBe('Q6_K');
    expect(typeOf('model.embed_tokens.weight')).toBe('Q4_K');
    expect(typeOf('model.layers.0.input_layernorm.weight')).toBe('F32');
  });
});

describe('the KV cache of a GGUF file whose matrices are all quantized', () => {
  it('is f16 by default (llama.cpp’s), f32 where a repack makes the matrices floats, and as asked', async () => {
    const path = join(dir, 'cache-default.gguf');
    await writeQ4kmLlama(path, q4kmTestConfig({ layers: 1, tied: false }), 5);
    const backend = createCpuBackend();
    try {
      for (const [options, want] of [
        [{ repack: repackOntoCoreFormats }, 'f16'],
        [{ repack: dequantizeOnHost }, 'f32'],
        [{ repack: repackOntoCoreFormats, kvCacheDtype: 'bf16' as const }, 'bf16'],
      ] as const) {
        using model = await loadGgufLlama(backend, path, options);
        expect(model.kvCacheDtype, JSON.stringify(Object.keys(options))).toBe(want);
      }
    } finally {
      backend.dispose();
    }
  });
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const backends: [string, () => Promise<Backend>][] = [['cpu', async () => createCpuBackend()]];
if (wgpu.available || process.env.CI === 'true') backends.push(['wgpu', () => createBackend('wgpu')]);

describe.each(backends)('a Q4_K_M GGUF file on %s', (name, create) => {
  for (const tied of [false, true]) {
    it(
      `decodes with the greedy tokens of its weights dequantized by the reference, in f32 (${tied ? 'tied' : 'untied'} head)`,
      async () => {
        const config = q4kmTestConfig({ layers: 3, tied });
        const path = join(dir, `${name}-${tied ? 'tied' : 'untied'}.gguf`);
        const types = await writeQ4kmLlama(path, config, 31);
        // Layer 2 of 3 takes Q6_K for V and down (use_more_bits), layers 0 and 1 Q4_K; an untied head Q6_K.
        expect(types.get('model.layers.0.self_attn.v_proj.weight')).toBe('Q4_K');
        expect(types.get('model.layers.2.self_attn.v_proj.weight')).toBe('Q6_K');
        expect(types.get('model.layers.1.mlp.down_proj.weight')).toBe('Q4_K');
        expect(types.get('model.layers.2.mlp.down_proj.weight')).toBe('Q6_K');
        expect(types.get('model.embed_tokens.weight')).toBe('Q4_K');
        const backend = await create();
        try {
          const r = await checkQuantizedDecode(backend, path, { prompt: PROMPT, maxNewTokens: 8 });
          // Every matrix quantized on the device: the embedding, the head and every projection.
          expect(r.denseMatrices).toEqual([]);
          expect(r.tokens).toHaveLength(8);
          expect(r.tokens).toEqual(r.referenceTokens);
          // Untied, the seeded model walks through varied tokens (tied, it repeats its last one).
          if (!tied) expect(new Set(r.tokens).size).toBeGreaterThanOrEqual(5);
          // The same weights summed in another order: f32 rounding, far below the logits' spread.
          expect(r.maxLogit).toBeGreaterThan(1);
          expect(r.maxLogitError).toBeLessThan(1e-4 * Math.max(1, r.maxLogit));
        } finally {
          backend.dispose();
        }
      },
      TIMEOUT,
    );
  }

  it(
    "keeps llama.cpp's f16 KV cache by default, and decodes as the reference does with the same cache",
    async () => {
      const config = q4kmTestConfig({ layers: 3, tied: false });
      const path = join(dir, `${name}-f16-cache.gguf`);
      await writeQ4kmLlama(path, config, 31);
      const backend = await create();
      try {
        const r = await checkQuantizedDecode(backend, path, {
          prompt: PROMPT,
          maxNewTokens: 8,
          cache: 'default',
        });
        expect(r.kvCacheDtypes).toEqual({ model: 'f16', reference: 'f16' });
        expect(r.tokens).toEqual(r.referenceTokens);
        expect(new Set(r.tokens).size).toBeGreaterThanOrEqual(5);
        expect(r.maxLogit).toBeGreaterThan(1);
        expect(r.maxLogitError).toBeLessThan(1e-4 * Math.max(1, r.maxLogit));
      } finally {
        backend.dispose();
      }
    },
    TIMEOUT,
  );
});
