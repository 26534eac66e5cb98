import * as k from '../../kernels/memory.js';
import {
  type FamilyCases,
  f32,
  i32,
  invalidCalls,
  newFamilyCases,
  ODD_LENGTHS,
  u32,
  valid,
} from '../cases.js';

// Moving data must be bit-exact.
const EXACT = { rtol: 0, atol: 0 } as const;

const { cases, errors } = newFamilyCases();

// ---- fill ------------------------------------------------------------------

for (const n of ODD_LENGTHS) {
  cases.push(
    valid(k.fill, { label: `[${n}] = -1.5`, inputs: [f32([n])], attrs: { value: -1.5 }, tolerance: EXACT }),
  );
}
cases.push(
  valid(k.fill, { label: '[] = 2.25', inputs: [f32([])], attrs: { value: 2.25 }, tolerance: EXACT }),
  valid(k.fill, { label: '[7, 13] = 0', inputs: [f32([7, 13])], attrs: { value: 0 }, tolerance: EXACT }),
  valid(k.fill, {
    label: '[1031, 97] = 0.1 (rounded to f32)',
    inputs: [f32([1031, 97])],
    attrs: { value: 0.1 },
    tolerance: EXACT,
  }),
  valid(k.fill, {
    label: '[3, 67] = -Infinity (a mask)',
    inputs: [f32([3, 67])],
    attrs: { value: Number.NEGATIVE_INFINITY },
    tolerance: EXACT,
  }),
  valid(k.fill, { label: 'i32 [61] = -7', inputs: [i32([61], 1, 100)], attrs: { value: -7 } }),
  valid(k.fill, {
    label: 'i32 [1031, 97] = -2^31',
    inputs: [i32([1031, 97], -100, 100)],
    attrs: { value: -(2 ** 31) },
  }),
  valid(k.fill, {
    label: 'u32 [65537] = 2^32 - 1',
    inputs: [u32([65537], 1, 1000)],
    attrs: { value: 2 ** 32 - 1 },
  }),
  valid(k.fill, { label: 'u32 [13] = 0', inputs: [u32([13], 1, 1000)], attrs: { value: 0 } }),
);

errors.push(
  ...invalidCalls(k.fill, [
    ['value missing', [f32([4])], 'argument', 'attrs.value', {}],
    ['a fraction into i32', [i32([4], -5, 5)], 'argument', 'attrs.value', { value: 2.5 }],
    ['2^31 into i32', [i32([4], -5, 5)], 'argument', 'attrs.value', { value: 2 ** 31 }],
    ['a negative value into u32', [u32([4], 1, 5)], 'argument', 'attrs.value', { value: -1 }],
  ]),
);

// ---- copy ------------------------------------------------------------------

for (const n of ODD_LENGTHS)
  cases.push(valid(k.copy, { label: `[${n}]`, inputs: [f32([n], 'wide')], tolerance: EXACT }));
cases.push(
  valid(k.copy, { label: '[]', inputs: [f32([])], tolerance: EXACT }),
  valid(k.copy, { label: '[3, 5, 7]', inputs: [f32([3, 5, 7])], tolerance: EXACT }),
  valid(k.copy, { label: 'i32 [1031, 97]', inputs: [i32([1031, 97], -(2 ** 31), 2 ** 31 - 1)] }),
  valid(k.copy, { label: 'u32 [257]', inputs: [u32([257], 0, 2 ** 32 - 1)] }),
);
// copy has one input of any shape: its only bad inputs are the derived dtype,
// disposed and cross-backend ones.

// ---- increment -------------------------------------------------------------------

