import * as k from '../../kernels/elementwise.js';
import {
  type FamilyCases,
  f32,
  type InputSample,
  invalid,
  invalidCalls,
  newFamilyCases,
  ODD_LENGTHS,
  valid,
} from '../cases.js';
import { roundoffTolerance, UNIT_ROUNDOFF } from '../halfCases.js';
import { mistypedAttr } from '../mistypedAttr.js';

const binary = [k.add, k.sub, k.mul, k.div];
const unary = [k.relu, k.gelu, k.silu, k.sigmoid, k.tanh, k.exp];
const unaryBackward = [k.reluBackward, k.geluBackward, k.siluBackward, k.sigmoidBackward, k.tanhBackward];

const { cases, errors } = newFamilyCases();

for (const spec of binary) {
  // Keep divisors away from zero so relative error stays meaningful.
  const b = spec === k.div ? ('positive' as const) : undefined;
  for (const n of ODD_LENGTHS) cases.push(valid(spec, { label: `[${n}]`, inputs: [f32([n]), f32([n], b)] }));
  cases.push(
    valid(spec, { label: '[7, 13] with [13] (row broadcast)', inputs: [f32([7, 13]), f32([13], b)] }),
  );
  cases.push(valid(spec, { label: '[5, 1, 3] with [1, 4, 3]', inputs: [f32([5, 1, 3]), f32([1, 4, 3], b)] }));
  cases.push(
    valid(spec, { label: '[1] with [61, 3] (scalar broadcast)', inputs: [f32([1]), f32([61, 3], b)] }),
  );
  cases.push(valid(spec, { label: '[] with [17]', inputs: [f32([]), f32([17], b)] }));
  cases.push(valid(spec, { label: '[] with [] (scalar)', inputs: [f32([]), f32([], b)] }));
  // Size-1 output axes read nothing: six independent axes remain of seven.
  cases.push(
    valid(spec, {
      label: '[2, 1, 2, 1, 1, 2, 1] with [3, 1, 1, 3, 1, 3] (a size-1 axis among seven)',
      inputs: [f32([2, 1, 2, 1, 1, 2, 1]), f32([3, 1, 1, 3, 1, 3], b)],
    }),
  );
  errors.push(
    invalid(spec, {
      label: '[3, 4] with [5]',
      inputs: [f32([3, 4]), f32([5])],
      error: 'shape',
      argument: 'b',
    }),
  );
}

for (const spec of unary) {
  for (const n of ODD_LENGTHS) cases.push(valid(spec, { label: `[${n}]`, inputs: [f32([n], 'wide')] }));
  cases.push(valid(spec, { label: '[3, 5, 7]', inputs: [f32([3, 5, 7], 'wide')] }));
}
/**
 * Random values with NaN, +Inf, −Inf, −0 and +0 among them: what NaN and the
 * infinities become must match the reference (NaN in, NaN out).
 */
const withSpecials = (n: number): InputSample => ({
  shape: [n],
  init: (rng, length) =>
    Array.from({ length }, (_, i) => {
      const special = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 0][i % 7];
      return special ?? rng.uniform(-4, 4);
    }),
});
for (const spec of unary) {
  cases.push(valid(spec, { label: '[67] with NaN, ±Inf and ±0', inputs: [withSpecials(67)] }));
}
cases.push(
  valid(k.clip, {
    label: '[67] with NaN, ±Inf and ±0, to [-0.3, 0.6]',
    inputs: [withSpecials(67)],
    attrs: { min: -0.3, max: 0.6 },
  }),
);
cases.push(
  valid(k.scale, {
    label: '[67] with NaN, ±Inf and ±0, alpha=-2.5 beta=0.75',
    inputs: [withSpecials(67)],
    attrs: { alpha: -2.5, beta: 0.75 },
  }),
);
// Unary kernels have a single input of any shape: their only bad inputs are
// dtype, disposed and cross-backend ones, which the suite derives for every spec.

