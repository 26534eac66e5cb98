import type { ConformanceCheck } from './conformance.js';
import { hashString } from './random.js';

/** A deterministic subset of a conformance suite's checks, and what it covers. */
export interface ConformanceSample {
  readonly checks: readonly ConformanceCheck[];
  /** Checks in the suite sampled from. */
  readonly total: number;
  /** Kernels with a valid case in the sample: every kernel of the suite. */
  readonly kernels: number;
  /** Distinct kernel × variant pairs in the sample: every pair of the suite (of dtypes only, with `by: 'dtypes'`). */
  readonly variants: number;
}

/**
 * What a sampled case stands for: `'variant'` (the default) every kernel ×
 * variant (dtypes, attributes, mode); `'dtypes'` every kernel × its inputs'
 * dtypes only, for a platform whose shader compiles are slow and whose
 * layouts and attributes another backend with the same shaders runs in full.
 */
export type SampleGrain = 'variant' | 'dtypes';

/** The dtypes part of a `kernelCase.variant` (its first word). */
const dtypesOf = (variant: string) => variant.split(' ', 1)[0]!;

/**
 * One valid case of every kernel × variant (its inputs' dtypes, boolean and
 * string attributes and mode: see `ConformanceCheck.kernelCase`) and every
 * check that is no valid case (the Backend contract, views, replay, coverage
 * and error checks, which compile nothing). Of a pair's cases the one whose
 * name hashes lowest is kept, so the pick is the same on every run and
 * spread over the shapes. For a second implementation of a backend already
 * checked in full (the browser's WebGPU beside Dawn's): every kernel and
 * shader variant compiled and run once, not every shape.
 */
export function sampleConformance(
  checks: readonly ConformanceCheck[],
  by: SampleGrain = 'variant',
): ConformanceSample {
  const picked = new Map<string, ConformanceCheck>();
  const variant = (c: ConformanceCheck) =>
    by === 'dtypes' ? dtypesOf(c.kernelCase!.variant) : c.kernelCase!.variant;
  const key = (c: ConformanceCheck) => `${c.kernelCase!.kernel}\u0000${variant(c)}`;
  for (const check of checks) {
    if (!check.kernelCase) continue;
    const held = picked.get(key(check));
    if (!held || hashString(check.name) < hashString(held.name)) picked.set(key(check), check);
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
