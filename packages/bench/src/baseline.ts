import type { AttrValues } from '@rayo/core';
import { findPackageScript, runPythonScript } from '@rayo/core/node';
import { type BenchCase, caseVia, resolvedAttrs, type SuiteMode, workingSetBytes } from './case.js';
import { rotationSets, type TimingOptions } from './timing.js';

/** One case as the PyTorch baseline script reads it. */
export interface BaselineCase {
  readonly id: string;
  readonly family: string;
  /**
   * What to time: a kernel name (`matmul`, `softmax`, `rmsNorm`, `layerNorm`,
   * `rope`, `swiglu`, `kvCacheScatter`, `incrementalAttention`, `adamwStep`,
   * `clipByGlobalNorm`, `copy`), or `linear` (the weight cache),
   * `elementwiseChain` (a batch), `upload`, `read`.
   */
  readonly kind: string;
  /** Input shapes in the kernel's input order; null for an absent optional input. */
  readonly shapes: readonly (readonly number[] | null)[];
  /** How each input is filled (`positive` where the kernel needs it, e.g. second moments). */
  readonly fills: readonly ('uniform' | 'positive')[];
  /** Every attribute, defaults applied. */
  readonly attrs: AttrValues;
  /** Input sets to cycle through, as rayo does. */
  readonly rotate: number;
  /** `elementwiseChain`: kernels per call; the script times the whole chain. */
  readonly chain?: number;
}

export interface BaselineCaseFile {
  readonly schema: 'rayo-bench-cases/1';
  readonly mode: SuiteMode;
  readonly timing: {
    readonly warmup: number;
    readonly minReps: number;
    readonly maxReps: number;
    readonly targetMs: number;
  };
  readonly cases: readonly BaselineCase[];
}

/** The baseline's name for what a case times. */
export function baselineKind(c: BenchCase): string {
  switch (caseVia(c)) {
    case 'run':
      return c.spec.name;
    case 'weightCache':
      return 'linear';
    case 'batch':
      return 'elementwiseChain';
    case 'upload':
      return 'upload';
    case 'read':
      return 'read';
  }
}

export function baselineCase(c: BenchCase, timing: TimingOptions): BaselineCase {
  return {
    id: c.id,
    family: c.family,
    kind: baselineKind(c),
    shapes: c.inputs.map((input) => (input ? [...input.shape] : null)),
    fills: c.inputs.map((input) => (input?.fill === 'positive' ? 'positive' : 'uniform')),
    attrs: caseVia(c) === 'run' || caseVia(c) === 'weightCache' ? resolvedAttrs(c) : {},
    rotate: c.bound === 'latency' ? 1 : rotationSets(workingSetBytes(c), timing),
    ...(c.chain === undefined ? {} : { chain: c.chain }),
  };
}

/** The case file the CLI writes for the baseline script (each case id once). */
export function buildCaseFile(
  cases: readonly BenchCase[],
  mode: SuiteMode,
  timing: TimingOptions,
): BaselineCaseFile {
  const seen = new Set<string>();
  const unique = cases.filter((c) => !seen.has(c.id) && seen.add(c.id));
  const { warmup, minReps, maxReps, targetMs } = timing;
  return {
    schema: 'rayo-bench-cases/1',
    mode,
    timing: { warmup, minReps, maxReps, targetMs },
    cases: unique.map((c) => baselineCase(c, timing)),
  };
}

/** One result of the baseline script. */
export interface BaselineResult {
  readonly id: string;
  readonly status: 'ok' | 'error' | 'unsupported';
  /** Milliseconds of one call (the whole chain for `elementwiseChain`). */
  readonly medianMs?: number;
  readonly p10Ms?: number;
  readonly p90Ms?: number;
  readonly samples?: number;
  /** `cuda-events` or `host`. */
  readonly timer?: string;
  readonly message?: string;
}

/** What the baseline script writes. */
export interface BaselineOutput {
  readonly schema: 'rayo-bench-torch/1';
  readonly available: boolean;
  /** Why no case was timed (no torch, no CUDA). */
  readonly reason?: string;
  readonly torch?: string;
  readonly cuda?: string;
  readonly device?: string;
  readonly settings?: Readonly<Record<string, unknown>>;
  readonly results: readonly BaselineResult[];
}

export type BaselineOutcome =
  | { readonly status: 'ok'; readonly output: BaselineOutput }
  | { readonly status: 'unavailable'; readonly reason: string };

/**
 * Milliseconds per call of each baseline result that was timed, in the
 * units rayo reports: per kernel for a chain.
 */
export function baselineTimes(output: BaselineOutput, file: BaselineCaseFile): Map<string, number> {
  const chains = new Map(file.cases.map((c) => [c.id, c.chain ?? 1]));
  const times = new Map<string, number>();
  for (const r of output.results) {
    if (r.status !== 'ok' || typeof r.medianMs !== 'number' || !(r.medianMs > 0)) continue;
    times.set(r.id, r.medianMs / (chains.get(r.id) ?? 1));
  }
  return times;
}

export interface TorchComparison {
  /** PyTorch's median time of one call, in milliseconds. */
  readonly torchMs: number;
  /** rayo time / PyTorch time: above 1, rayo is slower. */
  readonly timeRatio: number;
  /** rayo throughput / PyTorch throughput (PyTorch time / rayo time): above 1, rayo is faster. */
  readonly throughputRatio: number;
}

/** The ratios of a rayo time to a PyTorch time; undefined unless both are positive and finite. */
export function compareWithTorch(
  rayoMs: number | undefined,
  torchMs: number | undefined,
): TorchComparison | undefined {
  const valid = (ms: number | undefined): ms is number =>
    typeof ms === 'number' && Number.isFinite(ms) && ms > 0;
  if (!valid(rayoMs) || !valid(torchMs)) return undefined;
  return { torchMs, timeRatio: rayoMs / torchMs, throughputRatio: torchMs / rayoMs };
}

/** Where the baseline script lies: beside a bundle, or in the package's `baseline/` folder. */
export function findBaselineScript(base: string | URL = import.meta.url): string | undefined {
  return findPackageScript('torch_baseline.py', base);
}

export interface BaselineRunOptions {
  readonly casesFile: string;
  readonly outFile: string;
  /** The script (default: `findBaselineScript()`). */
  readonly script?: string;
  /** The interpreter (default: `$PYTHON`, else `python3`). */
  readonly python?: string;
  readonly env?: NodeJS.ProcessEnv;
  /** The script's progress (its stdout and stderr). */
  readonly onOutput?: (text: string) => void;
}

/**
 * Runs the PyTorch baseline script on a case file, as a child process, and
 * reads its output. Never throws for a missing Python, torch or GPU: the
 * outcome says why no baseline exists.
 */
export async function runTorchBaseline(options: BaselineRunOptions): Promise<BaselineOutcome> {
  const script = options.script ?? findBaselineScript();
  if (!script)
    return { status: 'unavailable', reason: 'the baseline script torch_baseline.py was not found' };
  return runPythonScript<BaselineOutput>({
    script,
    args: ['--cases', options.casesFile, '--out', options.outFile],
    outFile: options.outFile,
    label: 'the baseline script',
    python: options.python,
    env: options.env,
    forwardStdout: true,
    onOutput: options.onOutput,
  });
}
