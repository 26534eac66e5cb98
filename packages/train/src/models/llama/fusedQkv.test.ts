import {
  createCpuBackend,
  type QuantFormat,
  quantizeWeights,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import {
  ModelScope,
  modelTestBackends,
  removeTinyLlamas,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { parseLlamaConfig } from './config.js';
import { fuseQkvProjections, fuseQuantizedQkv } from './fusedQkv.js';
import { LlamaModel } from './model.js';
import { llamaWeightTensors } from './weights.js';

afterAll(removeTinyLlamas);

const backends = await modelTestBackends();

/** The rows of q, k and v of layer `i` (and of their biases) one after the other, as stored in the checkpoint. */
function concatenated(weights: ReturnType<typeof tinyLlamaWeights>, i: number, suffix: 'weight' | 'bias') {
  const parts = ['q', 'k', 'v'].map((p) => weights.get(`model.layers.${i}.self_attn.${p}_proj.${suffix}`)!);
  const out = new Float32Array(parts.reduce((n, p) => n + p.data.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p.data, at);
    at += p.data.length;
  }
  return out;
}

describe.each(backends)('fused q, k, v weights on %s', (_name, create) => {
  const scope = new ModelScope(create);
  afterAll(scope.dispose);

  it('a loaded model holds each layer’s q, k, v (and biases) as one weight of their rows, the three freed', async () => {
    const backend = await scope.backend();
    // One kv head, a head width apart from hidden_size / heads, and q, k, v (and o) biases.
    const json = tinyLlamaConfig({ attention_bias: true, num_key_value_heads: 1, head_dim: 6 });
    const weights = tinyLlamaWeights(json, 71);
    const model = await LlamaModel.load(backend, await writeTinyLlama(json, weights), { maxSequence: 16 });
    scope.keep(model);
    const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, hiddenSize } = model.config;
    for (const [i, layer] of model.weights.layers.entries()) {
      for (const p of ['q', 'k', 'v', 'qBias', 'kBias', 'vBias'] as const) expect(layer[p]).toBeUndefined();
      expect(layer.qkv!.shape).toEqual([(heads + 2 * kvHeads) * headDim, hiddenSize]);
      expect(Array.from(await layer.qkv!.read())).toEqual(Array.from(concatenated(weights, i, 'weight')));
      expect(Array.from(await layer.qkvBias!.read())).toEqual(Array.from(concatenated(weights, i, 'bias')));
    }
  }, 60_000);
});

describe.each(backends)('quantized q, k, v joined on %s', (_name, create) => {
  const scope = new ModelScope(create);
  afterAll(scope.dispose);

  // q4g32 with K = 16: one f16 scale a row, so the parts' scales start and end off 4-byte words (rows
  // of 3 and 5); q4k: its sub-block scales and dmin offsets; q8g32a: f32 scales and offsets.
  for (const [format, k, rows] of [
    ['q4g32', 16, [3, 5, 3]],
    ['q4k', 256, [4, 2, 2]],
    ['q8g32a', 40, [2, 1, 1]],
  ] as const) {
    it(`${format}: each tensor of the fused weight is the parts' rows, joined on the device`, async () => {
      const backend = await scope.backend();
      const config = parseLlamaConfig(tinyLlamaConfig());
      const hosts = rows.map((n, p) =>
        quantizeWeights(
          Float32Array.from({ length: n * k }, (_, i) => Math.sin(0.37 * i + p) * (1 + (i % 7))),
          [n, k],
          format as QuantFormat,
        ),
      );
      const [q, kw, v] = hosts.map((h) => uploadQuantized(backend, h));
      const read = vi.spyOn((q!.packed as Tensor).constructor.prototype, 'read');
      const [fused] = await fuseQuantizedQkv(backend, config, [{ q, k: kw, v }], 'f32');
      const reads = read.mock.calls.length;
      read.mockRestore();
      scope.keep({ dispose: () => fused!.qkv!.dispose() });
      // copyRows on every backend here: nothing read back.
      expect(reads).toBe(0);
      const qkv = fused!.qkv!;
      expect(qkv.n).toBe(rows.reduce((a, b) => a + b, 0));
      for (const part of ['packed', 'scales', 'zeros', 'offsets'] as const) {
        const want = hosts.map((h) => h[part]);
        if (want[0] === undefined) {
          expect(qkv[part], part).toBeUndefined();
          continue;
        }
        const joined = want.flatMap((w) => Array.from(w!));
        expect(Array.from(await qkv[part]!.read()), part).toEqual(joined);
      }
    });
  }
});

describe('fuseQuantizedQkv', () => {
  it('fuses the q, k, v of a checkpoint quantized on load, and its biases beside them', async () => {
    const json = tinyLlamaConfig({ attention_bias: true, num_key_value_heads: 1, head_dim: 6 });
    const dir = await writeTinyLlama(json, tinyLlamaWeights(json, 13));
    const cpu = createCpuBackend();
    using dense = await LlamaModel.load(cpu, dir);
    using q8 = await LlamaModel.load(cpu, dir, { weightFormat: 'q8' });
    for (const layer of q8.weights.layers) {
      for (const p of ['q', 'k', 'v', 'qBias', 'kBias', 'vBias'] as const) expect(layer[p]).toBeUndefined();
      expect(layer.qkvBias).toBeDefined();
    }
    const prompt = [3, 14, 15, 92, 65];
    using want = dense.prefill(prompt);
    using got = q8.prefill(prompt);
    const [a, b] = [await want.read(), await got.read()];
    const spread = Math.max(...Array.from(a, Math.abs));
    const error = Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i]!)));
    expect(error).toBeGreaterThan(0);
    expect(error).toBeLessThan(0.02 * spread);
    // Decoding after the prompt: the fused quantized GEMV, as the prefill of one more token gives.
    using step = q8.decode(7);
    q8.reset();
    using all = q8.prefill([...prompt, 7]);
    const vocab = json.vocab_size as number;
    const last = (await all.read()).subarray(prompt.length * vocab);
    const stepped = await step.read();
    expect(Math.max(...Array.from(last, (x, i) => Math.abs(x - stepped[i]!)))).toBeLessThan(1e-4);
  });
});

