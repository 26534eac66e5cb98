import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CudaBackend, CudaDriver } from '@rayo/cuda-ptx';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { checkQuantizedDecode, q4kmTestConfig, writeLlamaCppMix, writeQ4kmLlama } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';

// gguf-check's comparison on the cuda backend without a GPU: the backend
// drives the fake libcuda, whose launches run the generated PTX in the
// interpreter. On an NVIDIA host, gguf-check.mjs runs the same on the GPU.

const dir = await mkdtemp(join(tmpdir(), 'gguf-check-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('a Q4_K_M GGUF file on the cuda backend of an emulated device', () => {
  it('decodes with the greedy tokens of its weights dequantized by the reference, in f32', async () => {
    const fake = new FakeLibCuda();
    fake.memoryLimit = 2 ** 30;
    new PtxInterpreter(fake).attach();
    const backend = new CudaBackend(new CudaDriver(fake));
    try {
      // Two layers: Q4_K V and down in layer 0, Q6_K in layer 1 (llama.cpp's use_more_bits), a Q6_K head.
      const config = q4kmTestConfig({ layers: 2 });
      const path = join(dir, 'q4km.gguf');
      await writeQ4kmLlama(path, config, 31);
      const r = await checkQuantizedDecode(backend, path, { prompt: [5, 17, 3], maxNewTokens: 3 });
      expect(r.denseMatrices).toEqual([]);
      expect(r.tokens).toHaveLength(3);
      expect(r.tokens).toEqual(r.referenceTokens);
      expect(r.maxLogitError).toBeLessThan(1e-4 * Math.max(1, r.maxLogit));
    } finally {
      backend.dispose();
    }
  }, 900_000);
});

describe('a Q5_K_M GGUF file on the cuda backend of an emulated device', () => {
  it('decodes its Q5_K (q8g32a on the device) and Q6_K weights with the reference’s greedy tokens', async () => {
    const fake = new FakeLibCuda();
    fake.memoryLimit = 2 ** 30;
    new PtxInterpreter(fake).attach();
    const backend = new CudaBackend(new CudaDriver(fake));
    try {
      const config = q4kmTestConfig({ layers: 2 });
      const path = join(dir, 'q5km.gguf');
      const types = await writeLlamaCppMix(path, config, 'Q5_K_M', 37);
      expect(types.get('model.layers.0.mlp.up_proj.weight')).toBe('Q5_K');
      const r = await checkQuantizedDecode(backend, path, { prompt: [5, 17, 3], maxNewTokens: 3 });
      expect(r.denseMatrices).toEqual([]);
      expect(r.tokens).toHaveLength(3);
      expect(r.tokens).toEqual(r.referenceTokens);
      expect(r.maxLogitError).toBeLessThan(1e-4 * Math.max(1, r.maxLogit));
    } finally {
      backend.dispose();
    }
  }, 900_000);
});
