import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { ThroughputMeasurement } from './throughput.js';
import type { WorkloadSpec } from './workload.js';

export const TORCH_TRAIN_SCRIPT = 'torch_train_baseline.py';

/** What the PyTorch script is asked to train: the same workloads, optimizer and timing as rayo. */
export interface TorchTrainRequest {
  readonly schema: 'rayo-train-workloads/1';
  readonly warmup: number;
  readonly steps: number;
  readonly clipNorm: number;
  readonly seed: number;
  readonly adamw: {
    readonly lr: number;
    readonly beta1: number;
    readonly beta2: number;
    readonly eps: number;
    readonly weightDecay: number;
  };
  readonly workloads: readonly (WorkloadSpec & { readonly id: string })[];
}

export type TorchTrainResult =
  | ({ readonly id: string; readonly status: 'ok' } & Omit<ThroughputMeasurement, 'workload'>)
  | { readonly id: string; readonly status: 'error'; readonly message: string };

/** What the script prints (and writes to `--out`). */
export interface TorchTrainOutput {
  readonly schema: 'rayo-train-torch/1';
  readonly available: boolean;
  /** Why nothing was timed (no torch, no CUDA). */
  readonly reason?: string;
  readonly torch?: string;
  readonly cuda?: string | null;
  readonly device?: string;
  /** TF32 switches, the AdamW and attention implementations used. */
  readonly settings?: Readonly<Record<string, unknown>>;
  readonly results: readonly TorchTrainResult[];
}

export type TorchTrainOutcome =
  | { readonly status: 'ok'; readonly output: TorchTrainOutput }
  | { readonly status: 'unavailable'; readonly reason: string };

/** Where the script lies: beside a bundle, or in the package's `baseline/` folder. */
export function findTorchTrainScript(base: string | URL = import.meta.url): string | undefined {
  for (const candidate of [`./${TORCH_TRAIN_SCRIPT}`, `../baseline/${TORCH_TRAIN_SCRIPT}`]) {
    const path = fileURLToPath(new URL(candidate, base));
    if (existsSync(path)) return path;
  }
  return undefined;
}

export interface TorchTrainRunOptions {
  readonly requestFile: string;
  readonly outFile: string;
  /** The script (default: `findTorchTrainScript()`). */
  readonly script?: string;
  /** The interpreter (default: `$PYTHON`, else `python3`). */
  readonly python?: string;
  /** Extra arguments for the script, e.g. `--device cpu`. */
  readonly args?: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  /** The script's progress (its stderr). */
  readonly onOutput?: (text: string) => void;
}

/**
 * Runs the PyTorch training baseline as a child process and reads its output.
 * Never throws for a missing Python, torch or GPU: the outcome says why no
 * baseline exists.
 */
export async function runTorchTrainBaseline(options: TorchTrainRunOptions): Promise<TorchTrainOutcome> {
  const env = options.env ?? process.env;
  const python = options.python ?? env.PYTHON ?? 'python3';
  const script = options.script ?? findTorchTrainScript();
  if (!script) return { status: 'unavailable', reason: `the script ${TORCH_TRAIN_SCRIPT} was not found` };
  const args = [script, '--request', options.requestFile, '--out', options.outFile, ...(options.args ?? [])];
  const exit = await new Promise<{ code: number | null; error?: Error; stderr: string }>((resolve) => {
    let stderr = '';
    const child = spawn(python, args, {
      // stdout repeats the output file; the file is what is read.
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...env, PYTHONUNBUFFERED: '1' },
    });
    child.stderr.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      stderr = (stderr + text).slice(-4000);
      options.onOutput?.(text);
    });
    child.on('error', (error) => resolve({ code: null, error, stderr }));
    child.on('close', (code) => resolve({ code, stderr }));
  });
  if (exit.error) {
    const missing = (exit.error as NodeJS.ErrnoException).code === 'ENOENT';
    return {
      status: 'unavailable',
      reason: missing
        ? `${python} was not found (set $PYTHON to a Python with PyTorch)`
        : `${python} could not be started: ${exit.error.message}`,
    };
  }
  if (exit.code !== 0) {
    const why = exit.stderr.trim().split('\n').at(-1)?.trim();
    return {
      status: 'unavailable',
      reason: `the script exited with code ${exit.code}${why ? `: ${why}` : ''}`,
    };
  }
  let output: TorchTrainOutput;
  try {
    output = JSON.parse(await readFile(options.outFile, 'utf8')) as TorchTrainOutput;
  } catch (error) {
    return { status: 'unavailable', reason: `no baseline output: ${(error as Error).message}` };
  }
  if (!output.available)
    return { status: 'unavailable', reason: output.reason ?? 'the baseline could not run' };
  return { status: 'ok', output };
}
