import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend, InvalidArgumentError } from '@rayo/core';
import { qwen3Config, removeTinyLlamas, tinyLlamaWeights, writeTinyLlama } from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { openNodeFile } from '../../checkpoint/randomAccessFile.js';
import { llamaToGguf } from '../../gguf/convertLlama.js';
import { GgufFile } from '../../gguf/ggufFile.js';
import { loadGgufLlama } from '../../gguf/loadLlama.js';
import { repackOntoCoreFormats } from '../../gguf/repack.js';
import { writeGgufFile } from '../../gguf/writer.js';
import { parseLlamaConfig } from './config.js';
import type { LoadProgress } from './loadProgress.js';
import { LlamaModel } from './model.js';

const backend = createCpuBackend();
const dir = await mkdtemp(join(tmpdir(), 'load-progress-'));
afterAll(async () => {
  backend.dispose();
  await removeTinyLlamas();
  await rm(dir, { recursive: true, force: true });
});

/** Checks a load's reports: nothing loaded first, then one per tensor, counting up to the totals, which never change. */
function expectSteady(reports: LoadProgress[], tensors: number, bytes: number): void {
  expect(reports).toHaveLength(tensors + 1);
  expect(reports[0]).toEqual({ tensorsLoaded: 0, tensorsTotal: tensors, bytesLoaded: 0, bytesTotal: bytes });
  reports.forEach((p, i) => {
    expect(p.tensorsLoaded).toBe(i);
    expect(p.tensorsTotal).toBe(tensors);
    expect(p.bytesTotal).toBe(bytes);
    if (i > 0) expect(p.bytesLoaded).toBeGreaterThan(reports[i - 1]!.bytesLoaded);
  });
  expect(reports.at(-1)!.bytesLoaded).toBe(bytes);
}

describe('load progress', () => {
  // Qwen3 with biases: norms, biases and head norms are tensors too.
  const json = qwen3Config({ attention_bias: true, tie_word_embeddings: false });
  const weights = tinyLlamaWeights(json, 8);
  const f32Bytes = [...weights.values()].reduce((sum, w) => sum + 4 * w.data.length, 0);

  it('reports every tensor of a sharded safetensors checkpoint, in its stored bytes, as it is uploaded', async () => {
    for (const dtype of ['f32', 'bf16'] as const) {
      const path = await writeTinyLlama(json, weights, { shards: 2, dtype });
      const reports: LoadProgress[] = [];
      // Each report comes after its tensor is on the device: the backend holds it by then.
      const live: number[] = [];
      using model = await LlamaModel.load(backend, path, {
        onProgress: (p) => {
          reports.push(p);
          live.push(backend.memory().liveTensors);
        },
      });
      expectSteady(reports, weights.size, dtype === 'f32' ? f32Bytes : f32Bytes / 2);
      expect(live.every((n, i) => i === 0 || n > live[i - 1]!)).toBe(true);
      expect(model.config.family).toBe('qwen3');
    }
  });

  it('reports every tensor of a GGUF file, quantized ones in their stored bytes', async () => {
    const small = qwen3Config({ attention_bias: true, tie_word_embeddings: false, intermediate_size: 96 });
    const w = tinyLlamaWeights(small, 9);
    const path = join(dir, 'model.gguf');
    const projection = /_proj\.weight$/;
    await writeGgufFile(
      path,
      llamaToGguf(parseLlamaConfig(small), w, { typeOf: (name) => (projection.test(name) ? 'Q8_0' : 'F32') }),
    );
    const raw = await openNodeFile(path);
    const stored = [...(await GgufFile.open(raw)).tensors.values()].reduce((sum, t) => sum + t.byteLength, 0);
    await raw.close();
    const reports: LoadProgress[] = [];
    using model = await loadGgufLlama(backend, path, {
      repack: repackOntoCoreFormats,
      onProgress: (p) => reports.push(p),
    });
    // Q8_0 stores 34 bytes per 32 weights: far below the f32 bytes.
    expect(stored).toBeLessThan([...w.values()].reduce((sum, t) => sum + 4 * t.data.length, 0) / 2);
    expectSteady(reports, w.size, stored);
    expect(model.config.qkNorm).toBe(true);
  });

  it('refuses an onProgress that is not a function, before reading a weight', async () => {
    const path = await writeTinyLlama(json, weights);
    const error = await LlamaModel.load(backend, path, {
      onProgress: 'bar' as unknown as (p: LoadProgress) => void,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('onProgress');
  });
});
