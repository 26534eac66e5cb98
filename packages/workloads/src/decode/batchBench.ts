import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { Backend } from '@rayo/core';
import { BatchedEngine } from '@rayo/server';
import { LlamaModel, type LlamaWeightDType, type PagedLlama, Rng } from '@rayo/train';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';
import { batchPlotSvg } from './batchPlot.js';
import { type BatchRun, runEngine, runSteps } from './batchRuns.js';
import { type BatchStepDetail, batchStepDetail } from './batchStepProfile.js';
import { runCheckpointBaseline } from './checkpointBaseline.js';
import { DECODE_CONFIGS, textTable } from './decodeBench.js';
import { writeSeededLlama } from './seededLlama.js';
import { PROFILE_HEADER, profileRows, profileTotals } from './stepProfile.js';

export type { BatchRun } from './batchRuns.js';

/**
 * The batched decode benchmark: B streams decoded together over one copy of
 * a Llama-shaped model with seeded weights (`BatchedEngine` over a paged KV
 * cache), for each B of a list, against transformers' batched `generate`
 * (a static batch, left padding, greedy) on the same checkpoint. Reports
 * the aggregate decode tokens per second and the time per output token,
 * through the engine and through the paged cache's step alone, and where
 * a step's time goes: its kernels on the device and the host around it.
 */

/** The two paths a batch size runs: the server's engine, and `PagedLlama.decodeGreedy` alone. */
export const BATCH_PATHS = ['engine', 'step'] as const;
export type BatchPath = (typeof BATCH_PATHS)[number];

export interface BatchBenchSettings {
  readonly config: string;
  readonly dtype: LlamaWeightDType;
  readonly kvDtype: LlamaWeightDType;
  readonly backend: string;
  readonly batches: readonly number[];
  readonly promptTokens: number;
  readonly newTokens: number;
  readonly pageSize: number;
  readonly paths: readonly BatchPath[];
  /** Time each kernel group of one replayed step per batch size (the step path's rows). */
  readonly profile: boolean;
  readonly profileRepetitions: number;
  /** Replays of the step timed phase by phase on the host. */
  readonly hostSteps: number;
  readonly seed: number;
  readonly baseline: 'torch' | 'none';
  readonly torchDevice: string;
  readonly weights: string;
  readonly out: string;
}

interface RunError {
  readonly error: string;
}

/** One batch size: its engine run, its run of steps alone, and its step taken apart (after the step run). */
export interface BatchResult {
  readonly batch: number;
  readonly engine?: BatchRun | RunError;
  readonly step?: BatchRun | RunError;
  readonly detail?: BatchStepDetail;
}

export interface BatchBenchReport {
  readonly settings: BatchBenchSettings;
  readonly rayo: readonly BatchResult[];
  readonly torch?: unknown;
}

const TORCH_SCRIPT = 'torch_batch_baseline.py';

function log(line: string): void {
  process.stderr.write(`batch-bench: ${line}\n`);
}

/** The prompts of every stream: seeded ids, one list per stream of the largest batch. */
export function batchPrompts(vocab: number, count: number, length: number, seed: number): number[][] {
  const rng = new Rng(seed + 1);
  return Array.from({ length: count }, () => Array.from({ length }, () => rng.int(vocab)));
}

/** A run, or its error as a row of the report. */
async function attempt(run: () => Promise<BatchRun>): Promise<BatchRun | RunError> {
  try {
    // An untimed run first, as the baseline's: it records the size's step.
    await run();
    return await run();
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) };
  }
}

