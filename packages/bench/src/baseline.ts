import type { AttrValues, DType } from '@rayo/core';
import {
  type BenchCase,
  caseVia,
  inputMetas,
  resolvedAttrs,
  type SuiteMode,
  workingSetBytes,
} from './case.js';
import { findPackageScript, type PythonScriptOutcome, runPythonScript } from './python.js';
import { rotationSets, type TimingOptions } from './timing.js';

/** One case as the PyTorch baseline script reads it. */
export interface BaselineCase {
  readonly id: string;
  readonly family: string;
  /**
   * What to time: a kernel name (`matmul`, `linear`, `softmax`, `rmsNorm`, `layerNorm`,
   * `rope`, `swiglu`, `gateUpSwiglu`, `rmsNormMatmul`, `kvCacheScatter`, `incrementalAttention`, `causalAttention`,
   * `flashAttentionBackward`, `adamwStep`,
   * `multiTensorAdamw`, `clipByGlobalNorm`, `copy`), or `weightCache` (a product against a cached weight),
   * `elementwiseChain` (a batch), `upload`, `read`.
   */
  readonly kind: string;
  /** Input shapes in the kernel's input order; null for an absent optional input. */
  readonly shapes: readonly (readonly number[] | null)[];
  /** How each input is filled (`positive` where the kernel needs it, e.g. second moments). */
  readonly fills: readonly ('uniform' | 'positive')[];
  /** Each input's storage dtype (f32, f16, bf16, i32); null for an absent optional input. */
  readonly dtypes: readonly (DType | null)[];
  /** Every attribute, defaults applied. */
  readonly attrs: AttrValues;
  /** Input sets to cycle through, as rayo does. */
  readonly rotate: number;
  /** `elementwiseChain`: kernels per call; the script times the whole chain. */
  readonly chain?: number;
}

/**
 * The timing rules the baseline script applies, rayo's own: warm-up and
 * repetitions as `measure`, calls per device-timed sample as `calibrateCalls`.
 */
export type BaselineTiming = Pick<
  TimingOptions,
  'warmup' | 'minReps' | 'maxReps' | 'targetMs' | 'deviceSampleMs' | 'maxCallsPerSample'
>;

export interface BaselineCaseFile {
  readonly schema: 'rayo-bench-cases/2';
  readonly mode: SuiteMode;
  readonly timing: BaselineTiming;
  readonly cases: readonly BaselineCase[];
}

