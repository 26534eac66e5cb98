import * as k from '../../kernels/rope.js';
import type { Shape } from '../../shape.js';
import { deviceValue, type FamilyCases, f32, i32, invalidCalls, newFamilyCases, valid } from '../cases.js';
import { frequencyTable, ROPE_LAYOUTS, type RopeLayout, ropeTolerance } from '../ropeInputs.js';

/** [seq, heads, headDim] and the position of row 0. */
const SHAPES: readonly (readonly [Shape, number])[] = [
  [[1, 1, 2], 0],
  [[1, 1, 2], 5],
  [[7, 1, 6], 0],
  [[3, 7, 34], 0],
  [[13, 5, 64], 2],
  [[61, 3, 18], 0],
  [[1, 13, 128], 4093],
  [[3, 5, 64], 4093],
  [[67, 13, 128], 0],
];

const { cases, errors } = newFamilyCases();

for (const layout of ROPE_LAYOUTS) {
  for (const inverse of [false, true]) {
    for (const [shape, positionOffset] of SHAPES) {
      cases.push(
        valid(k.rope, {
          label: `[${shape.join(', ')}] from position ${positionOffset}, ${layout}${inverse ? ', inverse' : ''}`,
          inputs: [f32(shape)],
          attrs: { positionOffset, layout, inverse },
          tolerance: ropeTolerance(positionOffset + shape[0]! - 1),
        }),
      );
    }
  }
  cases.push(
    valid(k.rope, {
      label: `[17, 3, 32] theta=500000, ${layout}`,
      inputs: [f32([17, 3, 32])],
      attrs: { theta: 500000, layout },
      tolerance: ropeTolerance(16),
    }),
  );
}
cases.push(
  valid(k.rope, {
    label: '[5, 3, 8] default attributes',
    inputs: [f32([5, 3, 8])],
    tolerance: ropeTolerance(4),
  }),
);

// Long contexts: the angles reach 2^31 radians, where an f32 angle (or an
// f32 frequency times the position) is off by whole turns.
const LARGE_POSITIONS = [100_000, 1_000_000, 2 ** 24 - 8, 2 ** 31 - 5];
for (const positionOffset of LARGE_POSITIONS) {
  for (const layout of ROPE_LAYOUTS) {
    const shape: Shape = [4, 2, 128];
    cases.push(
      valid(k.rope, {
        label: `[4, 2, 128] from position ${positionOffset}, ${layout}`,
        inputs: [f32(shape)],
        attrs: { positionOffset, layout },
        tolerance: ropeTolerance(positionOffset + 3),
      }),
      valid(k.rope, {
        label: `[4, 2, 128] from a device position ${positionOffset} with a frequency table, ${layout}, inverse`,
        inputs: [f32(shape), deviceValue(positionOffset), frequencyTable(128)],
        attrs: { layout, inverse: true },
        tolerance: ropeTolerance(positionOffset + 3),
      }),
    );
  }
  cases.push(
    valid(k.rope, {
      label: `[3, 5, 64] from a device position ${positionOffset}, theta=500000`,
      inputs: [f32([3, 5, 64]), deviceValue(positionOffset)],
      attrs: { theta: 500000 },
      tolerance: ropeTolerance(positionOffset + 2),
    }),
    valid(k.rope, {
      label: `[2, 3, 34] from position ${positionOffset} with a frequency table`,
      inputs: [f32([2, 3, 34]), undefined, frequencyTable(34)],
      attrs: { positionOffset },
      tolerance: ropeTolerance(positionOffset + 1),
    }),
  );
}

// The position offset read from a device tensor instead of the attribute.
const DEVICE_SHAPES: readonly (readonly [Shape, number])[] = [
  [[1, 1, 2], 0],
  [[1, 1, 2], 1],
  [[1, 7, 6], 13],
  [[3, 7, 34], 61],
  [[5, 3, 18], 1030],
  [[1, 13, 128], 4093],
];
for (const layout of ROPE_LAYOUTS) {
  for (const [shape, positionOffset] of DEVICE_SHAPES) {
    cases.push(
      valid(k.rope, {
        label: `[${shape.join(', ')}] from a device position ${positionOffset}, ${layout}`,
        inputs: [f32(shape), deviceValue(positionOffset)],
        attrs: { layout },
        tolerance: ropeTolerance(positionOffset + shape[0]! - 1),
      }),
    );
  }
}
cases.push(
  valid(k.rope, {
    label: '[3, 5, 64] from a device position 29, inverse, theta=500000',
    inputs: [f32([3, 5, 64]), deviceValue(29)],
    attrs: { inverse: true, theta: 500000 },
    tolerance: ropeTolerance(31),
  }),
);

