import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type Backend, InvalidArgumentError, probeBackends, UnsupportedOnBackendError } from '@rayo/core';
import {
  type BlockCheckpointing,
  checkpointingFromName,
  checkpointingName,
  checkTrainPrecision,
  TRAIN_PRECISIONS,
  type TrainPrecision,
} from '@rayo/train';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';
import { messageOf, parseCommandLine } from '../commandLine.js';
import { parityGate } from './parity.js';
import { measureThroughput, THROUGHPUT_ADAMW, type ThroughputOptions } from './throughput.js';
import { checkpointMarkdown, checkpointSummary } from './trainBenchCheckpoint.js';
import { mfuMarkdown, mfuSummary } from './trainBenchMfu.js';
import { precisionMarkdown, precisionSummary } from './trainBenchPrecision.js';

/** rayo's ways of running the steps, each measured on every workload. */
const THROUGHPUT_MODES: readonly ThroughputMode[] = ['eager', 'replayed', 'replayed-host'];

import { runTorchTrainBaseline, type TorchTrainRequest } from './torchTrainBaseline.js';
import {
  type BackendEntry,
  type BaselineEntry,
  compareWithBaseline,
  exitCodeOf,
  formatNumber,
  type ParityEntry,
  type ParityModel,
  rayoLabel,
  reportMarkdown,
  summaryTable,
  type ThroughputEntry,
  type ThroughputMode,
  type TrainBenchReport,
  type TrainBenchSettings,
} from './trainBenchReport.js';
import { missingKernels, trainingKernels, type WorkloadSpec, workloadId } from './workload.js';

/**
 * The demo's MLP at two batch sizes, a small two-block language model (all
 * three bound by per-kernel overhead), and a GPT-style model bound by its
 * matrix products (d 768, 12 blocks of 12 heads, 256 tokens, batch 8).
 */
export const THROUGHPUT_WORKLOADS: readonly WorkloadSpec[] = [
  { kind: 'mlp', sizes: [784, 256, 10], activation: 'relu', batch: 256 },
  { kind: 'mlp', sizes: [784, 256, 10], activation: 'relu', batch: 1024 },
  // hidden: SwiGLU's 8/3·dim rounded up to a multiple of 8, the block's default.
  { kind: 'transformer', vocab: 512, dim: 256, heads: 4, hidden: 688, blocks: 2, seq: 128, batch: 16 },
  // GPT-2 small's width, depth and padded vocabulary, with SwiGLU at 8/3·dim.
  { kind: 'transformer', vocab: 50304, dim: 768, heads: 12, hidden: 2048, blocks: 12, seq: 256, batch: 8 },
];

/**
 * GPT-2 small's shapes (12 blocks of d 768 and 12 heads, 1,024 tokens, the
 * vocabulary of 50,257) as rayo's language model builds them (RoPE, RMSNorm,
 * SwiGLU at 8/3·dim, an untied head: 162 M parameters, 124 M with the head
 * tied as GPT-2 ties it), trained under the 'bf16' policy; PyTorch runs it
 * under bf16 autocast.
 */
export function gpt2Workloads(batch: number): WorkloadSpec[] {
  return [
    {
      kind: 'transformer',
      vocab: 50257,
      dim: 768,
      heads: 12,
      hidden: 2048,
      blocks: 12,
      seq: 1024,
      batch,
      precision: 'bf16',
    },
  ];
}

/** The batch of the GPT-2 suite: 8 sequences of 1,024 tokens, well inside an H200 for both sides. */
const GPT2_BATCH = 8;

/** The same structures at sizes a software GPU runs in seconds. */
export const QUICK_WORKLOADS: readonly WorkloadSpec[] = [
  { kind: 'mlp', sizes: [784, 32, 10], activation: 'relu', batch: 16 },
  { kind: 'mlp', sizes: [784, 32, 10], activation: 'relu', batch: 64 },
  { kind: 'transformer', vocab: 64, dim: 32, heads: 2, hidden: 88, blocks: 2, seq: 16, batch: 2 },
];

/**
 * Each language model once per checkpointing policy (`--checkpoint`), in the
 * order given; an MLP, which has no blocks, once.
 */
export function withCheckpointing(
  workloads: readonly WorkloadSpec[],
  policies: readonly BlockCheckpointing[],
): WorkloadSpec[] {
  return workloads.flatMap((w): WorkloadSpec[] =>
    w.kind === 'transformer'
      ? policies.map((checkpoint) => (checkpoint === 'none' ? w : { ...w, checkpoint }))
      : [w],
  );
}

