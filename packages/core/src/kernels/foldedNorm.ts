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

/** How a quantized product may take its activations (`activations`). */
export const QUANT_ACTIVATIONS = ['exact', 'int8'] as const;
export type QuantActivations = (typeof QUANT_ACTIVATIONS)[number];

/**
 * A backend's `qgemvActivations` switch: the small-M quantized products' x
 * as exact f32 (`f32`) or as int8 blocks (`int8`), whatever each call's
 * `activations` attribute allows; left out, a call's `activations: 'int8'`
 * takes the int8 path on cuda (wgpu's measured slower there, so only its
 * switch turns it on).
 */
export const QGEMV_ACTIVATION_CHOICES = ['f32', 'int8'] as const;
export type QgemvActivations = (typeof QGEMV_ACTIVATION_CHOICES)[number];

/** Whether a small-M product takes int8 activations: the switch where set, else the call's attribute. */
export function takesInt8Activations(
  activations: QuantActivations | undefined,
  forced: QgemvActivations | undefined,
): boolean {
  return forced === undefined ? activations === 'int8' : forced === 'int8';
}

/**
 * The `activations` attribute of the quantized products: 'int8' lets a
 * backend take x (after a folded norm) as int8 blocks of 32 along K, d =
 * max|x|/127 and q = round(x / d), as llama.cpp's quantized GEMVs do. The
 * reference stays exact; such a backend is within Σ over blocks of d/2 ·
 * Σ|w| of it (`int8ActivationBlocks` gives the blocks), and one that
 * multiplies x exactly meets the spec too.
 */
export const ACTIVATIONS_ATTR = {
  kind: 'enum',
  values: QUANT_ACTIVATIONS,
  default: 'exact',
  doc: "'int8': x may be taken as int8 blocks of 32 (d = max|x|/127), as llama.cpp's GEMVs take it; 'exact': never",
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