/** The baseline's name for what a case times. */
export function baselineKind(c: BenchCase): string {
  switch (caseVia(c)) {
    case 'run':
      return c.spec.name;
    case 'weightCache':
      return 'weightCache';
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
    dtypes: inputMetas(c).map((m) => m?.dtype ?? null),
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
  const { warmup, minReps, maxReps, targetMs, deviceSampleMs, maxCallsPerSample } = timing;
  return {
    schema: 'rayo-bench-cases/2',
    mode,
    timing: { warmup, minReps, maxReps, targetMs, deviceSampleMs, maxCallsPerSample },
    cases: unique.map((c) => baselineCase(c, timing)),
  };
}

/**
 * How PyTorch ran a case: `graph` — the calls captured in one CUDA graph and
 * replayed; `eager` — launched one by one from Python.
 */
export type BaselineMethod = 'graph' | 'eager';

/** One way the baseline script timed a case, or why it could not. */
export interface BaselineCandidate {
  /** The PyTorch call, e.g. `torch.mv`, `sdpa[efficient_attention]`. */
  readonly impl: string;
  readonly method: BaselineMethod;
  readonly medianMs?: number;
  readonly p10Ms?: number;
  readonly p90Ms?: number;
  readonly samples?: number;
  readonly callsPerSample?: number;
  readonly error?: string;
  readonly note?: string;
}

/** One result of the baseline script: the fastest candidate, and all of them. */
export interface BaselineResult {
  readonly id: string;
  readonly status: 'ok' | 'error' | 'unsupported';
  /** Milliseconds of one call (the whole chain for `elementwiseChain`). */
  readonly medianMs?: number;
  readonly p10Ms?: number;
  readonly p90Ms?: number;
  readonly samples?: number;
  readonly callsPerSample?: number;
  /** `device` (CUDA events) or `host`. */
  readonly timer?: string;
  readonly impl?: string;
  readonly method?: BaselineMethod;
  /** The fastest eager candidate's milliseconds (what a PyTorch user gets without graphs). */
  readonly eagerMs?: number | null;
  readonly candidates?: readonly BaselineCandidate[];
  readonly message?: string;
}

/** What the baseline script writes. */
export interface BaselineOutput {
  readonly schema: 'rayo-bench-torch/2';
  readonly available: boolean;
  /** Why no case was timed (no torch, no CUDA). */
  readonly reason?: string;
  readonly torch?: string;
  readonly cuda?: string;
  readonly device?: string;
  readonly settings?: Readonly<Record<string, unknown>>;
  readonly results: readonly BaselineResult[];
}

export type BaselineOutcome = PythonScriptOutcome<BaselineOutput>;

/** PyTorch's time of one case, in the units rayo reports (per kernel for a chain). */
export interface BaselineTime {
  /** Milliseconds per call of the fastest candidate: the baseline. */
  readonly ms: number;
  readonly impl?: string;
  readonly method?: BaselineMethod;
  /** Milliseconds per call of the fastest eager candidate. */
  readonly eagerMs?: number;
}

/** The baseline time of each result that was timed, by case id. */
export function baselineTimes(output: BaselineOutput, file: BaselineCaseFile): Map<string, BaselineTime> {
  const chains = new Map(file.cases.map((c) => [c.id, c.chain ?? 1]));
  const times = new Map<string, BaselineTime>();
  for (const r of output.results) {
    if (r.status !== 'ok' || typeof r.medianMs !== 'number' || !(r.medianMs > 0)) continue;
    const per = chains.get(r.id) ?? 1;
    times.set(r.id, {
      ms: r.medianMs / per,
      ...(r.impl === undefined ? {} : { impl: r.impl }),
      ...(r.method === undefined ? {} : { method: r.method }),
      ...(typeof r.eagerMs === 'number' && r.eagerMs > 0 ? { eagerMs: r.eagerMs / per } : {}),
    });
  }
  return times;
}

export interface TorchComparison {
  /** PyTorch's median time of one call, in milliseconds. */
  readonly torchMs: number;
  /** Which PyTorch call and method gave it, e.g. `graph torch.mv`. */
  readonly via?: string;
  /** The fastest eager PyTorch time, where the baseline is a graph. */
  readonly eagerMs?: number;
  /** rayo time / PyTorch time: above 1, rayo is slower. */
  readonly timeRatio: number;
  /** rayo throughput / PyTorch throughput (PyTorch time / rayo time): above 1, rayo is faster. */
  readonly throughputRatio: number;
}

/** The ratios of a rayo time to a PyTorch time; undefined unless both are positive and finite. */
export function compareWithTorch(
  rayoMs: number | undefined,
  torch: BaselineTime | number | undefined,
): TorchComparison | undefined {
  const valid = (ms: number | undefined): ms is number =>
    typeof ms === 'number' && Number.isFinite(ms) && ms > 0;
  const time = typeof torch === 'number' ? { ms: torch } : torch;
  const torchMs = time?.ms;
  if (!valid(rayoMs) || !valid(torchMs)) return undefined;
  const via = [time?.method, time?.impl].filter((part) => part !== undefined).join(' ');
  return {
    torchMs,
    ...(via ? { via } : {}),
    ...(valid(time?.eagerMs) ? { eagerMs: time.eagerMs } : {}),
    timeRatio: rayoMs / torchMs,
    throughputRatio: torchMs / rayoMs,
  };
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