/**
 * Every workload once per precision policy (`--precision`), in the order
 * given: the policy replaces the suite's own (f32, or bf16 for gpt2), so
 * that one run compares policies on one device.
 */
export function withPrecisions(
  workloads: readonly WorkloadSpec[],
  precisions: readonly TrainPrecision[],
): WorkloadSpec[] {
  return workloads.flatMap((w) => precisions.map((precision): WorkloadSpec => ({ ...w, precision })));
}

/** The `--precision` list: known policies, each once. */
function precisionList(text: string): TrainPrecision[] {
  const precisions = list('precision', text, 'policy').map((p) => {
    try {
      return checkTrainPrecision(p, 'train-bench --precision');
    } catch {
      throw new InvalidArgumentError('unknown --precision policy', {
        operation: 'train-bench',
        argument: '--precision',
        expected: TRAIN_PRECISIONS.join(' | '),
        actual: p,
      });
    }
  });
  if (new Set(precisions).size !== precisions.length) {
    throw new InvalidArgumentError('--precision names a policy twice', {
      operation: 'train-bench',
      argument: '--precision',
      expected: 'each policy once',
      actual: text,
    });
  }
  return precisions;
}

/** PyTorch's train script runs f32, tf32 and bf16 (autocast); 'f16' would need GradScaler there. */
const TORCH_PRECISIONS: readonly string[] = ['f32', 'tf32', 'bf16'];

const PARITY_MODELS: readonly ParityModel[] = ['mlp', 'transformer'];
const CLIP_NORM = 1;
/**
 * The cpu backend is the JavaScript reference (about 95 s a step of the full
 * transformer on a small machine): it has nothing to warm up, and two steps
 * tell its speed.
 */
const CPU_MAX_STEPS = 2;

export const USAGE = `Usage: train-bench [options]

Trains the same models on rayo backends: a parity check between two backends
(losses and gradient norms step by step, MLP and transformer) and the training
throughput of each backend, optionally against PyTorch on the same GPU (eager,
and with the whole step replayed as a CUDA graph). rayo runs each workload
eagerly, replayed from a batch on the device (copied device to device into the
step's inputs, as PyTorch's graph does) and replayed from the host (the batch
written host to device every step).

  --backends LIST     backends to time (default cuda,wgpu)
  --parity A,B        the parity pair (default: the first two of --backends;
                      with one backend, cpu and it)
  --parity-steps N    training steps of the parity check (default 8; quick 4)
  --baseline NAME     torch: run the PyTorch script ($PYTHON, else python3); none (default)
  --torch-device DEV  the PyTorch device (default cuda; cpu checks the script)
  --warmup N          untimed steps (default 5; quick 1)
  --steps N           timed steps, median counts (default 30; quick 3)
  --seed N            initialisation and data (default 0)
  --quick             tiny models and few steps (a software GPU, CI)
  --suite NAME        throughput (default): the workloads above, fp32; gpt2:
                      GPT-2 small's shapes (12 × 768, 12 heads, 1,024 tokens,
                      vocabulary 50,257) in bf16, against PyTorch's bf16 autocast
  --gpt2-batch N      sequences per step of the gpt2 suite (default ${GPT2_BATCH})
  --checkpoint LIST   activation checkpointing of the language models' blocks,
                      each policy a run of its own: none (default), blocks,
                      everyN (blocks 0, N, 2N, …); none,blocks reports the
                      trade (tokens/s and peak memory with and without)
  --precision LIST    the products' precision policies, each a run of its own
                      (${TRAIN_PRECISIONS.join(', ')}): replaces the suite's
                      (f32; bf16 for gpt2); e.g. f32,f16 compares the two on
                      one device. f16 trains with dynamic loss scaling
                      (GradScaler's defaults); PyTorch does not run f16 workloads
  --peak-tflops X     the device's dense peak for the workloads' precision
                      (TFLOP/s): adds model FLOPs utilisation to the report
  --torch-compile     also time PyTorch with torch.compile (eager step otherwise)
  --out DIR           report.json and report.md (default train-bench-results/DATE)
  -h, --help`;

interface Options {
  readonly settings: TrainBenchSettings;
  readonly baseline: 'torch' | 'none';
  readonly torchDevice: string;
  readonly out: string;
}