// A table of frequencies (scaled RoPE) in place of theta's: random ones from
// 1e-5 to 1 radian per position, so that a kernel reading theta, another
// pair's entry or no table at all fails.
const TABLE_SHAPES: readonly (readonly [Shape, number, boolean])[] = [
  [[1, 1, 2], 0, false],
  [[1, 1, 2], 5, true],
  [[7, 1, 6], 0, false],
  [[3, 7, 34], 11, false],
  [[13, 5, 64], 2, true],
  [[1, 13, 128], 4093, false],
  [[1, 13, 128], 4093, true],
  [[61, 3, 18], 0, false],
];
for (const layout of ROPE_LAYOUTS) {
  for (const [shape, positionOffset, onDevice] of TABLE_SHAPES) {
    for (const inverse of [false, true]) {
      const where = `${onDevice ? 'a device position' : 'position'} ${positionOffset}`;
      cases.push(
        valid(k.rope, {
          label: `[${shape.join(', ')}] from ${where} with a frequency table, ${layout}${inverse ? ', inverse' : ''}`,
          inputs: [f32(shape), onDevice ? deviceValue(positionOffset) : undefined, frequencyTable(shape[2]!)],
          attrs: onDevice ? { layout, inverse } : { positionOffset, layout, inverse },
          tolerance: ropeTolerance(positionOffset + shape[0]! - 1),
        }),
      );
    }
  }
}

errors.push(
  ...invalidCalls(k.rope, [
    ['a frequency table of headDim entries', [f32([2, 3, 8]), undefined, f32([8])], 'shape', 'frequencies'],
    ['a frequency table of rank 2', [f32([2, 3, 8]), undefined, f32([1, 4])], 'shape', 'frequencies'],
    [
      'an f16 frequency table',
      [f32([2, 3, 8]), undefined, { shape: [4], dtype: 'f16' }],
      'dtype',
      'frequencies',
    ],
    ['an i32 frequency table', [f32([2, 3, 8]), undefined, i32([4], 0, 1)], 'dtype', 'frequencies'],
    [
      'a device position and attrs.positionOffset both',
      [f32([2, 3, 8]), deviceValue(3)],
      'argument',
      'attrs.positionOffset',
      { positionOffset: 3 },
    ],
    ['a device position of shape [2]', [f32([2, 3, 8]), i32([2], 0, 4)], 'shape', 'positionOffset'],
    ['a device position of shape []', [f32([2, 3, 8]), i32([], 0, 4)], 'shape', 'positionOffset'],
    ['an f32 device position', [f32([2, 3, 8]), { shape: [1], dtype: 'f32' }], 'dtype', 'positionOffset'],
    ['rank 2', [f32([4, 8])], 'shape', 'x'],
    ['rank 4', [f32([2, 3, 2, 8])], 'shape', 'x'],
    ['odd headDim', [f32([2, 3, 7])], 'shape', 'x'],
    ['negative positionOffset', [f32([2, 3, 8])], 'argument', 'attrs.positionOffset', { positionOffset: -1 }],
    [
      'fractional positionOffset',
      [f32([2, 3, 8])],
      'argument',
      'attrs.positionOffset',
      { positionOffset: 1.5 },
    ],
    ['theta = 0', [f32([2, 3, 8])], 'argument', 'attrs.theta', { theta: 0 }],
    ['theta = 0.5 (frequencies above 1)', [f32([2, 3, 8])], 'argument', 'attrs.theta', { theta: 0.5 }],
    ['theta = Infinity', [f32([2, 3, 8])], 'argument', 'attrs.theta', { theta: Number.POSITIVE_INFINITY }],
    ['an unknown layout', [f32([2, 3, 8])], 'argument', 'attrs.layout', { layout: 'split' as RopeLayout }],
  ]),
);

export const ropeCases: FamilyCases = { cases, errors };
