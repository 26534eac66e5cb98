import { join } from 'node:path';
import { createBackend, probeBackends } from '@rayo/core';
import { temporaryDirectory } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import type { LlamaModel } from '../models/llama/model.js';
import { llamaToGguf } from './convertLlama.js';
import { loadGgufLlama } from './loadLlama.js';
import { checkQuantizedDecode, q4kmTestConfig, seededLlamaWeights } from './quantizedDecodeCheck.js';
import { repackOntoCoreFormats } from './repack.js';
import { writeGgufFile } from './writer.js';

// A Q4_0 model as llama.cpp writes Llama 3.2 1B (Q4_0 projections, the tied
// embedding and head in Q8_0) on a WebGPU device whose storage bindings are
// forced down to 32 KiB: the embedding's codes (1,000 × 256 bytes) and the
// FFN's (512 × 128 bytes) are bound in pieces of whole rows, and the model
// decodes the tokens it decodes with bindings of the adapter's size.

const dir = await temporaryDirectory('gguf-binding-');
const TIMEOUT = 300_000;
const PROMPT = [5, 17, 3, 60, 0, 42, 8];
const LIMIT = 32 * 1024;

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const onWgpu = wgpu.available || process.env.CI === 'true';

async function greedy(model: LlamaModel, maxNewTokens: number): Promise<number[]> {
  const out: number[] = [];
  for await (const t of model.generate(PROMPT, { maxNewTokens })) out.push(t);
  return out;
}

describe.skipIf(!onWgpu)('a Q4_0 GGUF model with weights larger than one storage binding', () => {
  it(
    'decodes on wgpu with 32 KiB bindings the greedy tokens of its full-size bindings and of the reference',
    async () => {
      const config = q4kmTestConfig({ layers: 2, tied: true, vocab: 1000 });
      const path = join(dir, 'q4_0.gguf');
      const typeOf = (name: string) =>
        name === 'model.embed_tokens.weight' ? 'Q8_0' : name.endsWith('_proj.weight') ? 'Q4_0' : 'F32';
      await writeGgufFile(path, llamaToGguf(config, seededLlamaWeights(config, 53), { typeOf }));
      // Q8_0's codes take a byte per weight, Q4_0's half of one: both exceed the limit.
      expect(config.vocabSize * config.hiddenSize).toBeGreaterThan(4 * LIMIT);
      expect((config.intermediateSize * config.hiddenSize) / 2).toBeGreaterThan(LIMIT);

      const limited = await createBackend('wgpu', { maxBindingBytes: LIMIT });
      const full = await createBackend('wgpu');
      try {
        // Against the file dequantized by the reference on the cpu backend: tokens and prefill logits.
        const r = await checkQuantizedDecode(limited, path, { prompt: PROMPT, maxNewTokens: 8 });
        expect(r.denseMatrices).toEqual([]);
        expect(r.tokens).toHaveLength(8);
        expect(r.tokens).toEqual(r.referenceTokens);
        expect(r.maxLogit).toBeGreaterThan(1);
        expect(r.maxLogitError).toBeLessThan(1e-4 * Math.max(1, r.maxLogit));
        // And the same tokens as with bindings of the adapter's size.
        using model = await loadGgufLlama(full, path, { repack: repackOntoCoreFormats });
        expect(await greedy(model, 8)).toEqual(r.tokens);
      } finally {
        limited.dispose();
        full.dispose();
      }
    },
    TIMEOUT,
  );
});
