import { type DType, f16BitsToF32, type HostArray, toHostArray, toNumbers } from '../dtype.js';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import {
  codeAt,
  codeRange,
  isQuantFormat,
  Q4K_SUPER_BLOCK,
  QUANT_FORMATS,
  type QuantFormat,
  type QuantLayout,
  q5kHighBit,
  quantLayout,
  zeroAt,
} from './layout.js';
import { q4kValue, quantizeQ4k } from './q4k.js';
import { quantizeQ5k } from './q5k.js';
import { q6kValue, quantizeQ6k } from './q6k.js';
import { nearestQuotient, positiveZero, reciprocalOf } from './rounding.js';

/** The float dtypes a scale may be stored in. */
export type ScaleDType = 'f32' | 'f16' | 'bf16';

/** A quantized weight on the host: what `uploadQuantized` puts on a device. */
export interface QuantizedHostWeight {
  readonly format: QuantFormat;
  /** Output rows. */
  readonly n: number;
  /** Weights per row (the product's K). */
  readonly k: number;
  /** [N, rowWords] codes, see layout.ts. */
  readonly packed: Uint32Array;
  /** [N, groups] in `scaleDType`. */
  readonly scales: HostArray;
  readonly scaleDType: ScaleDType;
  /**
   * Shape `[N, zeroWords]`: zero-point nibbles (q4g32, q4g128; absent: symmetric
   * around 8), or q4k's 6-bit sub-block scales and mins, or q6k's int8
   * sub-block scales (required there; q5k's as q4k's).
   */
  readonly zeros?: Uint32Array;
  /** [N, groups] in `scaleDType`: q4g32a's, q8g32a's, q5g32a's, q4k's and q5k's offsets (required there, absent elsewhere). */
  readonly offsets?: HostArray;
}

export interface QuantizeOptions {
  /** q4g32, q4g128 only: a zero point per group (asymmetric); default false (symmetric around 8). */
  readonly zeroPoints?: boolean;
  /** Default f32 for q8, q8g16, q4g32a and q8g32a, f16 for q4g32, q4g128, q8g32, q4k, q5k, q6k, q5g32 and q5g32a (see layout.ts). */
  readonly scaleDType?: ScaleDType;
}

const KERNEL = 'quantizeWeights';

/** How `quantizeWeights` stores `format`'s scales unless told: see layout.ts. */
export function defaultScaleDType(format: QuantFormat): ScaleDType {
  // q4k's and q5k's d and dmin, q6k's d and Q5_0's and Q5_1's d (and m) are f16 in the file.
  return format === 'q8' || format === 'q8g16' || format === 'q4g32a' || format === 'q8g32a' ? 'f32' : 'f16';
}
const fround = Math.fround;

function checkShape(values: ArrayLike<number>, n: number, k: number): void {
  if (!Number.isInteger(n) || !Number.isInteger(k) || n < 1 || k < 1 || values.length !== n * k) {
    throw new ShapeError('weights must hold N · K values', {
      operation: KERNEL,
      argument: 'values',
      expected: `N, K >= 1 and ${n} · ${k} = ${n * k} values`,
      actual: `N ${n}, K ${k}, ${values.length} values`,
    });
  }
}

/** The value a scale has once stored in `dtype`. */
function stored(dtype: ScaleDType, value: number): number {
  return toNumbers(dtype, toHostArray(dtype, [value]))[0]!;
}

/**
 * Quantizes a weight [N, K] (f32 numbers, or the raw words of f16/bf16
 * weights with `dtype`) to `format`, rounding to nearest (ties up). Each
 * scale is an f32 (a range times f32(1 / levels), see rounding.ts) rounded to
 * its storage, and the codes are the nearest to the exact quotient by the
 * stored scale, so dequantizing gives the nearest representable values and
 * the device kernel `quantizeRows` gives the same bits:
 * - q8: scale = max|w| / 127 per row, q = round(w / scale) in −127…127.
 * - q4 symmetric: scale = max|w| / 7 per group, q = round(w / scale) + 8 in 1…15;
 *   q5g32 the same around 16: scale = max|w| / 15, q in 1…31.
 * - q4 with zero points: the group's range widened to include 0, scale =
 *   (max − min) / 15, zero = round(−min / scale), q = round(w / scale) + zero in 0…15.
 * - q8g32, q8g16: scale = max|w| / 127 per group, q = round(w / scale) in −127…127.
 * - q4g32a: offset = −min, scale = (max − min) / 15 per group (each stored
 *   first), q = round((w + offset) / scale) in 0…15; q8g32a the same with
 *   scale = (max − min) / 255, offset = −128 · scale − min, q in −128…127;
 *   q5g32a with scale = (max − min) / 31, q in 0…31.
 * - q4k: see `quantizeQ4k`; q5k: see `quantizeQ5k`; q6k: see `quantizeQ6k` (K a multiple of 256 for all three).
 * Weights that are not finite are refused.
 */
