import * as k from '../../kernels/embedding.js';
import type { Shape } from '../../shape.js';
import {
  type FamilyCases,
  f32,
  type InputSample,
  i32,
  idsWithOutliers,
  invalidCalls,
  newFamilyCases,
  valid,
} from '../cases.js';

const { cases, errors } = newFamilyCases();

/**
 * Ids in [0, v), every other one replaced by an id outside it: just outside,
 * the i32 extremes, and 2^29, whose offset 2^29 · D wraps to 0 in 32 bits for
 * D = 8 (a bounds check on the offset instead of the id would miss it).
 */
function badIds(shape: Shape, v: number): InputSample {
  return idsWithOutliers(shape, v, [-1, v, 2147483647, -2147483648, 536870912]);
}

// ids shape, V, D
const SIZES: [Shape, number, number][] = [
  [[1], 1, 1],
  [[7], 13, 61],
  [[3, 5], 67, 7],
  [[2, 3, 4], 1031, 13],
  [[61], 3, 257],
  [[4099], 1031, 67],
];

for (const [ids, v, d] of SIZES) {
  cases.push(
    valid(k.embedding, {
      label: `[${v}, ${d}] by ids [${ids.join(', ')}]`,
      inputs: [f32([v, d]), i32(ids, 0, v)],
    }),
    valid(k.embeddingBackward, {
      label: `ids [${ids.join(', ')}] into [${v}, ${d}]`,
      inputs: [f32([...ids, d]), i32(ids, 0, v)],
      attrs: { vocabSize: v },
    }),
  );
}
cases.push(
  valid(k.embedding, {
    label: '[13, 8] by out-of-range ids: NaN rows',
    inputs: [f32([13, 8]), badIds([3, 5], 13)],
  }),
  valid(k.embeddingBackward, {
    label: 'out-of-range ids: all NaN',
    inputs: [f32([3, 5, 8]), badIds([3, 5], 13)],
    attrs: { vocabSize: 13 },
  }),
  // About 714 rows summed into each of 7: an f32 sum in any order drifts by a few 1e-5.
  valid(k.embeddingBackward, {
    label: 'ids [5003] into [7, 13] (heavy repetition)',
    inputs: [f32([5003, 13]), i32([5003], 0, 7)],
    attrs: { vocabSize: 7 },
    tolerance: { rtol: 1e-5, atol: 5e-5 },
  }),
);

errors.push(
  ...invalidCalls(k.embedding, [
    ['table of rank 1', [f32([13]), i32([4], 0, 13)], 'shape', 'table'],
    ['table of rank 3', [f32([2, 13, 4]), i32([4], 0, 2)], 'shape', 'table'],
    ['scalar ids', [f32([13, 4]), i32([], 0, 13)], 'shape', 'ids'],
    ['f32 ids', [f32([13, 4]), { shape: [4], dtype: 'f32' }], 'dtype', 'ids'],
  ]),
  ...invalidCalls(k.embeddingBackward, [
    ['dy rows != ids', [f32([5, 4]), i32([4], 0, 13)], 'shape', 'dy', { vocabSize: 13 }],
    ['dy without the D axis', [f32([2, 3]), i32([2, 3], 0, 13)], 'shape', 'dy', { vocabSize: 13 }],
    ['scalar ids', [f32([4]), i32([], 0, 13)], 'shape', 'ids', { vocabSize: 13 }],
    ['f32 ids', [f32([4, 3]), { shape: [4], dtype: 'f32' }], 'dtype', 'ids', { vocabSize: 13 }],
    ['vocabSize missing', [f32([4, 3]), i32([4], 0, 13)], 'argument', 'attrs.vocabSize', {}],
    ['vocabSize 0', [f32([4, 3]), i32([4], 0, 1)], 'argument', 'attrs.vocabSize', { vocabSize: 0 }],
    [
      'fractional vocabSize',
      [f32([4, 3]), i32([4], 0, 2)],
      'argument',
      'attrs.vocabSize',
      { vocabSize: 2.5 },
    ],
  ]),
);

export const embeddingCases: FamilyCases = { cases, errors };
