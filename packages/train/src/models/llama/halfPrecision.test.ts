import { type Backend, createCpuBackend, type DType, UnsupportedOnBackendError } from '@rayo/core';
import {
  maxAbsDiff,
  referenceGreedy,
  referenceLogits,
  removeTinyLlamas,
  roundedTinyWeights,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { parseLlamaConfig } from './config.js';
import { LlamaModel } from './model.js';
import type { LlamaLoadOptions } from './modelOptions.js';

afterAll(removeTinyLlamas);

const backend = createCpuBackend();
afterAll(() => backend.dispose());
const config = tinyLlamaConfig();
const weights = tinyLlamaWeights(config, 1234);
const f32Dir = await writeTinyLlama(config, weights);
const PROMPT = [5, 17, 3, 96, 0, 42, 8];
const CONTINUATION = [61, 2, 77, 13, 40];

/** The same f32 tolerance as against the f64 reference of f32 weights (see model.test.ts). */
const F32_TOLERANCE = 5e-5;

/**
 * bf16 keeps 8 significant bits: each weight moves by at most 2^-9 of itself,
 * each cached key or value likewise. Over the dot products of two blocks
 * these errors add like a random walk; the logits (|logit| up to about 3.5)
 * moved by at most 0.016 here. Five roundings' worth at the largest logit,
 * 5·2^-9·4 ≈ 0.04, bounds that with room; a wrong dtype path (words read as
 * the other half format, a missing cast) moves them by whole units.
 */
const BF16_TOLERANCE = 5 * 2 ** -9 * 4;

/**
 * f16 prompts: the model and the reference round the same product inputs, but
 * from f32 and f64 activations, which fall on opposite sides of a rounding
 * boundary now and then; f16's steps are 8× finer than bf16's, so that
 * happens in most rows (bf16's rows match to 1e-7), each such input then one
 * f16 step apart: rows differ by about 1e-3. Five f16 roundings (2^-11) at
 * the largest logit bound it as BF16_TOLERANCE does bf16's.
 */
const PROMPT_F16_TOLERANCE = 5 * 2 ** -11 * 4;

/** The largest difference over rows of logits. */
function worstRowDiff(got: readonly ArrayLike<number>[], want: readonly ArrayLike<number>[]): number {
  expect(got.length).toBe(want.length);
  return Math.max(...got.map((row, t) => maxAbsDiff(row, want[t]!)));
}

/** Logits of PROMPT by prefill, then of each CONTINUATION token by eager decode steps. */
async function promptAndDecodeLogits(model: LlamaModel): Promise<Float32Array<ArrayBufferLike>[]> {
  model.reset();
  using prefill = model.prefill(PROMPT);
  const all = (await prefill.read()) as Float32Array;
  const rows: Float32Array<ArrayBufferLike>[] = PROMPT.map((_, t) => all.slice(t * 97, (t + 1) * 97));
  for (const token of CONTINUATION) {
    using logits = model.decode(token);
    rows.push((await logits.read()) as Float32Array);
  }
  return rows;
}

async function load(options: LlamaLoadOptions): Promise<LlamaModel> {
  return LlamaModel.load(backend, f32Dir, options);
}

describe('Llama with half weights and half KV caches (cpu)', () => {
  for (const dtype of ['bf16', 'f16'] as const) {
    it(`${dtype} weights rounded from an f32 checkpoint match the f64 reference of the rounded weights and prompt inputs`, async () => {
      // The reference keeps f32 keys and values: the cache is pinned to f32 (half weights default to a half one).
      using model = await load({ weightDtype: dtype, kvCacheDtype: 'f32' });
      expect(model.weightDtype).toBe(dtype);
      expect(model.weights.layers[0]!.gate!.dtype).toBe(dtype);
      // The prompt's products round their inputs to the weights' dtype (f32 sums); decoding's do not.
      const want = referenceLogits(config, roundedTinyWeights(weights, dtype), [...PROMPT, ...CONTINUATION], {
        dtype,
        rows: PROMPT.length,
      });
      const got = await promptAndDecodeLogits(model);
      // bf16 matches to f32 rounding; f16 prompts stay within f16's rounding of the inputs (see PROMPT_F16_TOLERANCE).
      expect(worstRowDiff(got, want)).toBeLessThan(dtype === 'bf16' ? F32_TOLERANCE : PROMPT_F16_TOLERANCE);
    });
  }

  it('bf16 weights and a bf16 cache stay within the bf16 tolerance of f32, and pick the same greedy tokens', async () => {
    using f32 = await load({});
    using half = await load({ weightDtype: 'bf16', kvCacheDtype: 'bf16' });
    expect(half.kvCacheDtype).toBe('bf16');
    const want = await promptAndDecodeLogits(f32);
    const got = await promptAndDecodeLogits(half);
    expect(worstRowDiff(got, want)).toBeLessThan(BF16_TOLERANCE);

    // A chunk after the first attends over the (half) cache, masked.
    half.reset();
    half.prefill(PROMPT).dispose();
    using chunk = half.prefill(CONTINUATION);
    const chunkRows = (await chunk.read()) as Float32Array;
    const chunked = CONTINUATION.map((_, t) => chunkRows.subarray(t * 97, (t + 1) * 97));
    expect(worstRowDiff(chunked, want.slice(PROMPT.length))).toBeLessThan(BF16_TOLERANCE);
  });

  it('greedy tokens of bf16 weights and cache are the f64 reference’s where its choice is clear', async () => {
    // A seed whose greedy choices all lead by more than twice the tolerance (0.21 at the closest).
    const decisive = tinyLlamaWeights(config, 29);
    const dir = await writeTinyLlama(config, decisive, { dtype: 'bf16' });
    const count = 8;
    const reference = referenceGreedy(config, decisive, PROMPT, count);
    expect(Math.min(...reference.margins)).toBeGreaterThan(2 * BF16_TOLERANCE);
    const tokens = async (options: LlamaLoadOptions) => {
      using model = await LlamaModel.load(backend, dir, { kvCacheDtype: 'bf16', ...options });
      expect(model.weightDtype).toBe('bf16');
      const out: number[] = [];
      for await (const token of model.generate(PROMPT, { maxNewTokens: count })) out.push(token);
      return out;
    };
    // Replayed with the token chosen on the device, and eager.
    expect(await tokens({})).toEqual(reference.tokens);
    expect(await tokens({ replay: false })).toEqual(reference.tokens);
  });

  it('takes f16 caches under f32 weights, fused and unfused alike', async () => {
    using fused = await load({ kvCacheDtype: 'f16', fused: true });
    using unfused = await load({ kvCacheDtype: 'f16', fused: false });
    const a = await promptAndDecodeLogits(fused);
    const b = await promptAndDecodeLogits(unfused);
    expect(worstRowDiff(a, b)).toBeLessThan(F32_TOLERANCE);
  });
});

/** The cpu backend, saying it cannot run `refused` kernels in the given dtypes; counts its uploads. */
function refusing(refused: Readonly<Record<string, readonly DType[]>>): {
  backend: Backend;
  uploads: () => number;
} {
  const inner = createCpuBackend();
  let uploads = 0;
  const proxy = new Proxy(inner, {
    get(target, prop) {
      if (prop === 'supports') {
        return (kernel: string, dtype?: DType) =>
          !(dtype && refused[kernel]?.includes(dtype)) && target.supports(kernel, dtype);
      }
      if (prop === 'upload') {
        return (...args: Parameters<Backend['upload']>) => {
          uploads++;
          return target.upload(...args);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { backend: proxy, uploads: () => uploads };
}

describe('a backend without the half kernels', () => {
  it('is refused before any weight is uploaded, naming the kernel, the option and the dtypes it runs', async () => {
    const { backend: b, uploads } = refusing({ matmul: ['bf16'] });
    const error = await LlamaModel.load(b, f32Dir, { weightDtype: 'bf16' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnsupportedOnBackendError);
    expect(error).toMatchObject({ operation: 'matmul', argument: 'weightDtype' });
    expect((error as Error).message).toMatch(
      /expected a backend whose matmul runs bf16.*got cpu runs matmul in f32, f16/,
    );
    expect(uploads()).toBe(0);

    // Weights made elsewhere: refused when the model is placed on the backend.
    using model = await load({ weightDtype: 'bf16' });
    expect(() => new LlamaModel(b, parseLlamaConfig(config), model.weights)).toThrow(
      /cannot run matmul in bf16/,
    );
    b.dispose();
  });

  it('keeps the KV cache in half weights’ dtype by default, and in f32 where a cache kernel lacks that dtype', async () => {
    for (const dtype of ['f32', 'bf16', 'f16'] as const) {
      using model = await load({ weightDtype: dtype });
      expect(model.kvCacheDtype).toBe(dtype);
    }
    const { backend: b } = refusing({ causalAttention: ['bf16'] });
    using model = await LlamaModel.load(b, f32Dir, { weightDtype: 'bf16' });
    expect([model.weightDtype, model.kvCacheDtype]).toEqual(['bf16', 'f32']);
    model.dispose();
    b.dispose();
  });

  it('names the cache kernels for a half cache, and leaves the fused step out where only it lacks the dtype', async () => {
    const { backend: b } = refusing({ incrementalAttention: ['f16'], ropeKvScatter: ['bf16'] });
    await expect(LlamaModel.load(b, f32Dir, { kvCacheDtype: 'f16' })).rejects.toMatchObject({
      operation: 'incrementalAttention',
      argument: 'kvCacheDtype',
    });
    await expect(LlamaModel.load(b, f32Dir, { kvCacheDtype: 'bf16', fused: true })).rejects.toMatchObject({
      operation: 'ropeKvScatter',
      argument: 'kvCacheDtype',
    });
    // By default the decode step is unfused there, and runs.
    using model = await LlamaModel.load(b, f32Dir, { kvCacheDtype: 'bf16' });
    using logits = model.decode(3);
    expect(logits.shape).toEqual([1, 97]);
    await expect(LlamaModel.load(b, f32Dir, { kvCacheDtype: 'f64' as never })).rejects.toThrow(
      /kvCacheDtype/,
    );
    model.dispose();
    b.dispose();
    // Prefill attends over the half cache as it is stored.
    const { backend: c } = refusing({ causalAttention: ['bf16'] });
    await expect(LlamaModel.load(c, f32Dir, { kvCacheDtype: 'bf16' })).rejects.toMatchObject({
      operation: 'causalAttention',
      argument: 'kvCacheDtype',
    });
    c.dispose();
  });
});