/** Batch size `batch` on each path of `s.paths`; with the step path, the last step taken apart. */
async function runSize(
  s: BatchBenchSettings,
  engine: BatchedEngine,
  paged: PagedLlama,
  prompts: readonly number[][],
): Promise<BatchResult> {
  const batch = prompts.length;
  let detail: BatchStepDetail | undefined;
  const engineRun = s.paths.includes('engine')
    ? await attempt(() => runEngine(engine, prompts, s.newTokens))
    : undefined;
  let warm = false;
  const stepRun = s.paths.includes('step')
    ? await attempt(() =>
        runSteps(paged, prompts, s.newTokens, async (rows) => {
          // Once, after the timed run's last step.
          if (!warm) {
            warm = true;
            return;
          }
          detail = await batchStepDetail(paged, rows, {
            kernels: s.profile,
            repetitions: s.profileRepetitions,
            steps: s.hostSteps,
          });
        }),
      )
    : undefined;
  return {
    batch,
    ...(engineRun ? { engine: engineRun } : {}),
    ...(stepRun ? { step: stepRun } : {}),
    ...(detail ? { detail } : {}),
  };
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
  const runs: BatchResult[] = [];
  try {
    for (const batch of s.batches) {
      log(`rayo ${s.backend}, batch ${batch}${s.profile ? ', profiled' : ''}`);
      runs.push(await runSize(s, engine, paged, prompts.slice(0, batch)));
    }
    return runs;
  } finally {
    paged.dispose();
    model.dispose();
    backend.dispose();
  }
}

