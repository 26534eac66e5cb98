import * as k from '../../kernels/reduction.js';
import { type Shape, sizeOf } from '../../shape.js';
import {
  type FamilyCases,
  f32,
  type InputInit,
  invalidCalls,
  newFamilyCases,
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

const { cases, errors } = newFamilyCases();

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
    ...invalidCalls(spec, [
      ['rank 0', [f32([])], 'shape', 'x'],
      ['an unknown axis', [f32([3, 4])], 'argument', 'attrs.axis', { axis: 'first' as 'last' }],
    ]),
  );
}
// max of an empty axis is rejected too; the unit tests check it, since not every
// backend can hold a tensor of no elements.

// ---- argmax ---------------------------------------------------------------------

/** Row lengths: 1, odd, one under and at a warp, a vocabulary and one past it, primes, past 2^18. */
const ARGMAX_SHAPES: readonly Shape[] = [
  [1],
  [3],
  [31],
  [32],
  [32000],
  [32001],
  [100003],
  [262147],
  [7, 31],
  [2, 1],
  [1031, 3],
  [3, 5, 61],
  [5, 32000],
  [3, 32001],
  [2, 100003],
  [65537, 3],
];

/** Eight values (no zero): every row holds its maximum many times, so only the lowest index is right. */
const ties: InputInit = (rng, size) => Array.from({ length: size }, () => rng.int(-4, 4) + 0.5);

/**
 * Each row of `n` below 1 except 2 at three places, the first of them late
 * in the row and at a different lane for each row: a reduction that keeps
 * any but the lowest index of equal values fails.
 */
function lateTies(n: number): InputInit {
  return (rng, size) => {
    const x = Array.from({ length: size }, () => rng.uniform(-1, 1));
    for (let start = 0, r = 0; start < size; start += n, r++) {
      for (const j of [n - 1 - (r % n), Math.floor((3 * n) / 4), Math.floor(n / 2) + ((7 * r) % n)]) {
        x[start + Math.min(j, n - 1)] = 2;
      }
    }
    return x;
  };
}

/**
 * Rows in turn: ±Infinity and NaN (the first NaN wins), +Infinity twice, all
 * NaN, all -Infinity, and negative values around a -0 before a +0 (equal:
 * the -0 wins).
 */
function specials(n: number): InputInit {
  const nan = Number.NaN;
  const inf = Number.POSITIVE_INFINITY;
  return (rng, size) => {
    const x = Array.from({ length: size }, () => rng.uniform(-3, -1));
    const at = (start: number, j: number, v: number) => {
      x[start + Math.min(Math.max(j, 0), n - 1)] = v;
    };
    for (let start = 0, r = 0; start < size; start += n, r++) {
      const half = Math.floor(n / 2);
      switch (r % 5) {
        case 0:
          at(start, 0, inf);
          at(start, n - 1, nan);
          at(start, half + 1, nan);
          at(start, half, -inf);
          break;
        case 1:
          at(start, Math.floor(n / 3), inf);
          at(start, n - 1, inf);
          at(start, 0, -inf);
          break;
        case 2:
          x.fill(nan, start, start + n);
          break;
        case 3:
          x.fill(-inf, start, start + n);
          break;
        default:
          at(start, n - 1, 0);
          at(start, half, -0);
      }
    }
    return x;
  };
}

for (const shape of ARGMAX_SHAPES) {
  cases.push(valid(k.argmax, { label: `[${shape.join(', ')}]`, inputs: [f32(shape)] }));
}
for (const shape of [[7, 257], [32001]] as const) {
  cases.push(
    valid(k.argmax, { label: `[${shape.join(', ')}] of negative values`, inputs: [f32(shape, negative)] }),
  );
}
for (const shape of [
  [13, 61],
  [4, 32001],
] as const) {
  cases.push(
    valid(k.argmax, { label: `[${shape.join(', ')}] of eight values (ties)`, inputs: [f32(shape, ties)] }),
  );
}
for (const shape of [
  [9, 31],
  [6, 4099],
  [5, 32000],
  [2, 100003],
] as const) {
  const n = shape[shape.length - 1]!;
  cases.push(
    valid(k.argmax, { label: `[${shape.join(', ')}] with late ties`, inputs: [f32(shape, lateTies(n))] }),
    valid(k.argmax, {
      label: `[${shape.join(', ')}] with NaN, ±Infinity and ±0`,
      inputs: [f32(shape, specials(n))],
    }),
  );
}
cases.push(valid(k.argmax, { label: '[5, 1] of NaN, ±Infinity and ±0', inputs: [f32([5, 1], specials(1))] }));
errors.push(
  ...invalidCalls(k.argmax, [
    ['rank 0', [f32([])], 'shape', 'x'],
    ['i32 x', [{ shape: [3, 4], dtype: 'i32' }], 'dtype', 'x'],
    ['an attribute it does not have', [f32([3, 4])], 'argument', 'attrs.axis', { axis: 'last' } as never],
  ]),
);
// An empty last axis is rejected too; the unit tests check it.

export const reductionCases: FamilyCases = { cases, errors };
