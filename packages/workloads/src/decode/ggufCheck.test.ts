import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CudaBackend, CudaDriver } from '@rayo/cuda-ptx';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import {
  checkQuantizedDecode,
  ggufAsCoreFormat,
  q4kmTestConfig,
  writeLlamaCppMix,
  writeQ4kmLlama,
} from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';

// gguf-check's comparison on the cuda backend without a GPU: the backend
// drives the fake libcuda, whose launches run the generated PTX in the
// interpreter. On an NVIDIA host, gguf-check.mjs runs the same on the GPU.

const dir = await mkdtemp(join(tmpdir(), 'gguf-check-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

/** Writes a file with `write`, then runs gguf-check's comparison on an emulated device's cuda backend. */
async function checkOnEmulatedCuda(name: string, write: (path: string) => Promise<unknown>): Promise<void> {
  const fake = new FakeLibCuda();
  fake.memoryLimit = 2 ** 30;
  new PtxInterpreter(fake).attach();
  const backend = new CudaBackend(new CudaDriver(fake));
  try {
    const path = join(dir, name);
    await write(path);
    // Two new tokens: the prefill's and one decode step's (the interpreter
    // runs every thread of a step's GEMVs: seconds per token).
    const r = await checkQuantizedDecode(backend, path, { prompt: [5, 17, 3], maxNewTokens: 2 });
    expect(r.denseMatrices).toEqual([]);
    expect(r.tokens).toHaveLength(2);
    expect(r.tokens).toEqual(r.referenceTokens);
    expect(r.maxLogitError).toBeLessThan(1e-4 * Math.max(1, r.maxLogit));
  } finally {
    backend.dispose();
  }
}

describe('GGUF files on the cuda backend of an emulated device', () => {
  it('Q4_K_M decodes with the greedy tokens of its weights dequantized by the reference, in f32', async () => {
    // Two layers: Q4_K V and down in layer 0, Q6_K in layer 1 (llama.cpp's use_more_bits), a Q6_K head.
    await checkOnEmulatedCuda('q4km.gguf', (path) => writeQ4kmLlama(path, q4kmTestConfig({ layers: 2 }), 31));
  }, 900_000);

  it('Q5_K_M decodes its Q5_K (q5k on the device) and Q6_K weights with the reference’s greedy tokens', async () => {
    // The repack the check loads with puts Q5_K blocks on q5k.
    expect(ggufAsCoreFormat('Q5_K', new Uint8Array(176), 1, 256).format).toBe('q5k');
    await checkOnEmulatedCuda('q5km.gguf', async (path) => {
      const types = await writeLlamaCppMix(path, q4kmTestConfig({ layers: 2 }), 'Q5_K_M', 37);
      expect(types.get('model.layers.0.mlp.up_proj.weight')).toBe('Q5_K');
    });
  }, 900_000);

  for (const [mix, fallback, format] of [
    ['Q4_K_M', 'Q5_0', 'q5g32'],
    ['Q5_K_M', 'Q5_1', 'q5g32a'],
  ] as const) {
    it(`${mix} with down rows of 352 decodes their ${fallback} fallback (${format} on the device) with the reference’s greedy tokens`, async () => {
      // Rows of 11 blocks of 32 (not whole 256s): llama.cpp's fallback, which the check's repack puts on its own format.
      expect(ggufAsCoreFormat(fallback, new Uint8Array(fallback === 'Q5_0' ? 22 : 24), 1, 32).format).toBe(
        format,
      );
      await checkOnEmulatedCuda(`${fallback}.gguf`, async (path) => {
        const types = await writeLlamaCppMix(path, q4kmTestConfig({ layers: 2, intermediate: 352 }), mix, 41);
        expect(types.get('model.layers.0.mlp.down_proj.weight')).toBe(fallback);
      });
    }, 900_000);
  }
});