async function runTorch(s: BatchBenchSettings, dir: string, prompts: readonly number[][]): Promise<unknown> {
  return runCheckpointBaseline({
    script: TORCH_SCRIPT,
    dir,
    out: s.out,
    name: 'torch-batch',
    request: {
      schema: 'rayo-batch-request/1',
      dtype: s.dtype,
      batches: s.batches,
      newTokens: s.newTokens,
      prompts,
    },
    torchDevice: s.torchDevice,
    label: 'the batch baseline',
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
  await writeFile(join(s.out, 'batch-bench.md'), batchSummary(report));
  await writeFile(join(s.out, 'batch-bench.svg'), batchPlotSvg(report));
  return report;
}

function fmt(v: number | undefined | null, digits: number): string {
  return v === undefined || v === null || !Number.isFinite(v) ? '—' : v.toFixed(digits);
}

/** tok/s, p50 and p90 of a run, or its error. */
function runCells(run: BatchRun | RunError | undefined, p90 = true): string[] {
  if (!run) return p90 ? ['—', '—', '—'] : ['—', '—'];
  if ('error' in run) return p90 ? [`error: ${run.error}`, '', ''] : [`error: ${run.error}`, ''];
  const cells = [fmt(run.tokensPerSecond, 0), fmt(run.p50MsPerToken, 3)];
  return p90 ? [...cells, fmt(run.p90MsPerToken, 3)] : cells;
}

/** The step's device time and the host time outside it (the step alone's median less the device's), ms. */
function stepSplit(r: BatchResult): { device?: number; host?: number } {
  const device = r.detail?.profile?.stepDeviceMs;
  const step = r.step && !('error' in r.step) ? r.step.p50MsPerToken : undefined;
  return {
    ...(device === undefined ? {} : { device }),
    ...(device === undefined || step === undefined ? {} : { host: step - device }),
  };
}

/** A batch size's step taken apart: host phases, then the kernels. */
function detailLines(r: BatchResult): string[] {
  const d = r.detail;
  if (!d) return [];
  const out = ['', `${r.batch} streams: one replayed step (the rows of the timed run's last step)`];
  if (d.phases) {
    const p = d.phases;
    const us = (v: number) => fmt(v, 1);
    out.push(
      '',
      ...textTable(
        ['host phase', 'µs (median)'],
        [
          ['write the step inputs (tokens, positions, slots, lengths, block tables)', us(p.writeUs)],
          ['submit, until the device is done (holds the step)', us(p.submitUs)],
          ['  of which the submit call: encode and queue on the host', us(p.enqueueUs)],
          [`read the step's output (${p.readBytes} bytes)`, us(p.readUs)],
          ['whole step', us(p.stepUs)],
        ],
      ),
    );
  }
  if (d.profile)
    out.push('', ...textTable(PROFILE_HEADER, profileRows(d.profile)), '', profileTotals(d.profile));
  if (d.error) out.push('', `error: ${d.error}`);
  return out;
}

/**
 * The report as text: per stream count, tokens per second and ms per output
 * token through the engine and through the step alone, the step's device
 * time and the host time outside it, transformers beside; then each size's
 * step taken apart.
 */
export function batchSummary(report: BatchBenchReport): string {
  const torch = report.torch as
    | { status: string; output?: { results?: Record<string, Partial<BatchRun> & { error?: string }> } }
    | undefined;
  const lines = [
    `batched decode, ${report.settings.config} ${report.settings.dtype}, prompt ${report.settings.promptTokens}, ${report.settings.newTokens} new tokens`,
    '| streams | engine tok/s | engine p50 ms/token | engine p90 | step alone tok/s | step alone p50 | device ms/step | host ms/step outside the device | transformers tok/s | transformers p50 ms/token |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const r of report.rayo) {
    const base = torch?.output?.results?.[String(r.batch)];
    const split = stepSplit(r);
    const theirs = base?.error
      ? [`error: ${base.error}`, '']
      : [fmt(base?.tokensPerSecond, 0), fmt(base?.p50MsPerToken, 3)];
    const cells = [
      ...runCells(r.engine),
      ...runCells(r.step, false),
      fmt(split.device, 3),
      fmt(split.host, 3),
      ...theirs,
    ];
    lines.push(`| ${r.batch} | ${cells.join(' | ')} |`);
  }
  if (torch && torch.status !== 'ok') lines.push(`transformers: ${JSON.stringify(torch)}`);
  for (const r of report.rayo) lines.push(...detailLines(r));
  return `${lines.join('\n')}\n`;
}

/** Whether any run or step detail of the report failed. */
export function batchFailed(report: BatchBenchReport): boolean {
  return report.rayo.some(
    (r) =>
      (r.engine && 'error' in r.engine) || (r.step && 'error' in r.step) || r.detail?.error !== undefined,
  );
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
  --paths LIST      engine (the server's batched engine), step (PagedLlama.decodeGreedy
                    alone, no engine), or both (default engine,step); with step, one
                    replayed step per size is taken apart: its device time and host phases
  --profile         time each group of identical kernel calls of that step (needs step)
  --profile-reps N  back-to-back repetitions of a kernel group per timing (default 10)
  --host-steps N    replays of the step timed phase by phase (default 32)
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
      paths: { type: 'string', default: 'engine,step' },
      profile: { type: 'boolean', default: false },
      'profile-reps': { type: 'string', default: '10' },
      'host-steps': { type: 'string', default: '32' },
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
  const paths = values.paths.split(',').map((p) => {
    if (!(BATCH_PATHS as readonly string[]).includes(p))
      throw new Error(`--paths takes ${BATCH_PATHS.join(', ')} (comma-separated), got ${p}`);
    return p as BatchPath;
  });
  if (values.profile && !paths.includes('step'))
    throw new Error(
      `--profile profiles the step path's rows: --paths must include step, got ${values.paths}`,
    );
  return {
    config: values.config,
    dtype: weightDtype,
    kvDtype: values['kv-dtype'] === undefined ? weightDtype : dtype('kv-dtype', values['kv-dtype']),
    backend: values.backend,
    batches: values.batches.split(',').map((b) => int('batches', b, 1, 256)),
    promptTokens: int('prompt', values.prompt, 1),
    newTokens: int('new', values.new, 2),
    pageSize: int('page-size', values['page-size'], 1),
    paths,
    profile: values.profile,
    profileRepetitions: int('profile-reps', values['profile-reps'], 1),
    hostSteps: int('host-steps', values['host-steps'], 1),
    seed: int('seed', values.seed, 0),
    baseline: values.baseline,
    torchDevice: values['torch-device'],
    weights: values.weights,
    out: values.out,
  };
}