function integer(name: string, text: string | undefined, fallback: number, min: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < min)
    throw new Error(`--${name} must be an integer >= ${min}, got ${text}`);
  return value;
}

function list(name: string, text: string, noun = 'backend name'): string[] {
  const items = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (items.length === 0) throw new Error(`--${name} needs at least one ${noun}`);
  return items;
}

/** A `--checkpoint` item in its canonical spelling (`every1` is `blocks`). */
function checkpointPolicyName(name: string): string {
  try {
    return checkpointingName(checkpointingFromName(name, '--checkpoint'));
  } catch {
    throw new Error(`--checkpoint takes none, blocks or everyN (N ≥ 1), got ${name}`);
  }
}

export function parseOptions(argv: readonly string[], now = new Date()): Options {
  // `pnpm train-bench -- --quick` passes the `--` along.
  const args = argv[0] === '--' ? argv.slice(1) : [...argv];
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      backends: { type: 'string', default: 'cuda,wgpu' },
      parity: { type: 'string' },
      'parity-steps': { type: 'string' },
      baseline: { type: 'string', default: 'none' },
      'torch-device': { type: 'string', default: 'cuda' },
      warmup: { type: 'string' },
      steps: { type: 'string' },
      seed: { type: 'string' },
      quick: { type: 'boolean', default: false },
      suite: { type: 'string', default: 'throughput' },
      'gpt2-batch': { type: 'string' },
      checkpoint: { type: 'string', default: 'none' },
      precision: { type: 'string' },
      'peak-tflops': { type: 'string' },
      'torch-compile': { type: 'boolean', default: false },
      out: { type: 'string' },
    },
  });
  const quick = values.quick;
  const backends = list('backends', values.backends);
  let parity: [string, string];
  if (values.parity !== undefined) {
    const pair = list('parity', values.parity);
    if (pair.length !== 2) throw new Error(`--parity needs two backends, got ${values.parity}`);
    parity = [pair[0]!, pair[1]!];
  } else {
    parity = backends.length >= 2 ? [backends[0]!, backends[1]!] : ['cpu', backends[0]!];
  }
  if (values.baseline !== 'torch' && values.baseline !== 'none') {
    throw new Error(`--baseline must be torch or none, got ${values.baseline}`);
  }
  if (values.suite !== 'throughput' && values.suite !== 'gpt2') {
    throw new Error(`--suite must be throughput or gpt2, got ${values.suite}`);
  }
  const peak = values['peak-tflops'] === undefined ? undefined : Number(values['peak-tflops']);
  if (peak !== undefined && !(peak > 0)) {
    throw new Error(`--peak-tflops must be a positive number, got ${values['peak-tflops']}`);
  }
  const checkpoint = list('checkpoint', values.checkpoint, 'policy').map(checkpointPolicyName);
  if (new Set(checkpoint).size !== checkpoint.length) {
    throw new Error(`--checkpoint names a policy twice: ${values.checkpoint}`);
  }
  const precisions = values.precision === undefined ? undefined : precisionList(values.precision);
  const stamp = now.toISOString().replace(/:/g, '-').replace(/\..*$/, '');
  return {
    settings: {
      backends,
      parity,
      quick,
      warmup: integer('warmup', values.warmup, quick ? 1 : 5, 0),
      steps: integer('steps', values.steps, quick ? 3 : 30, 1),
      paritySteps: integer('parity-steps', values['parity-steps'], quick ? 4 : 8, 1),
      seed: integer('seed', values.seed, 0, 0),
      clipNorm: CLIP_NORM,
      adamw: THROUGHPUT_ADAMW,
      suite: values.suite,
      gpt2Batch: integer('gpt2-batch', values['gpt2-batch'], GPT2_BATCH, 1),
      checkpoint,
      ...(precisions === undefined ? {} : { precisions }),
      ...(peak === undefined ? {} : { peakTflops: peak }),
      torchCompile: values['torch-compile'],
    },
    baseline: values.baseline,
    torchDevice: values['torch-device'],
    // pnpm runs package scripts elsewhere; a relative --out is meant from where it was called.
    out: resolve(process.env.INIT_CWD ?? process.cwd(), values.out ?? join('train-bench-results', stamp)),
  };
}

function log(text: string): void {
  process.stderr.write(`${text}\n`);
}