for (const spec of unaryBackward) {
  for (const n of [1, 13, 1031, 65537]) {
    cases.push(valid(spec, { label: `[${n}]`, inputs: [f32([n]), f32([n], 'wide')] }));
  }
  errors.push(
    invalid(spec, {
      label: 'second input shorter',
      inputs: [f32([8]), f32([7])],
      error: 'shape',
      argument: spec.inputs[1]!.name,
    }),
  );
}

for (const n of [1, 67, 65537]) {
  cases.push(
    valid(k.scale, {
      label: `[${n}] alpha=-2.5 beta=0.75`,
      inputs: [f32([n])],
      attrs: { alpha: -2.5, beta: 0.75 },
    }),
  );
  cases.push(
    valid(k.clip, { label: `[${n}] to [-0.3, 0.6]`, inputs: [f32([n])], attrs: { min: -0.3, max: 0.6 } }),
  );
  cases.push(
    valid(k.clipBackward, {
      label: `[${n}] to [-0.3, 0.6]`,
      inputs: [f32([n]), f32([n])],
      attrs: { min: -0.3, max: 0.6 },
    }),
  );
  cases.push(valid(k.swiglu, { label: `[${n}]`, inputs: [f32([n], 'wide'), f32([n])] }));
  cases.push(valid(k.swigluBackward, { label: `[${n}]`, inputs: [f32([n]), f32([n], 'wide'), f32([n])] }));
}
cases.push(valid(k.swiglu, { label: '[7, 257]', inputs: [f32([7, 257], 'wide'), f32([7, 257])] }));
// attrs.out: SwiGLU writes the down product's bf16 operand itself.
for (const [shape, out] of [
  [[7, 257], 'bf16'],
  [[3, 4099], 'f32'],
] as const) {
  const inputs = [f32(shape, 'wide'), f32(shape)];
  cases.push(
    valid(k.swiglu, {
      label: `[${shape.join(', ')}] out ${out}`,
      inputs,
      attrs: { out },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs }),
    }),
  );
}
for (const [rows, n] of [
  [1, 1],
  [7, 13],
  [33, 257],
  [3, 4099],
]) {
  cases.push(valid(k.biasAdd, { label: `[${rows}, ${n}] + [${n}]`, inputs: [f32([rows!, n!]), f32([n!])] }));
}
cases.push(valid(k.biasAdd, { label: '[2, 3, 5] + [5]', inputs: [f32([2, 3, 5]), f32([5])] }));

errors.push(
  ...invalidCalls(k.scale, [
    ['alpha missing', [f32([4])], 'argument', 'attrs.alpha', {}],
    mistypedAttr('alpha not a number', [f32([4])], 'alpha', 'two'),
  ]),
  invalid(k.clip, {
    label: 'max below min',
    inputs: [f32([4])],
    attrs: { min: 1, max: 0 },
    error: 'argument',
    argument: 'attrs.max',
  }),
  invalid(k.clipBackward, {
    label: 'x of another shape',
    inputs: [f32([4]), f32([5])],
    attrs: { min: 0, max: 1 },
    error: 'shape',
    argument: 'x',
  }),
  invalid(k.swiglu, {
    label: 'up of another shape',
    inputs: [f32([4, 3]), f32([3, 4])],
    error: 'shape',
    argument: 'up',
  }),
  invalid(k.swigluBackward, {
    label: 'up of another shape',
    inputs: [f32([6]), f32([6]), f32([5])],
    error: 'shape',
    argument: 'up',
  }),
  ...invalidCalls(k.biasAdd, [
    ['bias length != last dim', [f32([3, 4]), f32([3])], 'shape', 'bias'],
    ['bias of rank 2', [f32([3, 4]), f32([1, 4])], 'shape', 'bias'],
  ]),
);

export const elementwiseCases: FamilyCases = { cases, errors };