// One counter (what a decode step advances), several of odd sizes in one launch, an empty one
// among them, a negative step, and the wrap at the ends of i32.
const MAX_I32 = 2 ** 31 - 1;
for (const [label, shapes, by, lo, hi] of [
  ['[1] += 1', [[1]], 1, 0, 4096],
  ['[1], [1] += 1 (position and length)', [[1], [1]], 1, 0, 4096],
  ['[7], [], [3, 5], [1031] += -3', [[7], [], [3, 5], [1031]], -3, -1000, 1000],
  ['[65537], [13] += 2^31 - 1 (wraps)', [[65537], [13]], MAX_I32, -MAX_I32, MAX_I32],
  ['[5] += -2^31 (wraps)', [[5]], -(2 ** 31), -MAX_I32, MAX_I32],
  ['six counters [1], [2], [3], [4], [5], [6] += 7', [[1], [2], [3], [4], [5], [6]], 7, -99, 99],
] as const) {
  cases.push(
    valid(k.increment, {
      label,
      inputs: shapes.map((shape) => i32([...shape], lo, hi)),
      attrs: { by },
    }),
  );
}
errors.push(
  ...invalidCalls(k.increment, [
    ['by missing', [i32([1], 0, 9)], 'argument', 'attrs.by', {}],
    ['a fraction', [i32([1], 0, 9)], 'argument', 'attrs.by', { by: 0.5 }],
    ['2^31', [i32([1], 0, 9)], 'argument', 'attrs.by', { by: 2 ** 31 }],
    ['an f32 counter', [i32([1], 0, 9), { shape: [1], dtype: 'f32' }], 'dtype', 'counters[1]', { by: 1 }],
  ]),
);

// ---- copyRows ------------------------------------------------------------------

// Rows at the start, the middle and the end; rows of odd lengths (a half row's bytes not a multiple
// of 4), one element, rank 1 and 3; x of zero rows.
for (const [yShape, xShape, row] of [
  [[7, 13], [3, 13], 2],
  [[5, 3], [1, 3], 1],
  [[5, 3], [2, 3], 3],
  [[6, 1], [1, 1], 5],
  [[9], [4], 0],
  [[4, 3, 5], [2, 3, 5], 1],
  [[1031, 97], [517, 97], 511],
  [[3, 4], [0, 4], 1],
] as const) {
  cases.push(
    valid(k.copyRows, {
      label: `[${yShape.join(', ')}] row ${row} ← [${xShape.join(', ')}]`,
      inputs: [f32([...yShape], 'wide'), f32([...xShape], 'wide')],
      attrs: { row },
      tolerance: EXACT,
    }),
  );
}
cases.push(
  valid(k.copyRows, {
    label: 'u32 [11, 7] row 4 ← [5, 7]',
    inputs: [u32([11, 7], 0, 2 ** 32 - 1), u32([5, 7], 0, 2 ** 32 - 1)],
    attrs: { row: 4 },
  }),
  valid(k.copyRows, {
    label: 'i32 [3, 2] row 0 ← [3, 2]',
    inputs: [i32([3, 2], -(2 ** 31), 2 ** 31 - 1), i32([3, 2], -(2 ** 31), 2 ** 31 - 1)],
    attrs: { row: 0 },
  }),
);
errors.push(
  ...invalidCalls(k.copyRows, [
    ['rows past the end', [f32([4, 3]), f32([2, 3])], 'argument', 'attrs.row', { row: 3 }],
    ['another row shape', [f32([4, 3]), f32([2, 4])], 'shape', 'x', { row: 0 }],
    ['another rank', [f32([4, 3]), f32([6])], 'shape', 'x', { row: 0 }],
    ['another dtype', [f32([4, 3]), u32([2, 3], 0, 9)], 'dtype', 'x', { row: 0 }],
    ['y of rank 0', [f32([]), f32([])], 'shape', 'y', { row: 0 }],
    ['row missing', [f32([4, 3]), f32([2, 3])], 'argument', 'attrs.row', {}],
  ]),
);

// ---- transpose ---------------------------------------------------------------

for (const shape of [
  [1, 1],
  [1, 67],
  [67, 1],
  [7, 13],
  [61, 257],
  [317, 331],
  [3, 7, 13],
  [5, 1, 61],
  [2, 3, 65, 17],
]) {
  cases.push(valid(k.transpose, { label: `[${shape.join(', ')}]`, inputs: [f32(shape)], tolerance: EXACT }));
}
cases.push(
  valid(k.transpose, { label: 'i32 [61, 67]', inputs: [i32([61, 67], -1000, 1000)] }),
  valid(k.transpose, { label: 'u32 [2, 13, 7]', inputs: [u32([2, 13, 7], 0, 2 ** 32 - 1)] }),
);
errors.push(
  ...invalidCalls(k.transpose, [
    ['rank 1', [f32([7])], 'shape', 'x'],
    ['rank 0', [f32([])], 'shape', 'x'],
  ]),
);

export const memoryCases: FamilyCases = { cases, errors };
