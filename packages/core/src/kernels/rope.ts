import { defineKernel, deviceAttribute } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import { checkFrequencies, FREQUENCIES_INPUT, frequencyValues } from './ropeFrequencies.js';
import { thetaFrequency } from './ropeTurns.js';
import { bytesOf, FLOAT } from './vocabulary.js';

export { llama3Smoothing, type RopeScaling, ropeFrequencies } from './ropeFrequencies.js';
export { frequencyTurns64, inverseTwoPiFixed, thetaFrequency } from './ropeTurns.js';

const FAMILY = 'rope';

type RopeAttrs = {
  positionOffset: number;
  theta: number;
  inverse: boolean;
  layout: 'half' | 'interleaved';
};

export const rope = defineKernel<RopeAttrs>({
  name: 'rope',
  family: FAMILY,
  summary:
    'rotary position embedding: rotates pairs of x by position · theta^(−2i/headDim), or by position · frequencies[i]',
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[seq, heads, headDim], headDim even' },
    {
      name: 'positionOffset',
      dtypes: ['i32'],
      optional: true,
      attribute: 'positionOffset',
      doc: '[1]: the position of row 0, read on the device (instead of the attribute) so that a recorded step replays at a new position',
    },
    FREQUENCIES_INPUT,
  ],
  attributes: {
    positionOffset: {
      kind: 'number',
      integer: true,
      min: 0,
      default: 0,
      doc: 'position of row 0 (the number of tokens already in the cache when decoding)',
    },
    theta: {
      kind: 'number',
      min: 1,
      finite: true,
      default: 10000,
      doc: 'frequency base: at least 1, so that every frequency is at most 1 radian per position (as a table’s)',
    },
    inverse: {
      kind: 'boolean',
      default: false,
      doc: 'rotate by −angle: undoes rope, and is its backward (a rotation’s transpose)',
    },
    layout: {
      kind: 'enum',
      values: ['half', 'interleaved'],
      default: 'half',
      doc: "'half' pairs (i, i + headDim/2) (Llama, GPT-NeoX rotate-half); 'interleaved' pairs (2i, 2i + 1)",
    },
  },
  infer([x, , frequencies]) {
    const check = new ArgCheck('rope');
    check.rank('x', x!, 3, '[seq, heads, headDim]');
    const headDim = x!.shape[2]!;
    check.shape(headDim % 2 === 0, 'x', 'headDim must be even', 'an even last dimension', x!.shape);
    if (frequencies) checkFrequencies(check, frequencies.shape, headDim);
    return [{ name: 'y', shape: x!.shape, dtype: x!.dtype }];
  },
  reference([x, offset, table], { positionOffset: attrOffset, theta, inverse, layout }, io) {
    const [seq, heads, headDim] = io.inputs[0]!.shape as [number, number, number];
    // Every position of the rows must stay an i32.
    const positionOffset = deviceAttribute(rope, 'positionOffset', offset, attrOffset, 0, 2 ** 31 - 1 - seq);
    const half = headDim / 2;
    // Pair i holds elements (first(i), second(i)) of a head.
    const first = (i: number) => (layout === 'half' ? i : 2 * i);
    const second = (i: number) => (layout === 'half' ? i + half : 2 * i + 1);
    const frequencies = table
      ? frequencyValues('rope', table)
      : Array.from({ length: half }, (_, i) => thetaFrequency(theta, headDim, i));
    const sign = inverse ? -1 : 1;
    const cos = new Float64Array(half);
    const sin = new Float64Array(half);
    const y = new Float32Array(x!.length);
    for (let s = 0; s < seq; s++) {
      const position = positionOffset + s;
      for (let i = 0; i < half; i++) {
        const angle = sign * position * frequencies[i]!;
        cos[i] = Math.cos(angle);
        sin[i] = Math.sin(angle);
      }
      for (let h = 0; h < heads; h++) {
        const base = (s * heads + h) * headDim;
        for (let i = 0; i < half; i++) {
          const a = x![base + first(i)]!;
          const b = x![base + second(i)]!;
          y[base + first(i)] = a * cos[i]! - b * sin[i]!;
          y[base + second(i)] = a * sin[i]! + b * cos[i]!;
        }
      }
    }
    return [y];
  },
  // Four multiplies and two adds per pair; the angles are per position, not per element.
  cost: ([x, , frequencies]) => ({
    flops: 3 * sizeOf(x!.shape),
    bytes: 2 * bytesOf(x) + bytesOf(frequencies),
  }),
});
