import { InvalidArgumentError } from '../errors.js';
import type { ArgCheck } from './check.js';
import { F32 } from './vocabulary.js';

/**
 * How a model scales RoPE's inverse frequencies theta^(−2i/headDim):
 * - `linear`: every frequency divided by `factor` (positions interpolated);
 * - `llama3`: Llama 3.1's smooth split: wavelengths shorter than
 *   originalMaxPositionEmbeddings / highFreqFactor kept, longer than
 *   originalMaxPositionEmbeddings / lowFreqFactor divided by `factor`, and
 *   those between interpolated;
 * - `frequencyFactors`: frequency i divided by `factors[i]` (a GGUF file's
 *   `rope_freqs.weight`, llama.cpp's form of the llama3 scaling).
 */
export type RopeScaling =
  | { readonly type: 'linear'; readonly factor: number }
  | {
      readonly type: 'llama3';
      readonly factor: number;
      readonly lowFreqFactor: number;
      readonly highFreqFactor: number;
      readonly originalMaxPositionEmbeddings: number;
    }
  | { readonly type: 'frequencyFactors'; readonly factors: readonly number[] };

const KERNEL = 'ropeFrequencies';

function invalid(argument: string, message: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(message, { operation: KERNEL, argument, expected, actual: String(actual) });
}

/** A factor that only slows rotations: finite and at least 1, so every frequency stays at most 1. */
function checkFactor(argument: string, value: number): void {
  if (!(Number.isFinite(value) && value >= 1))
    invalid(argument, 'a RoPE scaling factor must be at least 1', 'a finite number >= 1', value);
}

function checkScaling(scaling: RopeScaling, half: number): void {
  switch (scaling.type) {
    case 'linear':
      checkFactor('scaling.factor', scaling.factor);
      return;
    case 'llama3': {
      checkFactor('scaling.factor', scaling.factor);
      const { lowFreqFactor: low, highFreqFactor: high, originalMaxPositionEmbeddings: original } = scaling;
      if (!(Number.isFinite(low) && low > 0))
        invalid('scaling.lowFreqFactor', 'the low frequency factor must be positive', 'a number > 0', low);
      if (!(Number.isFinite(high) && high > low))
        invalid(
          'scaling.highFreqFactor',
          'the high frequency factor must exceed the low one',
          `a number > lowFreqFactor (${low})`,
          high,
        );
      if (!(Number.isFinite(original) && original > 0))
        invalid(
          'scaling.originalMaxPositionEmbeddings',
          'the original context length must be positive',
          'a number > 0',
          original,
        );
      return;
    }
    case 'frequencyFactors':
      if (scaling.factors.length !== half)
        invalid(
          'scaling.factors',
          'one factor per rotated pair is needed',
          `${half} factors (headDim / 2)`,
          scaling.factors.length,
        );
      scaling.factors.forEach((f, i) => {
        checkFactor(`scaling.factors[${i}]`, f);
      });
      return;
    default:
      invalid(
        'scaling.type',
        'unknown RoPE scaling',
        "'linear' | 'llama3' | 'frequencyFactors'",
        (scaling as { type: unknown }).type,
      );
  }
}

/**
 * RoPE's inverse frequencies, radians per position of each rotated pair
 * ([headDim / 2], f32), as `transformers` computes `inv_freq`: the base
 * 1 / theta^(2i/headDim) scaled by `scaling` (none: the plain frequencies),
 * in f64 and rounded once to f32. It is the `frequencies` input of `rope`
 * and `ropeKvScatter`. theta >= 1 and factors >= 1 keep every frequency in
 * (0, 1], the range those kernels take.
 */
export function ropeFrequencies(theta: number, headDim: number, scaling?: RopeScaling): Float32Array {
  if (!(Number.isFinite(theta) && theta >= 1))
    invalid('theta', 'the RoPE base must be at least 1', 'a finite number >= 1', theta);
  if (!(Number.isInteger(headDim) && headDim >= 2 && headDim % 2 === 0))
    invalid('headDim', 'the head dimension must be even', 'an even integer >= 2', headDim);
  const half = headDim / 2;
  if (scaling !== undefined) checkScaling(scaling, half);
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    const base = 1 / theta ** ((2 * i) / headDim);
    out[i] = scaled(base, i, scaling);
  }
  return out;
}

function scaled(base: number, i: number, scaling: RopeScaling | undefined): number {
  if (scaling === undefined) return base;
  switch (scaling.type) {
    case 'linear':
      return base / scaling.factor;
    case 'frequencyFactors':
      return base / scaling.factors[i]!;
    case 'llama3': {
      // Exact at both ends: smooth 1 gives base, smooth 0 gives base / factor.
      const smooth = llama3Smoothing(scaling, (2 * Math.PI) / base);
      return ((1 - smooth) * base) / scaling.factor + smooth * base;
    }
  }
}

/**
 * Llama 3.1's share of a frequency that is kept, by its wavelength: 1 for
 * wavelengths shorter than original / highFreqFactor, 0 (the frequency
 * divided by `factor`) for those longer than original / lowFreqFactor, and
 * linear in original / wavelength between. Shared with the GGUF converter,
 * which writes the same scaling as llama.cpp's per-pair factors.
 */
export function llama3Smoothing(
  scaling: Extract<RopeScaling, { type: 'llama3' }>,
  wavelength: number,
): number {
  const { lowFreqFactor: low, highFreqFactor: high, originalMaxPositionEmbeddings: original } = scaling;
  if (wavelength < original / high) return 1;
  if (wavelength > original / low) return 0;
  return (original / wavelength - low) / (high - low);
}

/**
 * The optional table of inverse frequencies that `rope` and `ropeKvScatter`
 * take in place of theta's (scaled RoPE: `ropeFrequencies`).
 */
export const FREQUENCIES_INPUT = {
  name: 'frequencies',
  dtypes: F32,
  optional: true,
  doc: "[headDim / 2] f32, each in [0, 1]: pair i's radians per position, in place of theta^(−2i/headDim) (theta is then unused); scaled RoPE's, from ropeFrequencies",
} as const;

/** A frequency table's shape: [headDim / 2]. */
export function checkFrequencies(check: ArgCheck, shape: readonly number[], headDim: number): void {
  check.shape(
    shape.length === 1 && shape[0] === headDim / 2,
    'frequencies',
    'one frequency per rotated pair',
    `[${headDim / 2}] (headDim / 2)`,
    shape,
  );
}

/** A frequency table's values, which must lie in [0, 1] (a device would rotate others inaccurately). */
export function frequencyValues(kernel: string, table: ArrayLike<number>): number[] {
  const values = Array.from(table);
  const bad = values.findIndex((f) => !(f >= 0 && f <= 1));
  if (bad >= 0) {
    throw new InvalidArgumentError('a RoPE frequency is outside [0, 1]', {
      operation: kernel,
      argument: 'frequencies',
      expected: 'every frequency in [0, 1] radians per position',
      actual: `${values[bad]} at index ${bad}`,
    });
  }
  return values;
}
