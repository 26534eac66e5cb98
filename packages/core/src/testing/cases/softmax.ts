import * as k from '../../kernels/softmax.js';
import type { Shape } from '../../shape.js';
import {
  type FamilyCases,
  f32,
  type InputInit,
  invalid,
  invalidCalls,
  newFamilyCases,
  type Tolerance,
  valid,
} from '../cases.js';

/** One element, one long row, rows of length 1, many short rows, a batch of rows, a large one. */
const SHAPES: readonly Shape[] = [
  [1],
  [61],
  [1, 4099],
  [7, 1],
  [7, 13],
  [1031, 3],
  [2, 3, 67],
  [65537, 2],
  [67, 4099],
];

/** Logits whose exp overflows float32: only the row max keeps them finite. */
const largeLogits: InputInit = (rng, size) => Array.from({ length: size }, () => rng.uniform(80, 100));

/** Rows of `n` softmax probabilities (positive, summing to 1), as the forward pass gives them. */
function probabilities(n: number, log = false): InputInit {
  return (rng, size) => {
    const values = Array.from({ length: size }, () => Math.exp(rng.uniform(-3, 3)));
    for (let start = 0; start < size; start += n) {
      let total = 0;
      for (let i = start; i < start + n; i++) total += values[i]!;
      for (let i = start; i < start + n; i++)
        values[i] = log ? Math.log(values[i]! / total) : values[i]! / total;
    }
    return values;
  };
}

// exp may be a few ulp off on a GPU (more for arguments far from 0); the row
// sums have no cancellation, so the error stays relative.
const PROBABILITIES: Tolerance = { rtol: 1e-4, atol: 1e-6 };
const LOG_PROBABILITIES: Tolerance = { rtol: 1e-4, atol: 1e-5 };

const label = (shape: Shape) => `[${shape.join(', ')}]`;

const { cases, errors } = newFamilyCases();

for (const [spec, tolerance] of [
  [k.softmax, PROBABILITIES],
  [k.logSoftmax, LOG_PROBABILITIES],
] as const) {
  for (const shape of SHAPES)
    cases.push(valid(spec, { label: label(shape), inputs: [f32(shape)], tolerance }));
  cases.push(
    valid(spec, { label: '[13, 257] wide', inputs: [f32([13, 257], 'wide')], tolerance }),
    valid(spec, {
      label: '[5, 1031] of logits in [80, 100)',
      inputs: [f32([5, 1031], largeLogits)],
      tolerance,
    }),
  );
  errors.push(
    invalid(spec, { label: 'rank 0', inputs: [f32([])], error: 'shape', argument: 'x' }),
    // Refused, with a message that says how to get another axis (the kernels take no attributes).
    invalid(spec, {
      label: 'an axis',
      inputs: [f32([3, 4])],
      attrs: { axis: 0 } as Record<never, never>,
      error: 'argument',
      argument: 'attrs.axis',
    }),
  );
}

for (const shape of SHAPES) {
  const n = shape[shape.length - 1]!;
  cases.push(
    valid(k.softmaxBackward, {
      label: label(shape),
      inputs: [f32(shape), f32(shape, probabilities(n))],
      tolerance: PROBABILITIES,
    }),
    // dx = dy − p · Σ dy: the error of the signed sum Σ dy is scaled down by p, about 1/N.
    valid(k.logSoftmaxBackward, {
      label: label(shape),
      inputs: [f32(shape), f32(shape, probabilities(n, true))],
      tolerance: { rtol: 1e-4, atol: 1e-5 },
    }),
  );
}
for (const spec of [k.softmaxBackward, k.logSoftmaxBackward]) {
  errors.push(
    ...invalidCalls(spec, [
      ['y of another shape', [f32([3, 4]), f32([4, 3])], 'shape', 'y'],
      ['y with a longer row', [f32([3, 4]), f32([3, 5])], 'shape', 'y'],
      ['dy of rank 0', [f32([]), f32([])], 'shape', 'dy'],
    ]),
  );
}

export const softmaxCases: FamilyCases = { cases, errors };
