import { updateLossScale } from '../../kernels/lossScaling.js';
import {
  deviceValue,
  type FamilyCases,
  f32,
  type InputSample,
  invalidCalls,
  newFamilyCases,
  valid,
} from '../cases.js';

const { cases, errors } = newFamilyCases();

// Exact: the scale moves by factors (powers of two by default) and the counts are integers.
const EXACT = { rtol: 0, atol: 0 };
const oneF32 = (value: number, shape: readonly number[] = [1]): InputSample => ({
  shape,
  dtype: 'f32',
  init: () => [value],
});

type ScaleAttrs = { growthFactor?: number; backoffFactor?: number; growthInterval?: number };

/** gradNorm, scale, growth count and (optionally) step, each one element. */
const scaleState = (
  norm: number,
  scale: number,
  growth: number,
  step?: number,
): (InputSample | undefined)[] => [
  oneF32(norm, []),
  oneF32(scale),
  deviceValue(growth),
  step === undefined ? undefined : deviceValue(step),
];
const scaleUpdates: [string, (InputSample | undefined)[], ScaleAttrs][] = [
  ['a finite step counts', scaleState(37.5, 65536, 11, 42), {}],
  ['a finite step at the interval grows the scale', scaleState(0.25, 1024, 1999, 7), {}],
  ['an inf norm backs off and resets the count', scaleState(Infinity, 65536, 1500, 9), {}],
  ['a NaN norm backs off, no step', scaleState(Number.NaN, 3, 5), {}],
  [
    'growth 3, backoff 0.25, interval 4, at the interval',
    scaleState(2.5, 96, 3, 1),
    { growthFactor: 3, backoffFactor: 0.25, growthInterval: 4 },
  ],
  ['growth past the largest f32 keeps the scale', scaleState(1.5, 2 ** 127, 0, 5), { growthInterval: 1 }],
  ['backoff 0.5 at the interval after an overflow', scaleState(-Infinity, 8, 1999, 3), {}],
];
for (const [label, inputs, attrs] of scaleUpdates) {
  cases.push(valid(updateLossScale, { label, inputs, attrs, tolerance: EXACT }));
}
const okState = scaleState(1, 2, 0, 1);
errors.push(
  ...invalidCalls(updateLossScale, [
    ['a scale of two elements', [oneF32(1, []), f32([2]), deviceValue(0)], 'shape', 'scale', {}],
    ['an f32 growth count', [oneF32(1, []), oneF32(2), oneF32(0.5)], 'dtype', 'growth', {}],
    ['growthFactor 1', okState, 'argument', 'attrs.growthFactor', { growthFactor: 1 }],
    ['backoffFactor 1', okState, 'argument', 'attrs.backoffFactor', { backoffFactor: 1 }],
    ['backoffFactor 0', okState, 'argument', 'attrs.backoffFactor', { backoffFactor: 0 }],
    ['growthInterval 0', okState, 'argument', 'attrs.growthInterval', { growthInterval: 0 }],
    ['fractional growthInterval', okState, 'argument', 'attrs.growthInterval', { growthInterval: 2.5 }],
  ]),
);

export const lossScalingCases: FamilyCases = { cases, errors };