export function quantizeWeights(
  values: ArrayLike<number>,
  shape: readonly [number, number],
  format: QuantFormat,
  options: QuantizeOptions & { dtype?: DType } = {},
): QuantizedHostWeight {
  if (!isQuantFormat(format)) {
    throw new InvalidArgumentError('unknown quantized format', {
      operation: KERNEL,
      argument: 'format',
      expected: QUANT_FORMATS.map((f) => `'${f}'`).join(' | '),
      actual: String(format),
    });
  }
  const [n, k] = shape;
  checkShape(values, n, k);
  const dtype = options.dtype ?? 'f32';
  if (dtype !== 'f32' && dtype !== 'f16' && dtype !== 'bf16') {
    throw new InvalidArgumentError('weights must be floats', {
      operation: KERNEL,
      argument: 'dtype',
      expected: 'f32 | f16 | bf16',
      actual: dtype,
    });
  }
  if (quantLayout(format, 1).subBlockScales && k % Q4K_SUPER_BLOCK !== 0) {
    throw new ShapeError(`${format} rows are whole super-blocks of 256 weights`, {
      operation: KERNEL,
      argument: 'shape',
      expected: 'K a multiple of 256',
      actual: `K ${k}`,
    });
  }
  const w = dtype === 'f32' ? values : halvesAsF32(dtype, values as HostArray);
  const zeroPoints = options.zeroPoints ?? false;
  if (zeroPoints && !quantLayout(format, k).zeroPoints) {
    throw new InvalidArgumentError(`${format} has no zero points`, {
      operation: KERNEL,
      argument: 'zeroPoints',
      expected: `false with ${format} (zero points are q4g32's and q4g128's)`,
      actual: 'true',
    });
  }
  const scaleDType = options.scaleDType ?? defaultScaleDType(format);
  if (scaleDType !== 'f32' && scaleDType !== 'f16' && scaleDType !== 'bf16') {
    throw new InvalidArgumentError('scales are stored as floats', {
      operation: KERNEL,
      argument: 'scaleDType',
      expected: 'f32 | f16 | bf16',
      actual: String(scaleDType),
    });
  }
  for (let i = 0; i < w.length; i++) {
    if (!Number.isFinite(w[i]!)) {
      throw new InvalidArgumentError('weights must be finite', {
        operation: KERNEL,
        argument: 'values',
        expected: 'finite weights',
        actual: `${w[i]} at row ${Math.floor(i / k)}, column ${i % k}`,
      });
    }
  }
  return quantizeFinite(w, n, k, format, zeroPoints, scaleDType);
}

/** Half-precision weights as f32 (exactly): bf16 by a shift of its bits, f16 through its decoder. */
function halvesAsF32(dtype: 'f16' | 'bf16', bits: HostArray): Float32Array {
  const out = new Float32Array(bits.length);
  if (dtype === 'bf16') {
    const words = new Uint32Array(out.buffer);
    for (let i = 0; i < bits.length; i++) words[i] = bits[i]! << 16;
  } else for (let i = 0; i < bits.length; i++) out[i] = f16BitsToF32(bits[i]!);
  return out;
}

/**
 * `quantizeWeights` without its checks, for finite numbers: a group holding
 * a weight that is not finite gets a NaN scale (and offset), codes 0 and
 * zero point 0, as the device kernel gives it.
 */
