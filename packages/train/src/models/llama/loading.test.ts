import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createCpuBackend, DTypeError, InvalidArgumentError, type RayoError, ShapeError } from '@rayo/core';
import { removeTinyLlamas, tinyLlamaConfig, tinyLlamaWeights, writeTinyLlama } from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { type OpenFile, openNodeFile } from '../../checkpoint/randomAccessFile.js';
import { encodeSafetensors, type StoredTensor } from '../../checkpoint/safetensors.js';
import { LlamaModel } from './model.js';

const backend = createCpuBackend();
afterAll(removeTinyLlamas);
const config = tinyLlamaConfig();

async function loadError(dir: string): Promise<unknown> {
  try {
    (await LlamaModel.load(backend, dir)).dispose();
  } catch (error) {
    return error;
  }
  throw new Error('the load succeeded');
}

/** A checkpoint whose weights were edited by `edit` before writing. */
async function edited(edit: (w: ReturnType<typeof tinyLlamaWeights>) => void, shards = 1): Promise<string> {
  const weights = tinyLlamaWeights(config, 5);
  edit(weights);
  return writeTinyLlama(config, weights, { shards });
}

interface Read {
  readonly file: string;
  readonly position: number;
  readonly length: number;
}

/** Node file handles whose reads are recorded. */
function recordingOpen(reads: Read[]): OpenFile {
  return async (path) => {
    const file = await openNodeFile(path);
    return {
      ...file,
      read: (into, position) => {
        reads.push({ file: path, position, length: into.length });
        return file.read(into, position);
      },
    };
  };
}

