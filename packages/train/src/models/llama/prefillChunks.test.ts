import { type Backend, createCpuBackend, type Tensor } from '@rayo/core';
import {
  collectTokens,
  maxAbsDiff,
  maxRowDiff,
  modelTestBackends,
  referenceLogits,
  removeTinyLlamas,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { LlamaModel } from './model.js';

// A prompt longer than `prefillChunk` runs chunk by chunk, each chunk
// attending over the cache the earlier ones wrote.

/** As in model.test.ts: far below what a wrong position or causal bound changes. */
const TOLERANCE = 5e-5;
const PROMPT = [5, 17, 3, 96, 0, 42, 8, 61, 2, 77, 13, 40, 9, 11, 30, 1, 64];
/** Lavapipe compiles each pipeline on first use. */
const TIMEOUT = 120_000;

afterAll(removeTinyLlamas);

const backends = await modelTestBackends();

async function checkChunks(backend: Backend): Promise<void> {
  // Four query heads on two kv heads: the chunks attend with grouped queries.
  const config = tinyLlamaConfig();
  const weights = tinyLlamaWeights(config, 2024);
  const dir = await writeTinyLlama(config, weights);
  const want = referenceLogits(config, weights, PROMPT);
  const vocab = config.vocab_size as number;
  using whole = await LlamaModel.load(backend, dir);
  using wholeLogits = whole.prefill(PROMPT);
  const one = await wholeLogits.read();
  const tokens = await collectTokens(whole.generate(PROMPT, { maxNewTokens: 4 }));
  for (const prefillChunk of [3, 5, 7]) {
    using model = await LlamaModel.load(backend, dir, { prefillChunk });
    using logits = model.prefill(PROMPT);
    expect(logits.shape).toEqual([PROMPT.length, vocab]);
    expect(model.position).toBe(PROMPT.length);
    const got = await logits.read();
    expect(maxAbsDiff(got, one)).toBeLessThan(TOLERANCE);
    expect(maxRowDiff(got, want, vocab)).toBeLessThan(TOLERANCE);
    expect(await collectTokens(model.generate(PROMPT, { maxNewTokens: 4 }))).toEqual(tokens);
    // The last rows alone: one row, rows across a chunk boundary, every row.
    for (const lastRows of [1, prefillChunk + 2, PROMPT.length]) {
      model.reset();
      using tail = model.prefill(PROMPT, { lastRows });
      expect(tail.shape).toEqual([lastRows, vocab]);
      expect(model.position).toBe(PROMPT.length);
      const rows = one.subarray((PROMPT.length - lastRows) * vocab);
      expect(maxAbsDiff(await tail.read(), rows)).toBeLessThan(TOLERANCE);
    }
  }
  // One chunk of the whole prompt, its last rows.
  whole.reset();
  using lastThree = whole.prefill(PROMPT, { lastRows: 3 });
  expect(maxAbsDiff(await lastThree.read(), one.subarray((PROMPT.length - 3) * vocab))).toBeLessThan(
    TOLERANCE,
  );
}

describe.each(backends)('chunked prefill on %s', (_name, create) => {
  it(
    'chunks of 3, 5 and 7 tokens give the logits and the generated tokens of one chunk',
    async () => {
      const backend = await create();
      try {
        await checkChunks(backend);
      } finally {
        backend.dispose();
      }
    },
    TIMEOUT,
  );
});

describe('chunked prefill', () => {
  it('needs memory for one chunk whatever the prompt’s length', async () => {
    const config = tinyLlamaConfig();
    const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 3));
    // Memory a prompt's prefill for generation adds above what is live before it (weights, caches).
    const peak = async (promptLength: number, prefillChunk: number) => {
      const cpu = createCpuBackend();
      using model = await LlamaModel.load(cpu, dir, { prefillChunk });
      const before = cpu.memory();
      const prompt = Array.from({ length: promptLength }, (_, i) => (i * 7) % 97);
      await collectTokens(model.generate(prompt, { maxNewTokens: 1 }));
      const after = cpu.memory();
      expect(after.liveBytes).toBe(before.liveBytes);
      return after.peakBytes - before.liveBytes;
    };
    const short = await peak(8, 4);
    expect(await peak(28, 4)).toBeLessThan(1.2 * short);
    // One chunk of the whole prompt needs more: the bound comes from the chunks.
    expect(await peak(28, 32)).toBeGreaterThan(2 * short);
  });

  it('refuses lastRows outside 1 … the number of tokens, naming it', async () => {
    const config = tinyLlamaConfig();
    const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 3));
    const cpu = createCpuBackend();
    using model = await LlamaModel.load(cpu, dir, { prefillChunk: 4 });
    for (const lastRows of [0, 2.5, PROMPT.length + 1]) {
      expect(() => model.prefill(PROMPT, { lastRows })).toThrow(/options\.lastRows/);
      expect(model.position).toBe(0);
    }
  });

  it('refuses a prefillChunk that is not a positive integer', async () => {
    const config = tinyLlamaConfig();
    const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 3));
    const cpu = createCpuBackend();
    for (const prefillChunk of [0, 2.5]) {
      await expect(LlamaModel.load(cpu, dir, { prefillChunk })).rejects.toThrow(/prefillChunk/);
    }
    expect(cpu.memory().liveTensors).toBe(0);
  });

  it('records a chunk into any runner at a given row without moving the position', async () => {
    const config = tinyLlamaConfig();
    const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 3));
    const cpu = createCpuBackend();
    using model = await LlamaModel.load(cpu, dir);
    using whole = model.prefill(PROMPT);
    const want = await whole.read();
    const vocab = config.vocab_size as number;
    model.reset();
    // The first 10 tokens, then the rest at row 10 into a batch: the prompt's logits.
    using head = cpu.upload(Int32Array.from(PROMPT.slice(0, 10)), [10], 'i32');
    using tail = cpu.upload(Int32Array.from(PROMPT.slice(10)), [PROMPT.length - 10], 'i32');
    const made: Tensor[] = [];
    const first = model.recordChunk(cpu, head, 0, made);
    const batch = cpu.batch();
    const last = model.recordChunk(batch, tail, 10, made, true);
    batch.submit();
    expect(model.position).toBe(0);
    expect(first.shape).toEqual([10, vocab]);
    expect(last.shape).toEqual([1, vocab]);
    expect(maxAbsDiff(await first.read(), want.subarray(0, 10 * vocab))).toBeLessThan(TOLERANCE);
    expect(maxAbsDiff(await last.read(), want.subarray((PROMPT.length - 1) * vocab))).toBeLessThan(TOLERANCE);
    for (const t of made) t.dispose();
    expect(() => model.recordChunk(cpu, head, config.max_position_embeddings as number, [])).toThrow(
      /recordChunk: argument 'position'.*expected an integer in \[0, 22\] for 10 tokens, got 32/,
    );
    using floats = cpu.upload(new Float32Array(2), [2]);
    expect(() => model.recordChunk(cpu, floats, 0, [])).toThrow(/argument 'ids'.*got f32 \[2\]/);
  });
});