export function quantizeFinite(
  w: ArrayLike<number>,
  n: number,
  k: number,
  format: QuantFormat,
  zeroPoints: boolean,
  scaleDType: ScaleDType,
): QuantizedHostWeight {
  if (quantLayout(format, 1).subBlockScales) {
    // The super-block formats: a d per super-block (and q4k's and q5k's dmin) over sub-block scales of their own.
    const round = (value: number) => stored(scaleDType, value);
    const q: ReturnType<typeof quantizeQ6k> & { dmin?: Float64Array } =
      format === 'q4k'
        ? quantizeQ4k(w, n, k, round)
        : format === 'q5k'
          ? quantizeQ5k(w, n, k, round)
          : quantizeQ6k(w, n, k, round);
    return {
      format,
      n,
      k,
      packed: q.packed,
      scales: toHostArray(scaleDType, q.d),
      scaleDType,
      zeros: q.subScales,
      ...(q.dmin ? { offsets: toHostArray(scaleDType, q.dmin) } : {}),
    };
  }
  const layout = quantLayout(format, k);
  const packed = new Uint32Array(n * layout.rowWords);
  const scales = new Float64Array(n * layout.groups);
  const zeros = zeroPoints ? new Uint32Array(n * layout.zeroWords) : undefined;
  const offsets = layout.offsets ? new Float64Array(n * layout.groups) : undefined;
  const put = (row: number, kk: number, code: number) => {
    const at = row * layout.rowWords + Math.floor(kk / layout.perWord);
    // The 5-bit formats: a nibble as q4's, the high bit in the group's high word (see layout.ts).
    const shift = (layout.bits === 5 ? 4 : layout.bits) * (kk % layout.perWord);
    packed[at] = (packed[at]! | ((code & (layout.bits === 8 ? 0xff : 0xf)) << shift)) >>> 0;
    if (layout.bits === 5 && code > 15) {
      const high = row * layout.rowWords + 4 * layout.groups + (kk >> 5);
      packed[high] = (packed[high]! | (1 << q5kHighBit(kk & 31))) >>> 0;
    }
  };
  const rowEnd = layout.rowWords * layout.perWord;
  for (let row = 0; row < n; row++) {
    // Padding codes mean 0: byte 0 for q8, nibble 8 (or the zero point) for q4 (x is 0 there, and for q4g32a and q8g32a).
    for (let g = 0; g < layout.groups; g++) {
      const first = g * layout.groupSize;
      const last = Math.min(k, first + layout.groupSize);
      const end = Math.min(rowEnd, first + layout.groupSize);
      const at = row * layout.groups + g;
      let lo = 0;
      let hi = 0;
      let min = Number.POSITIVE_INFINITY;
      let max = Number.NEGATIVE_INFINITY;
      let finite = true;
      for (let kk = first; kk < last; kk++) {
        const v = w[row * k + kk]!;
        finite &&= Number.isFinite(v);
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
        min = Math.min(min, v);
        max = Math.max(max, v);
      }
      if (!finite) {
        scales[at] = Number.NaN;
        if (offsets) offsets[at] = Number.NaN;
        continue;
      }
      const value = (kk: number) => (kk < last ? w[row * k + kk]! : 0);
      if (offsets) {
        // The group's own range (not widened to 0): the lowest code (0, or −128 for int8) is its minimum,
        // the highest (15 or 127) its maximum.
        const { lowest, levels } = codeRange(layout);
        const low = positiveZero(min);
        const scale = stored(scaleDType, fround(fround(positiveZero(max) - low) * reciprocalOf(levels)));
        const offset = stored(scaleDType, fround(lowest * scale - low));
        scales[at] = scale;
        offsets[at] = offset;
        for (let kk = first; kk < end; kk++) {
          const q = scale > 0 ? nearestQuotient(fround(value(kk) + offset), scale) : lowest;
          put(row, kk, Math.min(lowest + levels, Math.max(lowest, q)));
        }
        continue;
      }
      lo = positiveZero(lo);
      hi = positiveZero(hi);
      const amax = Math.max(-lo, hi);
      const raw =
        layout.bits === 8
          ? fround(amax * reciprocalOf(127))
          : zeroPoints
            ? fround(fround(hi - lo) * reciprocalOf(15))
            : fround(amax * reciprocalOf(layout.offset - 1));
      const scale = stored(scaleDType, raw);
      scales[at] = scale;
      const zero =
        layout.bits === 8
          ? 0
          : zeroPoints
            ? scale > 0
              ? Math.min(15, nearestQuotient(-lo, scale))
              : 0
            : layout.offset;
      if (zeros) zeros[row * layout.zeroWords + (g >> 3)]! |= zero << (4 * (g % 8));
      const [qMin, qMax] = layout.bits === 8 ? [-127, 127] : [0, 2 * layout.offset - 1];
      for (let kk = first; kk < end; kk++) {
        const q = scale > 0 ? nearestQuotient(value(kk), scale) + zero : zero;
        put(row, kk, Math.min(qMax, Math.max(qMin, q)));
      }
    }
  }
  return {
    format,
    n,
    k,
    packed,
    scales: toHostArray(scaleDType, scales),
    scaleDType,
    ...(zeros ? { zeros } : {}),
    ...(offsets ? { offsets: toHostArray(scaleDType, offsets) } : {}),
  };
}

/**
 * The value of every weight, [N, K] row-major in f64: (q − zero) · scale,
 * exactly, for q8, q4g32 and q4g128; ggml's f32 values for the others
 * (f32(q · scale), f32((q − 16) · scale) for q5g32, f32(f32(q · scale) −
 * offset) for q4g32a, q8g32a and q5g32a,
 * q4k's and q5k's f32(f32(q · f32(d · sc)) − f32(dmin · m)) and q6k's
 * f32(f32(d · sc) · (q − 32))).
 */
