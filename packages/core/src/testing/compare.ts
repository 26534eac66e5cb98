import type { DType, HostArray } from '../dtype.js';
import { bf16BitsToF32, f16BitsToF32 } from '../dtype.js';
import type { Tolerance } from './cases.js';

export const DEFAULT_TOLERANCE = { rtol: 1e-5, atol: 1e-5 } as const;

/**
 * Compares a backend's output with the reference: |a − e| <= atol + rtol·|e|
 * for floats (NaN only where the reference has NaN), exact for integers.
 * Returns `undefined` when they agree, or a description of the mismatch.
 */
export function compareOutputs(
  dtype: DType,
  actual: HostArray,
  expected: HostArray,
  tolerance: Tolerance = {},
): string | undefined {
  if (actual.length !== expected.length) return `length ${actual.length}, expected ${expected.length}`;
  const exact = dtype === 'i32' || dtype === 'u32';
  const rtol = exact ? 0 : (tolerance.rtol ?? DEFAULT_TOLERANCE.rtol);
  const atol = exact ? 0 : (tolerance.atol ?? DEFAULT_TOLERANCE.atol);
  // Equal words agree (a half's equal bits are one value, NaN included);
  // others are decoded, halves from their bits, and compared as numbers.
  const decode = dtype === 'f16' ? f16BitsToF32 : dtype === 'bf16' ? bf16BitsToF32 : (v: number) => v;
  let bad = 0;
  let first = -1;
  let worst = 0;
  for (let i = 0; i < actual.length; i++) {
    const rawActual = actual[i]!;
    const rawExpected = expected[i]!;
    if (rawActual === rawExpected) continue;
    const x = decode(rawActual);
    const y = decode(rawExpected);
    let ok: boolean;
    if (Number.isNaN(y)) ok = Number.isNaN(x);
    else if (!Number.isFinite(y)) ok = x === y;
    else ok = Math.abs(x - y) <= atol + rtol * Math.abs(y);
    if (!ok) {
      bad++;
      if (first < 0) first = i;
      const err = Math.abs(x - y);
      if (!(err <= worst)) worst = err;
    }
  }
  if (bad === 0) return undefined;
  return (
    `${bad} of ${actual.length} elements differ (rtol ${rtol}, atol ${atol}); ` +
    `first at [${first}]: got ${decode(actual[first]!)}, expected ${decode(expected[first]!)}; max |error| ${worst}`
  );
}