async function describeBackends(names: readonly string[]): Promise<BackendEntry[]> {
  const entries: BackendEntry[] = [];
  for (const status of await probeBackends(names)) {
    if (!status.available) {
      entries.push({ name: status.name, available: false, reason: status.reason ?? 'unavailable' });
      continue;
    }
    try {
      const backend = await createBackendFromEnvironment(status.name);
      entries.push({ name: status.name, available: true, device: backend.info.device });
      backend.dispose();
    } catch (error) {
      entries.push({ name: status.name, available: false, reason: messageOf(error) });
    }
  }
  return entries;
}

async function runParity(
  settings: TrainBenchSettings,
  backends: readonly BackendEntry[],
): Promise<ParityEntry[]> {
  const [a, b] = settings.parity;
  const unavailable = backends.flatMap((e) =>
    (e.name === a || e.name === b) && !e.available ? [`${e.name}: ${e.reason}`] : [],
  );
  const entries: ParityEntry[] = [];
  for (const model of PARITY_MODELS) {
    const label = `parity ${model}: ${a} vs ${b}`;
    if (unavailable.length > 0) {
      const reason = unavailable.join('; ');
      entries.push({ model, backends: [a, b], status: 'skipped', reason });
      log(`${label}: skipped (${reason})`);
      continue;
    }
    try {
      const report = await parityGate(
        () => createBackendFromEnvironment(a),
        () => createBackendFromEnvironment(b),
        { model, steps: settings.paritySteps, seed: settings.seed, clipNorm: settings.clipNorm },
      );
      entries.push({ model, backends: [a, b], status: report.passed ? 'passed' : 'failed', report });
      log(
        `${label}: ${report.passed ? 'passed' : 'FAILED'} (max |Δloss| ${formatNumber(report.maxLossDiff, 2)}, ` +
          `max grad-norm relative Δ ${formatNumber(report.maxGradNormRelDiff, 2)})`,
      );
    } catch (error) {
      const skipped = error instanceof UnsupportedOnBackendError;
      entries.push({
        model,
        backends: [a, b],
        status: skipped ? 'skipped' : 'error',
        reason: messageOf(error),
      });
      log(`${label}: ${skipped ? 'skipped' : 'ERROR'} (${messageOf(error)})`);
    }
  }
  return entries;
}

async function timeBackend(
  entry: BackendEntry,
  workloads: readonly WorkloadSpec[],
  kernels: ReadonlyMap<WorkloadSpec, readonly string[]>,
  timing: ThroughputOptions,
): Promise<ThroughputEntry[]> {
  const name = entry.name;
  if (!entry.available) {
    return workloads.map((w) => ({
      backend: name,
      workload: workloadId(w),
      status: 'unavailable',
      reason: entry.reason,
    }));
  }
  let backend: Backend;
  try {
    backend = await createBackendFromEnvironment(name);
  } catch (error) {
    return workloads.map((w) => ({
      backend: name,
      workload: workloadId(w),
      status: 'unavailable',
      reason: messageOf(error),
    }));
  }
  const own =
    backend.info.kind === 'cpu'
      ? { ...timing, warmup: 0, steps: Math.min(timing.steps, CPU_MAX_STEPS) }
      : timing;
  const entries: ThroughputEntry[] = [];
  try {
    for (const spec of workloads) {
      const workload = workloadId(spec);
      const missing = missingKernels(backend, kernels.get(spec) ?? []);
      if (missing.length > 0) {
        const reason = `lacks ${missing.join(', ')}`;
        entries.push({ backend: name, workload, status: 'unsupported', reason, missing });
        log(`throughput ${workload} on ${name}: unsupported (${reason})`);
        continue;
      }
      // Each workload eagerly, then recorded once and replayed (fed from the device, then from the host).
      for (const mode of THROUGHPUT_MODES) {
        const label = rayoLabel({ backend: name, mode });
        try {
          const result = await measureThroughput(backend, spec, { ...own, mode });
          entries.push({ backend: name, workload, mode, status: 'ok', result });
          log(
            `throughput ${workload} on ${label}: ${result.samplesPerSecond.toFixed(1)} samples/s ` +
              `(median step ${result.medianMs.toFixed(3)} ms)`,
          );
        } catch (error) {
          const status = error instanceof UnsupportedOnBackendError ? 'unsupported' : 'error';
          entries.push({ backend: name, workload, mode, status, reason: messageOf(error) });
          log(`throughput ${workload} on ${label}: ${status} (${messageOf(error)})`);
        }
      }
    }
  } finally {
    backend.dispose();
  }
  return entries;
}

