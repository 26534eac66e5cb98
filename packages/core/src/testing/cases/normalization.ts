import * as k from '../../kernels/normalization.js';
import { type Shape, sizeOf } from '../../shape.js';
import { type FamilyCases, f32, invalidCalls, newFamilyCases, type Tolerance, valid } from '../cases.js';
import { roundoffTolerance, UNIT_ROUNDOFF } from '../halfCases.js';
import { mistypedAttr } from '../mistypedAttr.js';

/** One element, one long row, rows of length 1, many short rows, a batch of rows, large ones. */
const SHAPES: readonly Shape[] = [
  [1, 1],
  [1],
  [1, 4099],
  [7, 1],
  [7, 13],
  [1031, 3],
  [2, 3, 67],
  [13, 257],
  [1031, 97],
  [33, 4099],
];

const label = (shape: Shape) => `[${shape.join(', ')}]`;

/** The row statistics have no cancellation for these inputs; their error stays relative. */
const FORWARD: Tolerance = { rtol: 1e-4, atol: 1e-5 };

/**
 * The per-feature gradients sum one term per row: a float32 sum over `rows`
 * terms of about ±0.6 may be off by a few 1e-8 per row (an in-order or atomic
 * accumulation; trees do better).
 */
function backward(shape: Shape): Tolerance {
  const rows = sizeOf(shape.slice(0, -1));
  return { rtol: 1e-4, atol: Math.max(1e-5, 2e-7 * rows) };
}

const { cases, errors } = newFamilyCases();

for (const shape of SHAPES) {
  const n = [shape[shape.length - 1]!];
  cases.push(
    valid(k.rmsNorm, { label: label(shape), inputs: [f32(shape), f32(n)], tolerance: FORWARD }),
    valid(k.rmsNormBackward, {
      label: label(shape),
      inputs: [f32(shape), f32(shape), f32(n)],
      tolerance: backward(shape),
    }),
    valid(k.layerNorm, { label: label(shape), inputs: [f32(shape), f32(n), f32(n)], tolerance: FORWARD }),
    valid(k.layerNormBackward, {
      label: label(shape),
      inputs: [f32(shape), f32(shape), f32(n)],
      tolerance: backward(shape),
    }),
  );
}

// Other eps, and rows that are not centred on zero (layerNorm must subtract the mean first).
cases.push(
  valid(k.rmsNorm, {
    label: '[61, 67] eps=1e-2, positive x',
    inputs: [f32([61, 67], 'positive'), f32([67], 'positive')],
    attrs: { eps: 1e-2 },
    tolerance: FORWARD,
  }),
  valid(k.rmsNormBackward, {
    label: '[61, 67] eps=1e-2, positive x',
    inputs: [f32([61, 67]), f32([61, 67], 'positive'), f32([67], 'positive')],
    attrs: { eps: 1e-2 },
    tolerance: backward([61, 67]),
  }),
  valid(k.layerNorm, {
    label: '[61, 67] eps=1e-3, positive x',
    inputs: [f32([61, 67], 'positive'), f32([67]), f32([67])],
    attrs: { eps: 1e-3 },
    tolerance: FORWARD,
  }),
  valid(k.layerNormBackward, {
    label: '[61, 67] eps=1e-3, positive x',
    inputs: [f32([61, 67]), f32([61, 67], 'positive'), f32([67])],
    attrs: { eps: 1e-3 },
    tolerance: backward([61, 67]),
  }),
);

// attrs.out: the norm writes a product's bf16 operand itself (the half variants read half x into the named y).
for (const [shape, out] of [
  [[5, 67], 'bf16'],
  [[3, 1031], 'bf16'],
  [[6, 257], 'f32'],
] as const) {
  const inputs = [f32(shape), f32([shape[1]])];
  cases.push(
    valid(k.rmsNorm, {
      label: `${label(shape)} out ${out}`,
      inputs,
      attrs: { out },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs, tolerance: FORWARD }),
    }),
  );
}

errors.push(
  ...invalidCalls(k.rmsNorm, [
    ['weight length != last dim', [f32([3, 4]), f32([3])], 'shape', 'weight'],
    ['weight of rank 2', [f32([3, 4]), f32([1, 4])], 'shape', 'weight'],
    ['x of rank 0', [f32([]), f32([1])], 'shape', 'x'],
    ['eps = 0', [f32([3, 4]), f32([4])], 'argument', 'attrs.eps', { eps: 0 }],
    mistypedAttr("out 'u32'", [f32([3, 4]), f32([4])], 'out', 'u32'),
  ]),
  ...invalidCalls(k.rmsNormBackward, [
    ['x of another shape', [f32([3, 4]), f32([4, 3]), f32([4])], 'shape', 'x'],
    ['weight length != last dim', [f32([3, 4]), f32([3, 4]), f32([5])], 'shape', 'weight'],
    ['dy of rank 0', [f32([]), f32([]), f32([1])], 'shape', 'dy'],
    ['eps < 0', [f32([3, 4]), f32([3, 4]), f32([4])], 'argument', 'attrs.eps', { eps: -1e-6 }],
  ]),
  ...invalidCalls(k.layerNorm, [
    ['gamma length != last dim', [f32([3, 4]), f32([5]), f32([4])], 'shape', 'gamma'],
    ['beta length != last dim', [f32([3, 4]), f32([4]), f32([3])], 'shape', 'beta'],
    ['x of rank 0', [f32([]), f32([1]), f32([1])], 'shape', 'x'],
    ['eps = 0', [f32([3, 4]), f32([4]), f32([4])], 'argument', 'attrs.eps', { eps: 0 }],
  ]),
  ...invalidCalls(k.layerNormBackward, [
    ['x of another shape', [f32([3, 4]), f32([3, 5]), f32([4])], 'shape', 'x'],
    ['gamma of rank 2', [f32([3, 4]), f32([3, 4]), f32([1, 4])], 'shape', 'gamma'],
    ['eps = 0', [f32([3, 4]), f32([3, 4]), f32([4])], 'argument', 'attrs.eps', { eps: 0 }],
  ]),
);

export const normalizationCases: FamilyCases = { cases, errors };
