import type { ConformanceCheck } from './conformance.js';
import { hashString } from './random.js';

/** A deterministic subset of a conformance suite's checks, and what it covers. */
export interface ConformanceSample {
  readonly checks: readonly ConformanceCheck[];
  /** Checks in the suite sampled from. */
  readonly total: number;
  /** Kernels with a valid case in the sample: every kernel of the suite. */
  readonly kernels: number;
  /**
   * Distinct kernel × variant pairs in the sample: every pair of the suite (of
   * dtypes only with `by: 'dtypes'`; one per kernel with `by: 'kernel'`).
   */
  readonly variants: number;
}

/**
 * What a sampled case stands for: `'variant'` (the default) every kernel ×
 * variant (dtypes, attributes, mode); `'dtypes'` every kernel × its inputs'
 * dtypes only; `'kernel'` every kernel once, in whichever variant hashes
 * lowest (so the dtypes spread over the kernels). The coarser grains are for
 * a platform whose shader compiles are slow and whose variants another
 * backend with the same shaders runs in full.
 */
export type SampleGrain = 'variant' | 'dtypes' | 'kernel';

/** The dtypes part of a `kernelCase.variant` (its first word). */
const dtypesOf = (variant: string) => variant.split(' ', 1)[0]!;

/**
 * Which of a pair's cases a sample keeps: `'spread'` (the default) the one
 * whose name hashes lowest, so the picks spread over the shapes; `'small'`
 * the one of fewest input and output elements among those of at least
 * `SMALL_CASE_ELEMENTS` (else the largest; the hash breaks ties), for a
 * platform where the work itself is slow (an interpreter) and whose shapes
 * another run covers: the cheapest case that still spans many threads.
 */
export type SamplePick = 'spread' | 'small';

/** The fewest elements of a `'small'` pick, where a case has them: more threads than a few warps. */
export const SMALL_CASE_ELEMENTS = 1024;

/**
 * One valid case of every kernel × variant (its inputs' dtypes, boolean and
 * string attributes and mode: see `ConformanceCheck.kernelCase`) and every
 * check that is no valid case (the Backend contract, views, replay, coverage
 * and error checks, which compile nothing). The pick is the same on every
 * run. For a second implementation of a backend already checked in full (the
 * browser's WebGPU beside Dawn's) or a slow stand-in for a device (the PTX
 * interpreter beside the GPU): every kernel and shader variant compiled and
 * run once, not every shape.
 */
export function sampleConformance(
  checks: readonly ConformanceCheck[],
  by: SampleGrain = 'variant',
  prefer: SamplePick = 'spread',
): ConformanceSample {
  const picked = new Map<string, ConformanceCheck>();
  const variant = (c: ConformanceCheck) =>
    by === 'kernel' ? '' : by === 'dtypes' ? dtypesOf(c.kernelCase!.variant) : c.kernelCase!.variant;
  const key = (c: ConformanceCheck) => `${c.kernelCase!.kernel}\u0000${variant(c)}`;
  // Under 'small', a case of enough elements ranks by its size, before any smaller one (larger first).
  const rank = (c: ConformanceCheck) => {
    if (prefer === 'spread') return 0;
    const n = c.kernelCase!.elements;
    return n >= SMALL_CASE_ELEMENTS ? n : Number.MAX_SAFE_INTEGER - n;
  };
  const before = (a: ConformanceCheck, b: ConformanceCheck) =>
    rank(a) < rank(b) || (rank(a) === rank(b) && hashString(a.name) < hashString(b.name));
  for (const check of checks) {
    if (!check.kernelCase) continue;
    const held = picked.get(key(check));
    if (!held || before(check, held)) picked.set(key(check), check);
  }
  const kept = new Set(picked.values());
  const sample = checks.filter((c) => !c.kernelCase || kept.has(c));
  return {
    checks: sample,
    total: checks.length,
    kernels: new Set([...kept].map((c) => c.kernelCase!.kernel)).size,
    variants: kept.size,
  };
}
