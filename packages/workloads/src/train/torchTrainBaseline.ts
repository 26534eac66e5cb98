import { findPackageScript, type PythonScriptOutcome, runPythonScript } from '@rayo/bench';
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
  /** Also time each workload with `torch.compile` (`compiled`). */
  readonly compile?: boolean;
  readonly workloads: readonly (WorkloadSpec & { readonly id: string })[];
}

/** Throughput of the step captured once in a CUDA graph and replayed (or compiled), or why it could not be. */
export type TorchGraphResult = Omit<ThroughputMeasurement, 'workload'> | { readonly error: string };

/**
 * One workload: trained eagerly (the top-level figures) and, on a GPU, with
 * the whole step (forward, backward, clipping, a capturable AdamW) replayed
 * as a CUDA graph (`graph`). A workload of precision 'bf16' runs its forward
 * under `torch.autocast(dtype=torch.bfloat16)`, 'tf32' with TF32 allowed.
 */
export type TorchTrainResult =
  | ({
      readonly id: string;
      readonly status: 'ok';
      readonly graph?: TorchGraphResult;
      /** The eager step with the model under `torch.compile`, where it was asked for. */
      readonly compiled?: TorchGraphResult;
    } & Omit<ThroughputMeasurement, 'workload'>)
  | { readonly id: string; readonly status: 'error'; readonly message: string };

/** What the script prints (and writes to `--out`). */
export interface TorchTrainOutput {
  readonly schema: 'rayo-train-torch/3';
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

export type TorchTrainOutcome = PythonScriptOutcome<TorchTrainOutput>;

/** Where the script lies: beside a bundle, or in the package's `baseline/` folder. */
export function findTorchTrainScript(base: string | URL = import.meta.url): string | undefined {
  return findPackageScript(TORCH_TRAIN_SCRIPT, base);
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
  const script = options.script ?? findTorchTrainScript();
  if (!script) return { status: 'unavailable', reason: `the script ${TORCH_TRAIN_SCRIPT} was not found` };
  return runPythonScript<TorchTrainOutput>({
    script,
    args: ['--request', options.requestFile, '--out', options.outFile, ...(options.args ?? [])],
    outFile: options.outFile,
    label: 'the script',
    python: options.python,
    env: options.env,
    onOutput: options.onOutput,
  });
}