describe('loading a Llama checkpoint', () => {
  it('streams tensor by tensor: every read lies within one tensor, no read takes a file, each byte once', async () => {
    const weights = tinyLlamaWeights(config, 5);
    for (const shards of [1, 2]) {
      const dir = await writeTinyLlama(config, weights, { shards });
      const reads: Read[] = [];
      const maxReadBytes = 4096;
      using model = await LlamaModel.load(backend, dir, { openFile: recordingOpen(reads), maxReadBytes });
      const weightFiles = [...new Set(reads.map((r) => r.file))].filter((f) => f.endsWith('.safetensors'));
      expect(weightFiles).toHaveLength(shards);
      for (const file of weightFiles) {
        const size = (await readFile(file)).length;
        const mine = reads.filter((r) => r.file === file);
        // The 8-byte length, the JSON header, then data pieces of at most maxReadBytes.
        expect(mine[0]).toMatchObject({ position: 0, length: 8 });
        const data = mine.slice(2);
        expect(Math.max(...data.map((r) => r.length))).toBeLessThanOrEqual(maxReadBytes);
        expect(mine.every((r) => r.length < size)).toBe(true);
        expect(mine.reduce((sum, r) => sum + r.length, 0)).toBe(size);
        const covered = new Set<number>();
        for (const r of data) for (let b = r.position; b < r.position + r.length; b += 4) covered.add(b);
        expect(covered.size * 4).toBe(size - mine[0]!.length - mine[1]!.length);
      }
      // The streamed weights are the written ones.
      expect(Array.from(await model.weights.layers[1]!.down!.read())).toEqual(
        Array.from(weights.get('model.layers.1.mlp.down_proj.weight')!.data),
      );
    }
  });

  it('names a missing weight and its expected shape', async () => {
    const dir = await edited((w) => w.delete('model.layers.1.mlp.up_proj.weight'));
    const error = (await loadError(dir)) as RayoError;
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.argument).toBe('model.layers.1.mlp.up_proj.weight');
    expect(error.message).toMatch(/missing.*expected a tensor of shape \[91, 64\], got absent/);
  });

  it('names a misshapen weight with the expected and the actual shape', async () => {
    const dir = await edited((w) => {
      w.set('model.layers.0.self_attn.k_proj.weight', { shape: [64, 64], data: new Float32Array(64 * 64) });
    });
    const error = (await loadError(dir)) as RayoError;
    expect(error).toBeInstanceOf(ShapeError);
    expect(error.argument).toBe('model.layers.0.self_attn.k_proj.weight');
    expect(error.message).toMatch(/expected \[32, 64\], got \[64, 64\]/);
  });

  it('keeps a bf16 or f16 checkpoint in its dtype, widens it exactly when asked, and names mixed matrices', async () => {
    const weights = tinyLlamaWeights(config, 5);
    // Values bf16 and f16 both hold exactly, so that every checkpoint below is the same model.
    for (const w of weights.values())
      for (let i = 0; i < w.data.length; i++) w.data[i] = Math.round(w.data[i]! * 64) / 64;
    const f32Dir = await writeTinyLlama(config, weights);
    using fromF32 = await LlamaModel.load(backend, f32Dir);
    expect(fromF32.weightDtype).toBe('f32');
    using want = fromF32.prefill([1, 2, 3]);
    const logits = Array.from(await want.read());
    for (const dtype of ['bf16', 'f16'] as const) {
      const dir = await writeTinyLlama(config, weights, { dtype });
      using kept = await LlamaModel.load(backend, dir);
      expect(kept.weightDtype).toBe(dtype);
      expect(
        [kept.weights.embedding, kept.weights.head, kept.weights.layers[1]!.down!].map((t) => t!.dtype),
      ).toEqual([dtype, dtype, dtype]);
      // Norm weights are f32: the kernels take them with the (f32) activations.
      expect(kept.weights.layers[0]!.inputNorm.dtype).toBe('f32');
      using widened = await LlamaModel.load(backend, dir, { weightDtype: 'f32' });
      expect(widened.weights.layers[0]!.qkv!.dtype).toBe('f32');
      using exact = widened.prefill([1, 2, 3]);
      expect(Array.from(await exact.read())).toEqual(logits);
      // The kept half weights multiply a prompt's activations rounded to their dtype (matmul precision 'half').
      using rounded = kept.prefill([1, 2, 3]);
      const got = Array.from(await rounded.read());
      expect(Math.max(...got.map((x, i) => Math.abs(x - logits[i]!)))).toBeLessThan(0.05);
    }

    const mixed = await writeTinyLlama(config, weights, { dtype: 'bf16' });
    const tensors = new Map<string, StoredTensor>([...weights].map(([n, w]) => [n, { dtype: 'f32', ...w }]));
    const q = 'model.layers.0.self_attn.q_proj.weight';
    tensors.set(q, { dtype: 'bf16', shape: weights.get(q)!.shape, data: new Uint16Array(64 * 64) });
    await writeFile(join(mixed, 'model.safetensors'), encodeSafetensors(tensors));
    const error = (await loadError(mixed)) as RayoError;
    expect(error).toBeInstanceOf(DTypeError);
    expect(error.argument).toBe('weightDtype');
    expect(error.message).toMatch(/'model.layers.0.self_attn.q_proj.weight'.*f32 and bf16/);
    // An explicit dtype reads it.
    (await LlamaModel.load(backend, mixed, { weightDtype: 'bf16' })).dispose();
    await expect(LlamaModel.load(backend, mixed, { weightDtype: 'f64' as never })).rejects.toThrow(
      /weightDtype.*expected 'f32' \| 'f16' \| 'bf16' \| 'checkpoint', got f64/,
    );
  });

  it('rejects tensors a Llama does not use, but accepts derived rotary buffers', async () => {
    const extra = await edited((w) =>
      w.set('model.layers.0.self_attn.q_proj.bias', { shape: [64], data: new Float32Array(64) }),
    );
    const error = (await loadError(extra)) as RayoError;
    expect(error.argument).toBe('model.layers.0.self_attn.q_proj.bias');
    const derived = await edited((w) =>
      w.set('model.layers.0.self_attn.rotary_emb.inv_freq', { shape: [8], data: new Float32Array(8) }),
    );
    (await LlamaModel.load(backend, derived)).dispose();
  });

  it('ties the head to the embedding, and refuses an lm_head.weight when tied', async () => {
    const tiedConfig = tinyLlamaConfig({ tie_word_embeddings: true });
    const weights = tinyLlamaWeights(tiedConfig, 5);
    using model = await LlamaModel.load(backend, await writeTinyLlama(tiedConfig, weights));
    expect(model.weights.head).toBe(model.weights.embedding);
    weights.set('lm_head.weight', { shape: [97, 64], data: new Float32Array(97 * 64) });
    const error = (await loadError(await writeTinyLlama(tiedConfig, weights))) as RayoError;
    expect(error.message).toMatch(/has 'lm_head.weight' but the config ties the head/);
  });

  it('refuses an index that disagrees with its shards', async () => {
    const dir = await edited(() => {}, 2);
    const indexPath = join(dir, 'model.safetensors.index.json');
    const index = JSON.parse(await readFile(indexPath, 'utf8'));
    const [first, second] = [...new Set(Object.values(index.weight_map) as string[])].sort();
    index.weight_map['model.norm.weight'] = index.weight_map['model.norm.weight'] === first ? second : first;
    await writeFile(indexPath, JSON.stringify(index));
    expect(((await loadError(dir)) as RayoError).message).toMatch(
      /'model.norm.weight' of shard .* is not where the index says/,
    );
    index.weight_map['model.extra'] = first;
    delete index.weight_map['model.norm.weight'];
    await writeFile(indexPath, JSON.stringify(index));
    expect(((await loadError(dir)) as RayoError).message).toMatch(
      /not where the index says|its shard lacks it/,
    );
  });

  it('names a bad config field before reading weights', async () => {
    const dir = await writeTinyLlama(
      tinyLlamaConfig({ num_key_value_heads: 3 }),
      tinyLlamaWeights(config, 5),
    );
    const error = (await loadError(dir)) as RayoError;
    expect(error.argument).toBe('num_key_value_heads');
  });
});
