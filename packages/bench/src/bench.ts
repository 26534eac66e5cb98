import type { Backend, HostArray, KernelCost, KernelRunner } from '@rayo/core';
import { type BenchCase, type CaseBound, caseCost, caseVia, workingSetBytes } from './case.js';
import { prepareTiming } from './drive.js';
import {
  calibrateCalls,
  measure,
  rotationSets,
  scaleStats,
  summarize,
  type TimingOptions,
  type TimingStats,
} from './timing.js';
import { type Expectation, expectedOutputs, makeInputs, verifyOnBackend } from './verify.js';

/**
 * - `ok`: the result matched the reference and was timed
 * - `FAILED`: the result did not match the reference (not timed)
 * - `ERROR`: the backend (or the reference) threw
 * - `skipped`: the backend does not implement the kernel
 */
export type CaseStatus = 'ok' | 'FAILED' | 'ERROR' | 'skipped';

/**
 * How a case was timed: `device` — the backend's `deviceTime()` (GPU
 * timestamps) around the kernels of one submission; `host` — wall time
 * around the call and `await sync()` (or `submit()`, `upload`, `read`).
 */
export type Timer = 'device' | 'host';

export interface CaseResult {
  readonly backend: string;
  readonly id: string;
  readonly family: string;
  readonly kernel: string;
  readonly status: CaseStatus;
  readonly bound: CaseBound;
  /** The case's position on its family chart. */
  readonly x: number;
  /** Why a case failed, errored or was skipped. */
  readonly message?: string;
  /** Milliseconds per call (per kernel for a batch); status `ok` only. */
  readonly timing?: TimingStats;
  readonly timer?: Timer;
  /** Input sets cycled through while timing (more than one: rotated to defeat the L2 cache). */
  readonly sets?: number;
  /**
   * Calls behind each sample: several per device-timed submission where the
   * device clock is coarse, the kernels of a batch; the timing is per call.
   */
  readonly callsPerSample?: number;
  readonly cost?: KernelCost;
  /** The backend's bandwidth ceiling measurement (the device copy). */
  readonly ceiling?: boolean;
}

export function isFailure(result: CaseResult): boolean {
  return result.status === 'FAILED' || result.status === 'ERROR';
}

export interface BenchOptions {
  readonly backends: readonly Backend[];
  readonly cases: readonly BenchCase[];
  readonly timing: TimingOptions;
  /** Each backend's ceiling case (a large device copy), run before its other cases. */
  readonly ceiling?: (backend: Backend) => BenchCase | undefined;
  /** Called before each backend × case; `index` counts from 1. */
  readonly onStart?: (index: number, total: number, backend: Backend, c: BenchCase) => void;
  readonly onDone?: (result: CaseResult) => void;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message.split('\n')[0]! : String(error);
}

interface Timed {
  readonly timing: TimingStats;
  readonly timer: Timer;
  readonly sets: number;
  readonly callsPerSample: number;
}

/** Times `c` on `backend`: device time where the backend has a clock and the call is plain kernels. */
async function timeCase(
  backend: Backend,
  c: BenchCase,
  data: readonly (HostArray | undefined)[],
  timing: TimingOptions,
): Promise<Timed> {
  const sets = c.bound === 'latency' ? 1 : rotationSets(workingSetBytes(c), timing);
  const prepared = await prepareTiming(backend, c, data, sets);
  try {
    const { record } = prepared;
    const deviceTime = backend.deviceTime?.bind(backend);
    // Calls of sample `rep`, recorded into one submission, cycling through the input sets.
    const recordCalls = (runner: KernelRunner, rep: number, calls: number) => {
      for (let i = 0; i < calls; i++) record!(runner, (rep * calls + i) % sets);
    };
    // The first call is the first warm-up run, and tells whether the device has a clock.
    let timer: Timer = 'host';
    let calls = 1;
    if (record && deviceTime) {
      // A coarse device clock needs several calls per sample to resolve a short kernel.
      const calibrated = await calibrateCalls(
        (n) => deviceTime((runner) => recordCalls(runner, 0, n)),
        timing,
      );
      if (calibrated !== undefined) {
        timer = 'device';
        calls = calibrated;
      }
    } else {
      await prepared.host(0);
    }
    const samples = await measure(
      async (rep) => {
        if (timer === 'device') {
          const ms = await deviceTime!((runner) => recordCalls(runner, rep + 1, calls));
          return ms === undefined ? undefined : ms / calls;
        }
        await prepared.host((rep + 1) % sets);
        return undefined;
      },
      { ...timing, warmup: Math.max(0, timing.warmup - 1) },
    );
    const stats = summarize(samples);
    const perSample = caseVia(c) === 'batch' ? (c.chain ?? 1) : 1;
    return {
      timing: perSample === 1 ? stats : scaleStats(stats, 1 / perSample),
      timer,
      sets,
      callsPerSample: calls * perSample,
    };
  } finally {
    prepared.dispose();
  }
}

