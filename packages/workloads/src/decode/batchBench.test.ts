import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { LlamaModel } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';
import { type BatchRun, batchBench, batchSummary, parseBatchArgs } from './batchBench.js';
import { DECODE_CONFIGS } from './decodeBench.js';
import { writeSeededLlama } from './seededLlama.js';

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'rayo-batch-'));
  dirs.push(dir);
  return dir;
}
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('batch-bench', () => {
  it('decodes every stream to its length on the cpu backend, each as it decodes with fewer beside it', async () => {
    const report = await batchBench({
      ...parseBatchArgs(['--config', 'llama-tiny', '--dtype', 'f32', '--batches', '1,3', '--prompt', '5']),
      backend: 'cpu',
      newTokens: 7,
      weights: await tempDir(),
      out: await tempDir(),
    });
    const [one, three] = report.rayo as BatchRun[];
    expect(three!.tokens).toHaveLength(3);
    for (const tokens of three!.tokens) expect(tokens).toHaveLength(7);
    // Stream 0 has the same prompt in both runs: greedy f32 gives it the same tokens alone and beside two others.
    expect(three!.tokens[0]).toEqual(one!.tokens[0]);
    expect(three!.decodeSteps).toBe(6);
    expect(three!.tokensPerSecond).toBeGreaterThan(0);
    expect(batchSummary(report)).toMatch(/\n\| 3 \| \d+ \| [\d.]+ \| [\d.]+ \| — \| — \|/);
  }, 60_000);

  it('refuses bad arguments, naming them', () => {
    expect(() => parseBatchArgs(['--batches', '1,0'])).toThrow(
      /--batches must be an integer in \[1, 256\], got 0/,
    );
    expect(() => parseBatchArgs(['--dtype', 'f8'])).toThrow(/--dtype must be f32, f16 or bf16/);
    expect(() => parseBatchArgs(['--baseline', 'jax'])).toThrow(/--baseline/);
    expect(() => parseBatchArgs(['--config', 'nope'])).toThrow(/unknown --config 'nope'/);
    expect(parseBatchArgs([])).toMatchObject({
      config: 'llama-3.2-1b',
      dtype: 'bf16',
      kvDtype: 'bf16',
      batches: [1, 4, 16, 64],
    });
  });
});

describe('the batched step on the emulated cuda device', () => {
  it("gives the cpu backend's tokens and logits (bf16 weights and pages, three sequences)", async () => {
    const dir = await tempDir();
    await writeSeededLlama(dir, { ...DECODE_CONFIGS['llama-tiny']!, num_hidden_layers: 1 }, 3, 'bf16');
    const { gpu, cpu, dispose } = createEmulatedGpu();
    const prompts = [[1, 2, 3], [7, 8, 9, 10, 11], [5]];
    const runs: { tokens: number[]; logits: Float32Array; greedy: Int32Array }[] = [];
    try {
      for (const backend of [cpu, gpu]) {
        using model = await LlamaModel.load(backend, dir, {
          maxSequence: 24,
          kvCacheDtype: 'bf16',
        });
        using paged = model.pagedCache({ pages: 8, pageSize: 4, maxBatch: 3 });
        const tables = prompts.map(() => paged.pool.table());
        const tokens: number[] = [];
        for (const [i, prompt] of prompts.entries()) {
          paged.pool.grow(tables[i]!, prompt.length + 1);
          const logits = (await paged.prefill(tables[i]!, prompt, 0, true))!;
          tokens.push(logits.indexOf(Math.max(...logits)));
        }
        const rows = prompts.map((p, i) => ({ table: tables[i]!, token: tokens[i]!, position: p.length }));
        const logits = (await paged.decode(rows)).slice();
        runs.push({ tokens, logits, greedy: await paged.decodeGreedy(rows) });
      }
    } finally {
      dispose();
    }
    const [want, got] = runs;
    expect(got!.tokens).toEqual(want!.tokens);
    expect(Array.from(got!.greedy)).toEqual(Array.from(want!.greedy));
    // bf16 rounding of the batch's products and pages, in another order: far below a wrong row or page.
    let worst = 0;
    for (let i = 0; i < want!.logits.length; i++)
      worst = Math.max(worst, Math.abs(got!.logits[i]! - want!.logits[i]!));
    expect(worst).toBeLessThan(0.02);
  }, 120_000);
});
