// What the benchmark cases share: the modes a case runs in, the tolerances
// its check allows, and the sizes above which the check samples the output.

import type { CheckTolerance } from './case.js';

export type Modes = { readonly quick?: boolean; readonly full?: boolean };
export const QUICK: Modes = { quick: true, full: false };
export const FULL: Modes = { quick: false, full: true };
export const BOTH: Modes = { quick: true, full: true };

export const MAX_TOL: CheckTolerance = { rtol: 1e-3, atol: 0, relativeTo: 'max' };
export const ELEMENT_TOL: CheckTolerance = { rtol: 1e-4, atol: 1e-6 };
export const EXACT: CheckTolerance = { rtol: 0, atol: 0 };
/** Quantized products on int8 blocks of x (the cuda backend's qgemvActivations: 'int8'). */
export const INT8_TOL: CheckTolerance = { rtol: 2e-2, atol: 0, relativeTo: 'max' };

/** GEMMs at or above this many multiply-adds check sampled rows only. */
export const FULL_CHECK_MACS = 512 ** 3;
export const SAMPLED_ROWS = 24;
/** Elementwise cases above this many elements check a sample of them. */
export const FULL_CHECK_ELEMENTS = 1 << 22;
export const SAMPLED_ELEMENTS = 1 << 16;

export const MIB = 2 ** 20;

export function modes(m: Modes) {
  return { quick: m.quick ?? false, full: m.full ?? false };
}

/** Unit roundoff of a storage dtype: half outputs are checked to a few of them. */
const UNIT_ROUNDOFF: Readonly<Record<'f16' | 'bf16', number>> = { f16: 2 ** -11, bf16: 2 ** -8 };

export function halfTolerance(dtype: 'f16' | 'bf16'): CheckTolerance {
  return { rtol: 4 * UNIT_ROUNDOFF[dtype], atol: 0, relativeTo: 'max' };
}
