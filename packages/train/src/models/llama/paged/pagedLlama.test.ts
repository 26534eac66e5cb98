import { type Backend, createCpuBackend, InvalidArgumentError, RayoError, type Tensor } from '@rayo/core';
import {
  maxAbsDiff,
  removeTinyLlamas,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamaModel } from '../model.js';
import type { PagedLlama } from './pagedLlama.js';
import type { BlockTable } from './pagePool.js';

afterAll(removeTinyLlamas);

/** Far below what a wrong row, page, position or head changes; f32 sums in another order stay within it. */
const TOLERANCE = 2e-5;
const VOCAB = 97;

function argmax(row: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/** Prompts of several lengths: one token, within a prefill chunk, across chunks and pages. */
const PROMPTS = [[5, 17, 3], [8], [40, 2, 77, 13, 61, 9, 30, 1, 55, 4, 22, 90], [70, 71, 72, 73, 74, 75, 76]];
const NEW_TOKENS = 6;

describe('PagedLlama', () => {
  let backend: Backend;
  let reference: LlamaModel;
  let model: LlamaModel;
  /** The same weights with q, k and v fused into one product per layer (the default). */
  let fused: LlamaModel;
  /** Each prompt's greedy tokens and the logits of each, decoded alone by the reference copy. */
  const alone: { tokens: number[]; logits: Float32Array[] }[] = [];

  beforeAll(async () => {
    backend = createCpuBackend();
    const config = tinyLlamaConfig({ num_key_value_heads: 2 });
    const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 21));
    reference = await LlamaModel.load(backend, dir, { maxSequence: 32 });
    // Prompts cross prefill chunks of 5.
    model = await LlamaModel.load(backend, dir, { maxSequence: 32, prefillChunk: 5, fuseQkv: false });
    fused = await LlamaModel.load(backend, dir, { maxSequence: 32, prefillChunk: 5 });
    for (const prompt of PROMPTS) {
      reference.reset();
      const rows: Float32Array[] = [];
      using first = reference.prefill(prompt);
      const all = (await first.read()) as Float32Array;
      rows.push(all.slice(all.length - VOCAB));
      for (let i = 1; i < NEW_TOKENS; i++) {
        using next = reference.decode(argmax(rows.at(-1)!));
        rows.push((await next.read()) as Float32Array);
      }
      alone.push({ tokens: rows.map(argmax), logits: rows });
    }
  });

  afterAll(() => {
    model?.dispose();
    fused?.dispose();
    reference?.dispose();
    backend?.dispose();
  });

  /**
   * Runs the prompts through `paged`, the i-th joining at step `joins[i]`
   * (its prompt runs then), each decoding in one batched step with the
   * others running; returns every sequence's logits per token.
   */
  async function decodeTogether(paged: PagedLlama, joins: readonly number[], greedy = false) {
    const runs = PROMPTS.map(() => ({
      table: undefined as BlockTable | undefined,
      tokens: [] as number[],
      logits: [] as Float32Array[],
    }));
    for (let step = 0; runs.some((r) => r.tokens.length < NEW_TOKENS); step++) {
      const decoding = runs.filter((r) => r.table && r.tokens.length < NEW_TOKENS);
      if (decoding.length > 0) {
        for (const r of decoding) {
          const rows = PROMPTS[runs.indexOf(r)]!.length + r.tokens.length;
          expect(paged.pool.grow(r.table!, rows)).toBe(true);
        }
        const rows = decoding.map((r) => {
          const prompt = PROMPTS[runs.indexOf(r)]!;
          return { table: r.table!, token: r.tokens.at(-1)!, position: prompt.length + r.tokens.length - 1 };
        });
        if (greedy) {
          const chosen = await paged.decodeGreedy(rows);
          for (const [b, r] of decoding.entries()) r.tokens.push(chosen[b]!);
        } else {
          const logits = await paged.decode(rows);
          decoding.forEach((r, b) => {
            const row = logits.slice(b * VOCAB, (b + 1) * VOCAB);
            r.logits.push(row);
            r.tokens.push(argmax(row));
          });
        }
      }
      for (const [i, r] of runs.entries()) {
        if (joins[i] !== step) continue;
        const prompt = PROMPTS[i]!;
        r.table = paged.pool.table();
        expect(paged.pool.grow(r.table, prompt.length)).toBe(true);
        const row = (await paged.prefill(r.table, prompt, 0, true))!;
        r.logits.push(row);
        r.tokens.push(argmax(row));
      }
      // A sequence done gives its pages back at once, for the next to take.
      for (const r of runs) if (r.table && r.tokens.length === NEW_TOKENS) paged.pool.release(r.table);
    }
    return runs;
  }

  for (const [qkv, replay] of [
    ['apart', true],
    ['apart', false],
    ['fused', true],
    ['fused', false],
  ] as const) {
    it(`decodes sequences joining and leaving at different steps as each alone (q, k, v ${qkv}, ${replay ? 'replayed' : 'eager'} steps)`, async () => {
      // 3-row pages: rows of a sequence spread over pages freed by others.
      const loaded = qkv === 'fused' ? fused : model;
      using paged = loaded.pagedCache({ pages: 16, pageSize: 3, maxBatch: 4, replay });
      const runs = await decodeTogether(paged, [0, 1, 1, 4]);
      runs.forEach((r, i) => {
        expect(r.tokens).toEqual(alone[i]!.tokens);
        for (const [t, row] of r.logits.entries())
          expect(maxAbsDiff(row, alone[i]!.logits[t]!)).toBeLessThan(TOLERANCE);
      });
      expect(paged.pool.usage()).toMatchObject({ pagesInUse: 0, rowsInUse: 0 });
    });
  }

  it('picks the greedy tokens on the device, the same as from the logits', async () => {
    using paged = model.pagedCache({ pages: 16, pageSize: 3, maxBatch: 4 });
    const runs = await decodeTogether(paged, [0, 2, 1, 1], true);
    for (const [i, r] of runs.entries()) expect(r.tokens).toEqual(alone[i]!.tokens);
  });

  it('refuses rows its table does not hold, too wide a step, and a prompt resumed out of order', async () => {
    using paged = model.pagedCache({ pages: 8, pageSize: 4, maxBatch: 2 });
    const a = paged.pool.table();
    const b = paged.pool.table();
    paged.pool.grow(a, 8);
    paged.pool.grow(b, 4);
    await expect(paged.prefill(a, [1, 2, 3, 4, 5, 6, 7, 8, 9], 0, false)).rejects.toThrow(
      /at least 9 rows reserved/,
    );
    await expect(paged.prefill(a, [1, 2, 3], 0, false)).resolves.toBeUndefined();
    // b's prompt ran last: a's cannot resume.
    await paged.prefill(b, [4, 5], 0, false);
    await expect(paged.prefill(a, [4], 3, false)).rejects.toThrow(RayoError);
    await expect(paged.decode([{ table: b, token: VOCAB, position: 2 }])).rejects.toThrow(
      InvalidArgumentError,
    );
    const row = { table: b, token: 1, position: 2 };
    await expect(paged.decode([row, row, row])).rejects.toThrow(/at most 2 \(maxBatch\)/);
    expect(() => model.pagedCache({ pages: 8, maxBatch: 257 })).toThrow(/\[1, 256\]/);
  });

  it('records its step into any runner, over inputs written for new rows, as decode runs it', async () => {
    using paged = model.pagedCache({ pages: 8, pageSize: 4, maxBatch: 2 });
    const tables = PROMPTS.slice(0, 2).map((prompt) => {
      const t = paged.pool.table();
      paged.pool.grow(t, prompt.length + 2);
      return t;
    });
    const first: number[] = [];
    for (const [i, t] of tables.entries())
      first.push(argmax((await paged.prefill(t, PROMPTS[i]!, 0, true))!));
    const rowsAt = (extra: number, tokens: readonly number[]) =>
      tables.map((table, i) => ({ table, token: tokens[i]!, position: PROMPTS[i]!.length + extra }));
    const batch = backend.batch();
    const made: Tensor[] = [];
    try {
      const { logits } = paged.recordDecodeStep(batch, made, paged.writeDecodeInputs(rowsAt(0, first)));
      await batch.submit();
      const got = (await logits.read()) as Float32Array;
      const next = [0, 1].map((b) => argmax(got.subarray(b * VOCAB, (b + 1) * VOCAB)));
      expect(next).toEqual([alone[0]!.tokens[1], alone[1]!.tokens[1]]);
      // Replayed for the next rows: the recorded step reads what was written last.
      paged.writeDecodeInputs(rowsAt(1, next));
      await batch.submit();
      const again = (await logits.read()) as Float32Array;
      for (const b of [0, 1])
        expect(maxAbsDiff(again.subarray(b * VOCAB, (b + 1) * VOCAB), alone[b]!.logits[2]!)).toBeLessThan(
          TOLERANCE,
        );
    } finally {
      batch.dispose();
      for (const t of made) t.dispose();
    }
    using other = model.pagedCache({ pages: 8, pageSize: 4, maxBatch: 2 });
    const table = other.pool.table();
    other.pool.grow(table, 1);
    const foreign = other.writeDecodeInputs([{ table, token: 1, position: 0 }]);
    expect(() => paged.recordDecodeStep(backend, [], foreign)).toThrow(
      expect.objectContaining({ operation: 'PagedLlama.recordDecodeStep', argument: 'inputs' }),
    );
  });
});
