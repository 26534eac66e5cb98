import type { TensorMeta } from '../kernel.js';
import type { ArgCheck } from './check.js';
import { FLOAT } from './vocabulary.js';

// An rmsNorm folded into the product after it: x̂ = rmsNorm(x, normWeight, eps)
// is never written; a kernel sums x² beside its dot products of x · normWeight
// and scales each row's sums by 1 / sqrt(mean(x²) + eps) in its epilogue.

/** The `eps` attribute of a spec with a folded norm. */
export const NORM_EPS = {
  kind: 'number',
  default: 1e-6,
  above: 0,
  doc: 'added to mean(x²) before the square root',
} as const;

/** NORM_EPS where the norm is optional (an absent `normWeight` leaves x as it is). */
export const OPTIONAL_NORM_EPS = {
  ...NORM_EPS,
  doc: `${NORM_EPS.doc} (unused without 'normWeight')`,
} as const;

/** The optional `normWeight` input: x̂ = rmsNorm(x, normWeight, eps) replaces x where given. */
export const NORM_WEIGHT_INPUT = {
  name: 'normWeight',
  dtypes: FLOAT,
  optional: true,
  doc: '[K]: rmsNorm of each row of x first',
} as const;

/** Checks normWeight [K] against x [M, K] (K >= 1: the norm of an empty row is undefined). */
export function checkNormWeight(check: ArgCheck, x: TensorMeta, normWeight: TensorMeta): void {
  const k = x.shape[1]!;
  check.rank('normWeight', normWeight, 1, '[K]');
  check.dim('normWeight', normWeight, 0, k, "K of 'x'");
  check.shape(k > 0, 'x', 'rmsNorm of an empty row is undefined', 'K of at least 1', x.shape);
}

/**
 * The rows of x [M, K] as the reference multiplies them: x · normWeight / sqrt(mean(x²) + eps)
 * in f64 where `normWeight` is given, x itself otherwise.
 */
export function normedRows(
  x: ArrayLike<number>,
  normWeight: ArrayLike<number> | undefined,
  eps: number,
  m: number,
  k: number,
): ArrayLike<number> {
  if (!normWeight) return x;
  const out = new Float64Array(m * k);
  for (let i = 0; i < m; i++) {
    let sumSq = 0;
    for (let p = 0; p < k; p++) sumSq += x[i * k + p]! ** 2;
    const s = 1 / Math.sqrt(sumSq / k + eps);
    for (let p = 0; p < k; p++) out[i * k + p] = x[i * k + p]! * normWeight[p]! * s;
  }
  return out;
}
