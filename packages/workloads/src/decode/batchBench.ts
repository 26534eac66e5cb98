import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { findPackageScript, runPythonScript } from '@rayo/bench';
import type { Backend } from '@rayo/core';
import { BatchedEngine, type BatchedSequence } from '@rayo/server';
import { LlamaModel, type LlamaWeightDType, Rng } from '@rayo/train';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';
import { DECODE_CONFIGS } from './decodeBench.js';
import { writeSeededLlama } from './seededLlama.js';

/**
 * The batched decode benchmark: B streams decoded together over one copy of
 * a Llama-shaped model with seeded weights (`BatchedEngine` over a paged KV
 * cache), for each B of a list, against transformers' batched `generate`
 * (a static batch, left padding, greedy) on the same checkpoint. Reports
 * the aggregate decode tokens per second and the time per output token.
 */

export interface BatchBenchSettings {
  readonly config: string;
  readonly dtype: LlamaWeightDType;
  readonly kvDtype: LlamaWeightDType;
  readonly backend: string;
  readonly batches: readonly number[];
  readonly promptTokens: number;
  readonly newTokens: number;
  readonly pageSize: number;
  readonly seed: number;
  readonly baseline: 'torch' | 'none';
  readonly torchDevice: string;
  readonly weights: string;
  readonly out: string;
}

/** One batch size's run. */
export interface BatchRun {
  readonly batch: number;
  /** From admission until every stream has its first token (the prompts, one chunk per step). */
  readonly prefillMs: number;
  readonly decodeSteps: number;
  readonly decodeMs: number;
  /** batch · decodeSteps / decodeMs. */
  readonly tokensPerSecond: number;
  /** A step gives every stream one token: the median and 90th percentile step. */
  readonly p50MsPerToken: number;
  readonly p90MsPerToken: number;
  readonly tokens: readonly (readonly number[])[];
}

export interface BatchBenchReport {
  readonly settings: BatchBenchSettings;
  readonly rayo: readonly (BatchRun | { readonly batch: number; readonly error: string })[];
  readonly torch?: unknown;
}

const TORCH_SCRIPT = 'torch_batch_baseline.py';

function log(line: string): void {
  process.stderr.write(`batch-bench: ${line}\n`);
}