export function dequantizeWeights(weight: QuantizedHostWeight): Float64Array {
  const { n, k } = weight;
  const layout = quantLayout(weight.format, k);
  const scales = toNumbers(weight.scaleDType, weight.scales);
  const offsets = weight.offsets ? toNumbers(weight.scaleDType, weight.offsets) : undefined;
  if (layout.offsets !== (offsets !== undefined)) {
    throw new InvalidArgumentError(`${weight.format} ${layout.offsets ? 'needs' : 'takes no'} offsets`, {
      operation: 'dequantizeWeights',
      argument: 'offsets',
      expected: layout.offsets ? '[N, groups] offsets' : 'none',
      actual: offsets ? `${offsets.length} offsets` : 'none',
    });
  }
  if (layout.subBlockScales && weight.zeros?.length !== n * layout.zeroWords) {
    throw new InvalidArgumentError(`${weight.format} needs its sub-block scales`, {
      operation: 'dequantizeWeights',
      argument: 'zeros',
      expected: `[N, ${layout.zeroWords}] words of ${weight.format === 'q6k' ? 'int8 scales' : '6-bit scales and mins'}`,
      actual: weight.zeros ? `${weight.zeros.length} words` : 'none',
    });
  }
  const out = new Float64Array(n * k);
  dequantizeInto(out, weight.packed, scales, weight.zeros, layout, n, k, offsets);
  return out;
}

/**
 * Writes the K weights of rows firstRow … firstRow + n − 1 into `out`, one
 * row after another (see `dequantizeWeights` for the value of each format);
 * shared with the kernels' references.
 */
export function dequantizeInto(
  out: Float64Array | Float32Array,
  packed: ArrayLike<number>,
  scales: ArrayLike<number>,
  zeros: ArrayLike<number> | undefined,
  layout: QuantLayout,
  n: number,
  k: number,
  offsets?: ArrayLike<number>,
  firstRow = 0,
): void {
  if (layout.bits === 6) {
    for (let i = 0; i < n; i++) {
      const row = firstRow + i;
      const at = { packed: row * layout.rowWords, scale: row * layout.groups, sub: row * layout.zeroWords };
      for (let kk = 0; kk < k; kk++) out[i * k + kk] = q6kValue(packed, kk, scales, zeros!, at);
    }
    return;
  }
  if (layout.subBlockScales) {
    for (let i = 0; i < n; i++) {
      const row = firstRow + i;
      const scaleAt = row * layout.groups;
      for (let kk = 0; kk < k; kk++) {
        const q = codeAt(packed, layout, row, kk);
        out[i * k + kk] = q4kValue(q, kk, scales, offsets!, zeros!, scaleAt, row * layout.zeroWords);
      }
    }
    return;
  }
  for (let i = 0; i < n; i++) {
    const row = firstRow + i;
    for (let kk = 0; kk < k; kk++) {
      const g = Math.floor(kk / layout.groupSize);
      const at = row * layout.groups + g;
      const zero = zeros ? zeroAt(zeros, layout, row, g) : layout.offset;
      const scaled = (codeAt(packed, layout, row, kk) - zero) * scales[at]!;
      out[i * k + kk] = !layout.f32Values
        ? scaled
        : offsets
          ? fround(fround(scaled) - offsets[at]!)
          : fround(scaled);
    }
  }
}

/** How far dequantized weights are from the originals. */
export interface QuantizationError {
  /** max |w − ŵ|. */
  readonly maxAbs: number;
  /** sqrt(Σ (w − ŵ)² / Σ w²): the error's size relative to the weights' (0 for all-zero weights). */
  readonly rmsRelative: number;
  /** max |w|, to put maxAbs in scale. */
  readonly maxWeight: number;
  /** Σ (w − ŵ)² and Σ w², to pool the error of several weights. */
  readonly sumSquaredError: number;
  readonly sumSquaredWeight: number;
}

/** The error `weight` introduces against `original` (f32 numbers, or f16/bf16 words with `dtype`). */
export function quantizationError(
  original: ArrayLike<number>,
  weight: QuantizedHostWeight,
  dtype: DType = 'f32',
): QuantizationError {
  checkShape(original, weight.n, weight.k);
  const w = dtype === 'f32' ? original : toNumbers(dtype, original as HostArray);
  const q = dequantizeWeights(weight);
  let maxAbs = 0;
  let maxWeight = 0;
  let sumSq = 0;
  let errSq = 0;
  for (let i = 0; i < q.length; i++) {
    const e = Math.abs(w[i]! - q[i]!);
    maxAbs = Math.max(maxAbs, e);
    maxWeight = Math.max(maxWeight, Math.abs(w[i]!));
    errSq += e * e;
    sumSq += w[i]! * w[i]!;
  }
  return {
    maxAbs,
    rmsRelative: sumSq > 0 ? Math.sqrt(errSq / sumSq) : 0,
    maxWeight,
    sumSquaredError: errSq,
    sumSquaredWeight: sumSq,
  };
}
