import { createCpuBackend } from '@rayo/core';
import {
  collectTokens,
  expectReferenceGreedy,
  FAMILY_CONFIGS,
  ModelScope,
  maxAbsDiff,
  maxRowDiff,
  mistral01Config,
  modelTestBackends,
  referenceLogits,
  removeTinyLlamas,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { LlamaModel } from './model.js';

/**
 * Tolerance on logits against the f64 reference (as model.test.ts: f32
 * rounding gives errors near 1e-6; a missing bias, head norm or scaled
 * frequency changes logits by 0.01 and more).
 */
const TOLERANCE = 5e-5;
const PROMPT = [5, 17, 3, 96, 0, 42, 8, 71, 30];
const CONTINUATION = [61, 2, 77, 13];
const GREEDY = 6;
/** Lavapipe compiles each pipeline on first use, slowly on a loaded machine. */
const TIMEOUT = 300_000;

afterAll(removeTinyLlamas);

const backends = await modelTestBackends();

describe.each(backends)('model families on %s', (_name, create) => {
  const scope = new ModelScope(create);
  afterAll(scope.dispose);

  FAMILY_CONFIGS.forEach(([label, makeConfig], index) => {
    it(
      `${label}: prefill, fused and unfused decode steps and greedy generation match the f64 reference`,
      async () => {
        const backend = await scope.backend();
        const config = makeConfig();
        const weights = tinyLlamaWeights(config, 300 + index);
        const dir = await writeTinyLlama(config, weights, { shards: 1 + (index % 3) });
        const model = await LlamaModel.load(backend, dir, { maxSequence: 32 });
        const unfused = new LlamaModel(backend, model.config, model.weights, {
          fused: false,
          maxSequence: 32,
        });
        scope.keep(model, unfused);
        const vocab = config.vocab_size as number;
        const want = referenceLogits(config, weights, [...PROMPT, ...CONTINUATION]);

        using prefill = model.prefill(PROMPT);
        const got = await prefill.read();
        expect(maxRowDiff(got, want.slice(0, PROMPT.length), vocab)).toBeLessThan(TOLERANCE);
        unfused.prefill(PROMPT).dispose();
        for (const [i, token] of CONTINUATION.entries()) {
          for (const m of [model, unfused]) {
            using logits = m.decode(token);
            expect(maxAbsDiff(await logits.read(), want[PROMPT.length + i]!)).toBeLessThan(TOLERANCE);
          }
        }

        // generate: the prefill, then replayed steps (greedy ones chained on the device where argmax runs).
        await expectReferenceGreedy(model, config, weights, PROMPT, GREEDY, TOLERANCE);
        // Sampling replays the recorded step with the host choosing: the same tokens as eager steps.
        const sampled = async (replay: boolean) => {
          const m = new LlamaModel(backend, model.config, model.weights, { replay, maxSequence: 32 });
          scope.keep(m);
          return collectTokens(m.generate(PROMPT, { maxNewTokens: 5, temperature: 1, seed: 3 }));
        };
        expect(await sampled(true)).toEqual(await sampled(false));
      },
      TIMEOUT,
    );
  });

  it(
    'refuses a Mistral v0.1 context past its sliding window before reading a weight',
    async () => {
      const backend = await scope.backend();
      const config = mistral01Config();
      const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 1));
      // max_position_embeddings (64) is the default context: past the window of 48.
      await expect(LlamaModel.load(backend, dir)).rejects.toMatchObject({
        argument: 'sliding_window',
        message: expect.stringMatching(/maxSequence <= sliding_window \(48\).*maxSequence 64/),
      });
      const model = await LlamaModel.load(backend, dir, { maxSequence: 48 });
      scope.keep(model);
      expect(model.maxSequence).toBe(48);
      expect(() => new LlamaModel(backend, model.config, model.weights, { maxSequence: 49 })).toThrow(
        /sliding_window/,
      );
    },
    TIMEOUT,
  );
});

describe('quantized projections of a family with biases and head norms', () => {
  it('decode steps equal the prefill of the same tokens, near the dense reference', async () => {
    const backend = createCpuBackend();
    try {
      const config = FAMILY_CONFIGS.find(([label]) => label === 'Qwen3 with attention_bias')![1]();
      const weights = tinyLlamaWeights(config, 77);
      const dir = await writeTinyLlama(config, weights);
      using model = await LlamaModel.load(backend, dir, { weightFormat: 'q8', maxSequence: 32 });
      const vocab = config.vocab_size as number;
      model.prefill(PROMPT).dispose();
      using step = model.decode(CONTINUATION[0]!);
      const got = (await step.read()) as Float32Array;
      model.reset();
      using all = model.prefill([...PROMPT, CONTINUATION[0]!]);
      const prefilled = ((await all.read()) as Float32Array).subarray(PROMPT.length * vocab);
      expect(maxAbsDiff(got, prefilled)).toBeLessThan(1e-3);
      // int8 rows lose about 0.4% of each weight: the logits stay within a few hundredths of the dense ones.
      const want = referenceLogits(config, weights, [...PROMPT, CONTINUATION[0]!]).at(-1)!;
      const range = Math.max(...want) - Math.min(...want);
      expect(maxAbsDiff(got, want)).toBeLessThan(0.02 * range);
    } finally {
      backend.dispose();
    }
  });
});
