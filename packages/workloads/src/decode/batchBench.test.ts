import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { LlamaModel } from '@rayo/train';
import { temporaryDirectories } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { type BatchRun, batchBench, batchFailed, batchSummary, parseBatchArgs } from './batchBench.js';
import { DECODE_CONFIGS } from './decodeBench.js';
import { writeSeededLlama } from './seededLlama.js';

const tempDir = temporaryDirectories('rayo-batch-');

/** The settings of the tiny f32 model at batch sizes `batches` and prompts of `prompt` tokens. */
const tinyArgs = (batches: string, prompt: number, ...more: string[]) =>
  parseBatchArgs([
    '--config',
    'llama-tiny',
    '--dtype',
    'f32',
    '--batches',
    batches,
    '--prompt',
    `${prompt}`,
    ...more,
  ]);

describe('batch-bench', () => {
  it('decodes every stream to its length on the cpu backend, through the engine and the step alone alike', async () => {
    const report = await batchBench({
      ...tinyArgs('1,3', 5, '--profile'),
      backend: 'cpu',
      newTokens: 7,
      hostSteps: 2,
      weights: await tempDir(),
      out: await tempDir(),
    });
    const [one, three] = report.rayo.map((r) => ({ engine: r.engine as BatchRun, step: r.step as BatchRun }));
    expect(three!.engine.tokens).toHaveLength(3);
    for (const tokens of three!.engine.tokens) expect(tokens).toHaveLength(7);
    // Stream 0 has the same prompt in both runs: greedy f32 gives it the same tokens alone and beside two others.
    expect(three!.engine.tokens[0]).toEqual(one!.engine.tokens[0]);
    // Without the engine, the same step gives the same tokens.
    expect(three!.step.tokens).toEqual(three!.engine.tokens);
    expect(three!.engine.decodeSteps).toBe(6);
    expect(three!.step.decodeSteps).toBe(6);
    expect(three!.step.tokensPerSecond).toBeGreaterThan(0);
    expect(batchFailed(report)).toBe(false);
    const summary = batchSummary(report);
    expect(summary).toMatch(/\n\| 3 \| \d+ \| [\d.]+ \| [\d.]+ \| \d+ \| [\d.]+ \| — \| — \| — \| — \|/);
    // The cpu backend has no device clock: the step's calls are listed, untimed.
    const detail = report.rayo[1]!.detail!;
    const kernels = detail.profile!.groups.map((g) => g.kernel);
    expect(kernels).toEqual(
      expect.arrayContaining(['pagedAttention', 'ropePagedKvWrite', 'matmul', 'argmax']),
    );
    const layers = DECODE_CONFIGS['llama-tiny']!.num_hidden_layers as number;
    // maxBatch is the largest size, 3: its step has 3 rows, every layer's attention one call over them.
    const attention = detail.profile!.groups.find((g) => g.kernel === 'pagedAttention')!;
    expect(attention.calls).toBe(layers);
    expect(attention.shapes).toMatch(/^\[3, /);
    expect(detail.phases!.steps).toBe(2);
    expect(detail.phases!.readBytes).toBe(3 * 4);
    expect(summary).toContain('3 streams: one replayed step');
    expect(summary).toMatch(/\npagedAttention +\[3, /);
    expect(summary).toMatch(/\nmatmul +\[3, /);
  }, 60_000);

  it('runs the step alone without the engine', async () => {
    const report = await batchBench({
      ...tinyArgs('2', 3, '--paths', 'step'),
      backend: 'cpu',
      newTokens: 3,
      hostSteps: 1,
      weights: await tempDir(),
      out: await tempDir(),
    });
    const [two] = report.rayo;
    expect(two!.engine).toBeUndefined();
    expect((two!.step as BatchRun).tokens.map((t) => t.length)).toEqual([3, 3]);
    expect(two!.detail!.profile!.calls).toBeGreaterThan(0);
  }, 60_000);

  it('refuses bad arguments, naming them', () => {
    expect(() => parseBatchArgs(['--batches', '1,0'])).toThrow(
      /--batches must be an integer in \[1, 256\], got 0/,
    );
    expect(() => parseBatchArgs(['--dtype', 'f8'])).toThrow(/--dtype must be f32, f16 or bf16/);
    expect(() => parseBatchArgs(['--baseline', 'jax'])).toThrow(/--baseline/);
    expect(() => parseBatchArgs(['--config', 'nope'])).toThrow(/unknown --config 'nope'/);
    expect(() => parseBatchArgs(['--paths', 'engine,gpu'])).toThrow(/--paths takes engine, step .*got gpu/);
    expect(() => parseBatchArgs(['--paths', 'engine', '--profile'])).toThrow(/--paths must include step/);
    expect(parseBatchArgs([])).toMatchObject({
      config: 'llama-3.2-1b',
      dtype: 'bf16',
      kvDtype: 'bf16',
      batches: [1, 4, 16, 64],
      paths: ['engine', 'step'],
      profile: false,
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
