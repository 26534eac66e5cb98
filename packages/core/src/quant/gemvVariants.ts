import { type QuantFormat, type QuantLayout, quantLayout } from './layout.js';

// The small-M quantized GEMV (M <= 4 rows of x; decoding has one), as both GPU
// backends build it: a block (workgroup) of 8 groups of 32 lanes, lane l of a
// group reading code word l of a 32-lane run of `cols` rows of W, `words`
// u32 words per lane and step; the groups of a block split K into `slices`
// when N alone gives too few groups for the GPU. The variants name the
// shapes to measure; which one a product takes is each backend's tuning.

/**
 * The variants: `a` is a backend's other small-M kernel (its quantized.ts:
 * x staged per tile), the others this GEMV with C columns per group and W
 * words per lane and step.
 */
export const QGEMV_VARIANTS = ['a', 'b', 'c', 'd'] as const;
export type QgemvVariant = (typeof QGEMV_VARIANTS)[number];
/** The variants that are this GEMV (all but `a`). */
export type QgemvShapeVariant = Exclude<QgemvVariant, 'a'>;

/** Columns of y per group of 32 lanes, and u32 code words per lane and step (one load, vec2 or vec4). */
export interface QgemvShape {
  readonly cols: number;
  readonly words: 1 | 2 | 4;
}

export const QGEMV_SHAPES: Readonly<Record<QgemvShapeVariant, QgemvShape>> = {
  b: { cols: 4, words: 1 },
  c: { cols: 2, words: 2 },
  d: { cols: 8, words: 1 },
};

/** The shape taken where nothing asks for another, and by the gate·up pair (variant `a` has none). */
export const DEFAULT_QGEMV_VARIANT: QgemvShapeVariant = 'c';

/** The formats the GEMV reads: int8 rows and 4-bit groups of 32 or 128. */
export const QGEMV_FORMATS = ['q8', 'q4g32', 'q4g128'] as const satisfies readonly QuantFormat[];
export type QgemvFormat = (typeof QGEMV_FORMATS)[number];

export function isQgemvFormat(format: string): format is QgemvFormat {
  return (QGEMV_FORMATS as readonly string[]).includes(format);
}

/** The splits of K among a block's groups. */
export const QGEMV_SLICES = [1, 2, 4, 8] as const;
export type QgemvSlices = (typeof QGEMV_SLICES)[number];

/** Groups of 32 lanes per block (256 threads). */
export const QGEMV_GROUPS = 8;
/** Groups per SM (or compute unit) the split aims at: three blocks, all resident at once (one wave, no tail). */
const TARGET_GROUPS_PER_UNIT = 3 * QGEMV_GROUPS;

/**
 * Groups of a block that split K: doubled while the grid stays within about
 * three resident blocks per SM (`units` of them) and each group keeps at
 * least one step of K (`perWord` weights per code word).
 */
export function qgemvSlicesFor(
  n: number,
  k: number,
  shape: QgemvShape,
  perWord: number,
  units: number,
): QgemvSlices {
  const groups = Math.ceil(n / shape.cols);
  const steps = Math.ceil(k / (perWord * shape.words * 32));
  let slices = 1;
  while (
    slices < QGEMV_GROUPS &&
    groups * slices * 2 <= units * TARGET_GROUPS_PER_UNIT &&
    steps >= slices * 2
  )
    slices *= 2;
  return slices as QgemvSlices;
}

/** The shape the gate·up pair takes for a chosen variant: the default where none is chosen or `a` (no pair kernel). */
export function qgemvPairVariant(chosen: QgemvVariant | undefined): QgemvShapeVariant {
  return chosen === undefined || chosen === 'a' ? DEFAULT_QGEMV_VARIANT : chosen;
}

/** The sizes of one GEMV call, as both GPU backends launch it. */
export interface QgemvProblem {
  /** Rows of x and y, the reduced dimension, columns of y. */
  readonly m: number;
  readonly k: number;
  readonly n: number;
  readonly shape: QgemvShape;
  readonly layout: QuantLayout;
  /** The K split among a block's groups: the tuned one, else `qgemvSlicesFor`. */
  readonly slices: QgemvSlices;
}

/**
 * The GEMV of `variant` for x [M, K] into y [M, N] of `format` weights on a
 * device of `units` SMs (compute units); undefined where y is empty (nothing
 * to launch).
 */
export function qgemvProblem(
  variant: QgemvShapeVariant,
  xShape: readonly number[],
  yShape: readonly number[],
  format: QuantFormat,
  device: { readonly units: number; readonly slices: QgemvSlices | undefined },
): QgemvProblem | undefined {
  const [m, k] = xShape as [number, number];
  const n = yShape[1]!;
  if (m === 0 || n === 0) return undefined;
  const shape = QGEMV_SHAPES[variant];
  const layout = quantLayout(format, k);
  const slices = device.slices ?? qgemvSlicesFor(n, k, shape, layout.perWord, device.units);
  return { m, k, n, shape, layout, slices };
}