interface Reference {
  readonly data?: (HostArray | undefined)[];
  readonly expected?: Expectation;
  readonly error?: string;
}

/** Inputs and reference outputs of a case, computed once for every backend. */
function reference(c: BenchCase): Reference {
  try {
    const data = makeInputs(c);
    return { data, expected: expectedOutputs(c, data) };
  } catch (error) {
    return { error: `reference: ${errorMessage(error)}` };
  }
}

async function runCase(
  backend: Backend,
  c: BenchCase,
  ref: () => Reference,
  timing: TimingOptions,
  ceiling: boolean,
): Promise<CaseResult> {
  let cost: KernelCost | undefined;
  try {
    cost = caseCost(c);
  } catch {
    cost = undefined;
  }
  const base = {
    backend: backend.name,
    id: c.id,
    family: c.family,
    kernel: c.spec.name,
    bound: c.bound,
    x: c.x,
    ...(cost ? { cost } : {}),
    ...(ceiling ? { ceiling } : {}),
  };
  const via = caseVia(c);
  const needs =
    via === 'batch' ? ['add', 'scale'] : via === 'run' || via === 'weightCache' ? [c.spec.name] : [];
  const missing = needs.find((name) => !backend.supports(name));
  if (missing)
    return { ...base, status: 'skipped', message: `${backend.name} does not implement ${missing}` };
  const { data, expected, error } = ref();
  if (error !== undefined || !data || !expected) {
    return { ...base, status: 'ERROR', message: error ?? 'no reference' };
  }
  try {
    const mismatch = await verifyOnBackend(backend, c, data, expected);
    if (mismatch !== undefined) return { ...base, status: 'FAILED', message: mismatch };
    return { ...base, status: 'ok', ...(await timeCase(backend, c, data, timing)) };
  } catch (err) {
    return { ...base, status: 'ERROR', message: errorMessage(err) };
  }
}

/** Computes a case's reference on first use only (a skipped case needs none). */
function lazyReference(c: BenchCase): () => Reference {
  let value: Reference | undefined;
  return () => {
    value ??= reference(c);
    return value;
  };
}

/**
 * Checks every case on every backend against the reference and times those
 * that pass; each backend's ceiling case comes first. Results are ordered by
 * backend, then case.
 */
export async function runBenchmarks(options: BenchOptions): Promise<CaseResult[]> {
  const { backends, cases, timing } = options;
  const ceilings = backends.map((b) => options.ceiling?.(b));
  const total = backends.length * cases.length + ceilings.filter((c) => c !== undefined).length;
  const results: CaseResult[][] = backends.map(() => []);
  let index = 0;
  const references = new Map<string, () => Reference>();
  for (const [b, backend] of backends.entries()) {
    const c = ceilings[b];
    if (!c) continue;
    if (!references.has(c.id)) references.set(c.id, lazyReference(c));
    options.onStart?.(++index, total, backend, c);
    const result = await runCase(backend, c, references.get(c.id)!, timing, true);
    results[b]!.push(result);
    options.onDone?.(result);
  }
  references.clear();
  for (const c of cases) {
    const ref = lazyReference(c);
    for (const [b, backend] of backends.entries()) {
      options.onStart?.(++index, total, backend, c);
      const result = await runCase(backend, c, ref, timing, false);
      results[b]!.push(result);
      options.onDone?.(result);
    }
  }
  return results.flat();
}