function quantile(sorted: readonly number[], q: number): number {
  const pos = q * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** The prompts of every stream: seeded ids, one list per stream of the largest batch. */
export function batchPrompts(vocab: number, count: number, length: number, seed: number): number[][] {
  const rng = new Rng(seed + 1);
  return Array.from({ length: count }, () => Array.from({ length }, () => rng.int(vocab)));
}

/** Runs `prompts` to `newTokens` tokens each through `engine`, timing every step after the prompts. */
async function runBatch(
  engine: BatchedEngine,
  prompts: readonly number[][],
  newTokens: number,
): Promise<BatchRun> {
  const sequences: BatchedSequence[] = prompts.map((promptIds) => {
    const s = engine.admit({ promptIds, maxNewTokens: newTokens, temperature: 0, seed: 0, stopTokenIds: [] });
    if (!s) throw new Error(`the engine did not admit ${prompts.length} streams`);
    return s;
  });
  const tokens = prompts.map(() => [] as number[]);
  /** Steps `indices`' sequences once, taking their tokens. */
  const step = async (indices: readonly number[]) => {
    const results = await engine.step(indices.map((i) => sequences[i]!));
    results.forEach((r, k) => {
      if ('token' in r) tokens[indices[k]!]!.push(r.token);
    });
  };
  const all = prompts.map((_, i) => i);
  try {
    // The prompts, one per step; a stream with its first token waits, so that all decode the same steps.
    const start = performance.now();
    for (let left = all; left.length > 0; left = all.filter((i) => tokens[i]!.length === 0)) await step(left);
    const prefillMs = performance.now() - start;
    const steps: number[] = [];
    while (tokens[0]!.length < newTokens) {
      const t0 = performance.now();
      await step(all);
      steps.push(performance.now() - t0);
    }
    const decodeMs = steps.reduce((a, b) => a + b, 0);
    const sorted = [...steps].sort((a, b) => a - b);
    const decoded = tokens.reduce((n, t) => n + t.length - 1, 0);
    return {
      batch: prompts.length,
      prefillMs,
      decodeSteps: steps.length,
      decodeMs,
      tokensPerSecond: decoded / (decodeMs / 1000),
      p50MsPerToken: quantile(sorted, 0.5),
      p90MsPerToken: quantile(sorted, 0.9),
      tokens,
    };
  } finally {
    for (const s of sequences) engine.release(s);
  }
}

async function runRayo(
  s: BatchBenchSettings,
  dir: string,
  prompts: readonly number[][],
): Promise<BatchBenchReport['rayo']> {
  const backend: Backend = await createBackendFromEnvironment(s.backend);
  const rows = s.promptTokens + s.newTokens;
  const maxBatch = Math.max(...s.batches);
  const model = await LlamaModel.load(backend, dir, {
    maxSequence: rows,
    weightDtype: s.dtype,
    kvCacheDtype: s.kvDtype,
  });
  // Pages for every stream at full length: no stream waits or is preempted while timed.
  const paged = model.pagedCache({
    pages: maxBatch * Math.ceil(rows / s.pageSize),
    pageSize: s.pageSize,
    maxBatch,
  });
  const engine = new BatchedEngine(paged, { prefillTokens: s.promptTokens });
  const runs: BatchBenchReport['rayo'][number][] = [];
  try {
    for (const batch of s.batches) {
      log(`rayo ${s.backend}, batch ${batch}`);
      try {
        // An untimed run first, as the baseline's: it records the size's step.
        await runBatch(engine, prompts.slice(0, batch), s.newTokens);
        runs.push(await runBatch(engine, prompts.slice(0, batch), s.newTokens));
      } catch (error) {
        runs.push({ batch, error: error instanceof Error ? error.message : String(error) });
      }
    }
    return runs;
  } finally {
    paged.dispose();
    model.dispose();
    backend.dispose();
  }
}

async function runTorch(s: BatchBenchSettings, dir: string, prompts: readonly number[][]): Promise<unknown> {
  const script = findPackageScript(TORCH_SCRIPT, import.meta.url);
  if (!script) return { status: 'unavailable', reason: `the script ${TORCH_SCRIPT} was not found` };
  const request = join(s.out, 'torch-batch-request.json');
  const outFile = join(s.out, 'torch-batch.json');
  await writeFile(
    request,
    `${JSON.stringify({ schema: 'rayo-batch-request/1', dtype: s.dtype, batches: s.batches, newTokens: s.newTokens, prompts })}\n`,
  );
  return runPythonScript({
    script,
    args: ['--model', dir, '--request', request, '--out', outFile, '--device', s.torchDevice],
    outFile,
    label: 'the batch baseline',
    onOutput: (text) => process.stderr.write(text),
  });
}

export async function batchBench(s: BatchBenchSettings): Promise<BatchBenchReport> {
  const hfConfig = DECODE_CONFIGS[s.config]!;
  const dir = resolve(s.weights, s.dtype === 'f32' ? s.config : `${s.config}-${s.dtype}`);
  await mkdir(dir, { recursive: true });
  await mkdir(s.out, { recursive: true });
  log(`weights (${s.dtype}): ${dir}`);
  await writeSeededLlama(dir, hfConfig, s.seed, s.dtype);
  const prompts = batchPrompts(hfConfig.vocab_size as number, Math.max(...s.batches), s.promptTokens, s.seed);
  const rayo = await runRayo(s, dir, prompts);
  const torch = s.baseline === 'torch' ? await runTorch(s, dir, prompts) : undefined;
  const report: BatchBenchReport = { settings: s, rayo, ...(torch ? { torch } : {}) };
  await writeFile(join(s.out, 'batch-bench.json'), `${JSON.stringify(report, null, 2)}\n`);
  return report;
}

/** The report as a table: tokens per second and ms per output token, rayo beside transformers. */
export function batchSummary(report: BatchBenchReport): string {
  const torch = report.torch as
    | { status: string; output?: { results?: Record<string, Partial<BatchRun> & { error?: string }> } }
    | undefined;
  const lines = [
    `batched decode, ${report.settings.config} ${report.settings.dtype}, prompt ${report.settings.promptTokens}, ${report.settings.newTokens} new tokens`,
    '| streams | rayo tok/s | rayo p50 ms/token | rayo p90 | transformers tok/s | transformers p50 ms/token |',
    '| --- | --- | --- | --- | --- | --- |',
  ];
  const fmt = (v: number | undefined | null, digits: number) =>
    v === undefined || v === null ? '—' : v.toFixed(digits);
  for (const run of report.rayo) {
    const base = torch?.output?.results?.[String(run.batch)];
    const ours =
      'error' in run
        ? [`error: ${run.error}`, '', '']
        : [fmt(run.tokensPerSecond, 0), fmt(run.p50MsPerToken, 3), fmt(run.p90MsPerToken, 3)];
    const theirs = base?.error
      ? [`error: ${base.error}`, '']
      : [fmt(base?.tokensPerSecond, 0), fmt(base?.p50MsPerToken, 3)];
    lines.push(`| ${run.batch} | ${[...ours, ...theirs].join(' | ')} |`);
  }
  if (torch && torch.status !== 'ok') lines.push(`transformers: ${JSON.stringify(torch)}`);
  return `${lines.join('\n')}\n`;
}

export const BATCH_USAGE = `Usage: batch-bench [options]

Decodes B streams at once over one copy of a Llama-shaped model with seeded
weights (rayo's batched engine, paged KV cache) for each B, and with
--baseline torch the same prompts through transformers' batched generate
(static batch, left padding, greedy); reports aggregate decode tokens/s and
the median time per output token.

  --config NAME     ${Object.keys(DECODE_CONFIGS).join(', ')} (default llama-3.2-1b)
  --dtype D         f32, f16 or bf16: weights, in rayo and transformers (default bf16)
  --kv-dtype D      the KV cache's dtype (default: --dtype)
  --backend NAME    the rayo backend (default cuda)
  --batches LIST    stream counts (default 1,4,16,64)
  --prompt N        prompt tokens per stream (default 128)
  --new N           tokens per stream (default 128)
  --page-size N     rows of a KV cache page (default 16)
  --baseline NAME   torch or none (default none)
  --torch-device D  the PyTorch device (default cuda; cpu only checks the script)
  --seed N          weights and prompts (default 0)
  --weights DIR     where the checkpoint is written once and reused (default decode-weights)
  --out DIR         report folder (default batch-results)`;

export function parseBatchArgs(argv: readonly string[]): BatchBenchSettings {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      config: { type: 'string', default: 'llama-3.2-1b' },
      dtype: { type: 'string', default: 'bf16' },
      'kv-dtype': { type: 'string' },
      backend: { type: 'string', default: 'cuda' },
      batches: { type: 'string', default: '1,4,16,64' },
      prompt: { type: 'string', default: '128' },
      new: { type: 'string', default: '128' },
      'page-size': { type: 'string', default: '16' },
      baseline: { type: 'string', default: 'none' },
      'torch-device': { type: 'string', default: 'cuda' },
      seed: { type: 'string', default: '0' },
      weights: { type: 'string', default: 'decode-weights' },
      out: { type: 'string', default: 'batch-results' },
    },
  });
  const int = (name: string, text: string, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const v = Number(text);
    if (!Number.isInteger(v) || v < min || v > max)
      throw new Error(`--${name} must be an integer in [${min}, ${max}], got ${text}`);
    return v;
  };
  const dtype = (name: string, text: string): LlamaWeightDType => {
    if (text !== 'f32' && text !== 'f16' && text !== 'bf16')
      throw new Error(`--${name} must be f32, f16 or bf16, got ${text}`);
    return text;
  };
  if (!DECODE_CONFIGS[values.config])
    throw new Error(`unknown --config '${values.config}' (known: ${Object.keys(DECODE_CONFIGS).join(', ')})`);
  if (values.baseline !== 'torch' && values.baseline !== 'none')
    throw new Error(`--baseline must be torch or none, got ${values.baseline}`);
  const weightDtype = dtype('dtype', values.dtype);
  return {
    config: values.config,
    dtype: weightDtype,
    kvDtype: values['kv-dtype'] === undefined ? weightDtype : dtype('kv-dtype', values['kv-dtype']),
    backend: values.backend,
    batches: values.batches.split(',').map((b) => int('batches', b, 1, 256)),
    promptTokens: int('prompt', values.prompt, 1),
    newTokens: int('new', values.new, 2),
    pageSize: int('page-size', values['page-size'], 1),
    seed: int('seed', values.seed, 0),
    baseline: values.baseline,
    torchDevice: values['torch-device'],
    weights: values.weights,
    out: values.out,
  };
}
