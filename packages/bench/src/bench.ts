import { type Backend, type HostArray, inferKernel, type KernelCost, type Tensor } from '@rayo/core';
import { type BenchCase, caseCost } from './suite.js';
import { measure, summarize, type TimingOptions, type TimingStats } from './timing.js';
import {
  disposeAll,
  type Expectation,
  expectedOutputs,
  makeInputs,
  uploadInputs,
  verifyOnBackend,
} from './verify.js';

/**
 * - `ok`: the result matched the reference and was timed
 * - `FAILED`: the result did not match the reference (not timed)
 * - `ERROR`: the backend (or the reference) threw
 * - `skipped`: the backend does not implement the kernel
 */
export type CaseStatus = 'ok' | 'FAILED' | 'ERROR' | 'skipped';

export interface CaseResult {
  readonly backend: string;
  readonly id: string;
  readonly kernel: string;
  readonly status: CaseStatus;
  /** Why a case failed, errored or was skipped. */
  readonly message?: string;
  /** Milliseconds per run (status `ok` only). */
  readonly timing?: TimingStats;
  readonly cost?: KernelCost;
}

export function isFailure(result: CaseResult): boolean {
  return result.status === 'FAILED' || result.status === 'ERROR';
}

export interface BenchOptions {
  readonly backends: readonly Backend[];
  readonly cases: readonly BenchCase[];
  readonly timing: TimingOptions;
  /** Called before each backend × case; `index` counts from 1. */
  readonly onStart?: (index: number, total: number, backend: Backend, c: BenchCase) => void;
  readonly onDone?: (result: CaseResult) => void;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message.split('\n')[0]! : String(error);
}

/** Times `c` on `backend` with preallocated outputs; in-place outputs stay their inputs. */
async function timeCase(
  backend: Backend,
  c: BenchCase,
  data: readonly (HostArray | undefined)[],
  timing: TimingOptions,
): Promise<TimingStats> {
  const inputs = uploadInputs(backend, c, data);
  const owned = new Set<Tensor | undefined>(inputs);
  try {
    const metas = inputs.map((t) => (t ? { shape: t.shape, dtype: t.dtype } : undefined));
    const { outputs: declared } = inferKernel(c.spec, metas, c.attrs);
    // The first run allocates the outputs and counts as the first warm-up run.
    const first = backend.run(c.spec, inputs, c.attrs);
    for (const t of first) owned.add(t);
    await backend.sync();
    const out = first.map((t, i) => (declared[i]?.aliasOf === undefined ? t : undefined));
    const samples = await measure(
      async () => {
        const results = backend.run(c.spec, inputs, c.attrs, { out });
        for (const t of results) if (!owned.has(t)) t.dispose();
        await backend.sync();
      },
      { ...timing, warmup: Math.max(0, timing.warmup - 1) },
    );
    return summarize(samples);
  } finally {
    disposeAll(owned);
  }
}

/**
 * Checks every case on every backend against the reference and times those
 * that pass. Results are ordered by backend, then case.
 */
export async function runBenchmarks(options: BenchOptions): Promise<CaseResult[]> {
  const { backends, cases, timing } = options;
  const total = backends.length * cases.length;
  const results: CaseResult[][] = backends.map(() => []);
  let index = 0;
  for (const c of cases) {
    let cost: KernelCost | undefined;
    try {
      cost = caseCost(c);
    } catch {
      cost = undefined;
    }
    // Inputs and the reference are computed once per case, for every backend.
    let data: (HostArray | undefined)[] | undefined;
    let expected: Expectation | undefined;
    let referenceError: string | undefined;
    for (const [b, backend] of backends.entries()) {
      index++;
      options.onStart?.(index, total, backend, c);
      const base = { backend: backend.name, id: c.id, kernel: c.spec.name, ...(cost ? { cost } : {}) };
      let result: CaseResult;
      if (!backend.supports(c.spec.name)) {
        result = { ...base, status: 'skipped', message: `${backend.name} does not implement ${c.spec.name}` };
      } else {
        if (!data && referenceError === undefined) {
          try {
            data = makeInputs(c);
            expected = expectedOutputs(c, data);
          } catch (error) {
            referenceError = `reference: ${errorMessage(error)}`;
          }
        }
        if (referenceError !== undefined || !data || !expected) {
          result = { ...base, status: 'ERROR', message: referenceError ?? 'no reference' };
        } else {
          try {
            const mismatch = await verifyOnBackend(backend, c, data, expected);
            result =
              mismatch === undefined
                ? { ...base, status: 'ok', timing: await timeCase(backend, c, data, timing) }
                : { ...base, status: 'FAILED', message: mismatch };
          } catch (error) {
            result = { ...base, status: 'ERROR', message: errorMessage(error) };
          }
        }
      }
      results[b]!.push(result);
      options.onDone?.(result);
    }
  }
  return results.flat();
}
