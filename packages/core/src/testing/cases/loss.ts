import * as k from '../../kernels/loss.js';
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
import type { Rng } from '../random.js';

const { cases, errors } = newFamilyCases();

/** Class ids in [0, c), every other one replaced by an id outside it, down to the i32 extremes. */
function badTargets(shape: Shape, c: number): InputSample {
  return idsWithOutliers(shape, c, [-1, c, -2147483648, 2147483647]);
}

/** Logits of ±100: exp overflows f32 unless the row maximum is subtracted first. */
const huge = (rng: Rng, size: number) => Array.from({ length: size }, () => rng.uniform(-100, 100));

// Gradient elements are about dloss / (N · C), far below the default absolute
// tolerance, and every one is a relative error of the softmax: a tight atol.
const GRAD = { rtol: 1e-5, atol: 1e-10 };

for (const c of [1, 3, 10, 1031]) {
  for (const n of [1, 7, 257]) {
    const label = `[${n}, ${c}]`;
    cases.push(
      valid(k.crossEntropy, { label, inputs: [f32([n, c], 'wide'), i32([n], 0, c)] }),
      valid(k.crossEntropyBackward, {
        label: `${label}, dloss ${n === 7 ? '[1]' : '[]'}`,
        // Logits in [-1, 1] keep every probability away from 1, where p − 1 cancels.
        inputs: [f32([n, c]), i32([n], 0, c), f32(n === 7 ? [1] : [])],
        tolerance: GRAD,
      }),
    );
  }
}
cases.push(
  valid(k.crossEntropy, {
    label: '[7, 1031] logits of ±100',
    inputs: [f32([7, 1031], huge), i32([7], 0, 1031)],
  }),
  // A target near probability 1 cancels in p − 1: the error is relative to dloss / N.
  valid(k.crossEntropyBackward, {
    label: '[7, 1031] logits of ±100',
    inputs: [f32([7, 1031], huge), i32([7], 0, 1031), f32([])],
    tolerance: { rtol: 1e-5, atol: 1e-6 },
  }),
  valid(k.crossEntropy, {
    label: '[13, 10] out-of-range targets: NaN',
    inputs: [f32([13, 10]), badTargets([13], 10)],
  }),
  valid(k.crossEntropyBackward, {
    label: '[13, 10] out-of-range targets: NaN rows',
    inputs: [f32([13, 10]), badTargets([13], 10), f32([])],
    tolerance: GRAD,
  }),
);

for (const spec of [k.crossEntropy, k.crossEntropyBackward]) {
  const dloss = spec === k.crossEntropyBackward ? [f32([])] : [];
  errors.push(
    // Empty logits are rejected too (the unit tests cover it): not every device allocates empty buffers.
    ...invalidCalls(spec, [
      ['logits of rank 1', [f32([10]), i32([10], 0, 10), ...dloss], 'shape', 'logits'],
      ['targets of rank 2', [f32([4, 3]), i32([4, 1], 0, 3), ...dloss], 'shape', 'targets'],
      ['fewer targets than rows', [f32([4, 3]), i32([3], 0, 3), ...dloss], 'shape', 'targets'],
      ['f32 targets', [f32([4, 3]), { shape: [4], dtype: 'f32' }, ...dloss], 'dtype', 'targets'],
    ]),
  );
}
errors.push(
  ...invalidCalls(k.crossEntropyBackward, [
    ['dloss of two values', [f32([4, 3]), i32([4], 0, 3), f32([2])], 'shape', 'dloss'],
    ['dloss [1, 1]', [f32([4, 3]), i32([4], 0, 3), f32([1, 1])], 'shape', 'dloss'],
    ['dloss missing', [f32([4, 3]), i32([4], 0, 3)], 'argument', 'dloss'],
  ]),
);

export const lossCases: FamilyCases = { cases, errors };