describe('fuseQkvProjections', () => {
  it('frees the separate weights: the fused model holds the bytes of the unfused one', async () => {
    const json = tinyLlamaConfig({ num_key_value_heads: 1, head_dim: 6 });
    const dir = await writeTinyLlama(json, tinyLlamaWeights(json, 5));
    const cpu = createCpuBackend();
    using model = await LlamaModel.load(cpu, dir);
    const bytes = (ts: Tensor[]) => ts.reduce((n, t) => n + t.byteLength, 0);
    const held = bytes(llamaWeightTensors(model.weights));
    const config = parseLlamaConfig(json);
    const { numAttentionHeads: h, numKeyValueHeads: g, headDim, hiddenSize: d } = config;
    const perLayer = (h + 2 * g) * headDim * d * 4;
    expect(model.weights.layers.every((l) => l.qkv?.byteLength === perLayer)).toBe(true);
    // Only the weights, the caches and the step inputs are live: no copy of q, k or v is kept.
    const caches = model.weights.layers.length * 2 * g * model.maxSequence * headDim * 4;
    const stepInputs = 3 * 4;
    expect(cpu.memory().liveBytes).toBe(held + caches + stepInputs);
  });

  it('leaves apart the layers of a family that normalises q and k heads, and fused ones as they are', async () => {
    const cpu = createCpuBackend();
    const json = tinyLlamaConfig({ num_hidden_layers: 1 });
    using model = await LlamaModel.load(cpu, await writeTinyLlama(json, tinyLlamaWeights(json, 9)));
    const config = parseLlamaConfig(json);
    const layer = model.weights.layers[0]!;
    // A layer already fused stays as it is.
    expect(fuseQkvProjections(cpu, config, model.weights, 'f32').layers[0]).toBe(layer);
    const apart = { ...model.weights, layers: [{ ...layer, qkv: undefined }] };
    expect(fuseQkvProjections(cpu, { ...config, qkNorm: true }, apart, 'f32')).toBe(apart);
  });
});