async function runBaseline(
  options: Options,
  given: readonly WorkloadSpec[],
  timing: ThroughputOptions,
): Promise<BaselineEntry> {
  if (options.baseline === 'none') return { status: 'not requested', reason: 'run with --baseline torch' };
  const s = options.settings;
  const workloads = given.filter((w) => TORCH_PRECISIONS.includes(w.precision ?? 'f32'));
  const skipped = given.filter((w) => !workloads.includes(w));
  if (skipped.length > 0) {
    log(
      `torch baseline: not run for ${skipped.map(workloadId).join(', ')} (the script has no f16 with GradScaler)`,
    );
  }
  const request: TorchTrainRequest = {
    schema: 'rayo-train-workloads/1',
    warmup: timing.warmup,
    steps: timing.steps,
    clipNorm: s.clipNorm,
    seed: s.seed,
    adamw: s.adamw,
    compile: s.torchCompile,
    workloads: workloads.map((w) => ({ id: workloadId(w), ...w })),
  };
  const requestFile = join(options.out, 'torch-request.json');
  await writeFile(requestFile, `${JSON.stringify(request, null, 2)}\n`);
  log('torch baseline: running');
  const outcome = await runTorchTrainBaseline({
    requestFile,
    outFile: join(options.out, 'torch.json'),
    args: ['--device', options.torchDevice],
    onOutput: (text) => process.stderr.write(text),
  });
  if (outcome.status !== 'ok') log(`torch baseline unavailable: ${outcome.reason}`);
  return outcome;
}

/** Runs the parity check, the throughput of every backend and the baseline; writes the reports. */
export async function main(argv: readonly string[]): Promise<number> {
  const line = parseCommandLine('train-bench', USAGE, argv, parseOptions, ['--help', '-h']);
  if ('exitCode' in line) return line.exitCode;
  const options = line.settings;
  const { settings } = options;
  await mkdir(options.out, { recursive: true });
  const suite =
    settings.suite === 'gpt2'
      ? gpt2Workloads(settings.gpt2Batch ?? GPT2_BATCH)
      : settings.quick
        ? QUICK_WORKLOADS
        : THROUGHPUT_WORKLOADS;
  const policies = (settings.checkpoint ?? ['none']).map((name) =>
    checkpointingFromName(name, '--checkpoint'),
  );
  const precise = settings.precisions ? withPrecisions(suite, settings.precisions) : suite;
  const workloads = withCheckpointing(precise, policies);
  const timing: ThroughputOptions = {
    warmup: settings.warmup,
    steps: settings.steps,
    clipNorm: settings.clipNorm,
    seed: settings.seed,
  };

  const backends = await describeBackends([...new Set([...settings.backends, ...settings.parity])]);
  for (const b of backends) log(`${b.name}: ${b.available ? b.device : `unavailable (${b.reason})`}`);
  const parity = await runParity(settings, backends);

  const kernels = new Map<WorkloadSpec, readonly string[]>();
  for (const spec of workloads) {
    kernels.set(spec, await trainingKernels(spec, { optimizer: 'adamw', clipNorm: settings.clipNorm }));
  }
  const throughput: ThroughputEntry[] = [];
  for (const name of settings.backends) {
    const entry = backends.find((b) => b.name === name)!;
    throughput.push(...(await timeBackend(entry, workloads, kernels, timing)));
  }
  const baseline = await runBaseline(options, workloads, timing);

  const report: TrainBenchReport = {
    schema: 'rayo-train-bench/2',
    createdAt: new Date().toISOString(),
    node: process.versions.node,
    settings,
    backends,
    workloads: workloads.map((w) => ({ id: workloadId(w), ...w })),
    parity,
    throughput,
    baseline,
    comparisons: compareWithBaseline(throughput, baseline),
  };
  await writeFile(join(options.out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(
    join(options.out, 'report.md'),
    reportMarkdown(report) + mfuMarkdown(report) + checkpointMarkdown(report) + precisionMarkdown(report),
  );
  log(`report: ${join(options.out, 'report.md')}`);
  process.stdout.write(summaryTable(report));
  const mfu = mfuSummary(report);
  if (mfu) process.stdout.write(`\n${mfu}`);
  const trade = checkpointSummary(report);
  if (trade) process.stdout.write(`\n${trade}`);
  const byPrecision = precisionSummary(report);
  if (byPrecision) process.stdout.write(`\n${byPrecision}`);
  return exitCodeOf(report);
}
