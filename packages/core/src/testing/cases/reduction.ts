import * as k from '../../kernels/reduction.js';
import { type Shape, sizeOf } from '../../shape.js';
import {
  type AnyConformanceCase,
  type AnyErrorCase,
  type FamilyCases,
  f32,
  type InputInit,
  invalid,
  type Tolerance,
  valid,
} from '../cases.js';

/** Over the last axis: one row, rows of length 1, many short rows, long rows, a batch of rows. */
const LAST_SHAPES: readonly Shape[] = [
  [1],
  [13],
  [4099],
  [1, 4099],
  [2, 1],
  [7, 13],
  [1031, 3],
  [3, 5, 61],
  [65537, 3],
  [67, 4099],
];
/** Over everything, up to a million elements. */
const ALL_SHAPES: readonly Shape[] = [[1], [61], [13, 7], [65537], [3, 5, 67], [1031, 257], [1000003]];

/** Every value negative: a max that starts from 0 instead of the first element fails. */
const negative: InputInit = (rng, size) => Array.from({ length: size }, () => rng.uniform(-3, -1));

/**
 * A float32 sum of `length` values in [-1, 1) is off by about u · |partial sums| per
 * addition. A thread may sum a row of a few thousand in order (error growing
 * like the length); longer runs are split over threads and trees, which keeps
 * the error near 1e-7 of the length.
 */
function sumTolerance(length: number): Tolerance {
  return { rtol: 1e-5, atol: length <= 4099 ? 5e-7 * Math.max(length, 20) : 1e-7 * length };
}

/** Positive terms do not cancel: the error stays relative (about 1e-6 for 4099 terms in order). */
const SUM_SQUARES_TOLERANCE: Tolerance = { rtol: 1e-5, atol: 1e-5 };
/** The max is one of the inputs: exact. */
const EXACT: Tolerance = { rtol: 0, atol: 0 };

const cases: AnyConformanceCase[] = [];
const errors: AnyErrorCase[] = [];

for (const spec of [k.sum, k.max, k.sumSquares]) {
  const tolerance = (length: number) =>
    spec === k.sum ? sumTolerance(length) : spec === k.max ? EXACT : SUM_SQUARES_TOLERANCE;
  for (const shape of LAST_SHAPES) {
    cases.push(
      valid(spec, {
        label: `[${shape.join(', ')}] over the last axis`,
        inputs: [f32(shape)],
        attrs: { axis: 'last' },
        tolerance: tolerance(shape[shape.length - 1]!),
      }),
    );
  }
  for (const shape of ALL_SHAPES) {
    cases.push(
      valid(spec, {
        label: `[${shape.join(', ')}] over everything`,
        inputs: [f32(shape)],
        attrs: { axis: 'all' },
        tolerance: tolerance(sizeOf(shape)),
      }),
    );
  }
  cases.push(
    valid(spec, {
      label: '[7, 257] of negative values, default axis',
      inputs: [f32([7, 257], negative)],
      tolerance: tolerance(257),
    }),
    valid(spec, {
      label: '[4099] of negative values over everything',
      inputs: [f32([4099], negative)],
      attrs: { axis: 'all' },
      tolerance: tolerance(4099),
    }),
  );
  errors.push(
    invalid(spec, { label: 'rank 0', inputs: [f32([])], error: 'shape', argument: 'x' }),
    invalid(spec, {
      label: 'an unknown axis',
      inputs: [f32([3, 4])],
      attrs: { axis: 'first' as 'last' },
      error: 'argument',
      argument: 'attrs.axis',
    }),
  );
}
// max of an empty axis is rejected too; the unit tests check it, since not every
// backend can hold a tensor of no elements.

export const reductionCases: FamilyCases = { cases, errors };
