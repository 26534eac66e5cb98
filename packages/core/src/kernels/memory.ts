import { allocHost, type DType, type HostArray } from '../dtype.js';
import { defineKernel } from '../kernel.js';
import { ArgCheck } from './check.js';
import { bytesOf, type NoAttrs } from './vocabulary.js';

const FAMILY = 'memory';
/** Moving data never looks at the values, so every 32-bit type is accepted. */
const WORDS = ['f32', 'i32', 'u32'] as const;

const INTEGER_RANGE: Partial<Record<DType, readonly [number, number]>> = {
  i32: [-(2 ** 31), 2 ** 31 - 1],
  u32: [0, 2 ** 32 - 1],
};

type FillAttrs = { value: number };
export const fill = defineKernel<FillAttrs>({
  name: 'fill',
  family: FAMILY,
  summary: 'x[...] = value, in place',
  inputs: [{ name: 'x', dtypes: WORDS, doc: 'overwritten with the value' }],
  attributes: {
    value: {
      kind: 'number',
      doc: 'rounded to f32 for f32 tensors; an integer in range for i32 and u32',
    },
  },
  infer([x], { value }) {
    const range = INTEGER_RANGE[x!.dtype];
    if (range) {
      const [lo, hi] = range;
      // An integer tensor cannot hold the value: silently truncating it would hide the bug.
      new ArgCheck('fill').attr(
        Number.isInteger(value) && value >= lo && value <= hi,
        'value',
        `value does not fit a ${x!.dtype} tensor`,
        `an integer in [${lo}, ${hi}]`,
        value,
      );
    }
    return [{ name: 'y', shape: x!.shape, dtype: x!.dtype, aliasOf: 0 }];
  },
  reference([x], { value }, io) {
    return [allocHost(io.outputs[0]!.dtype, x!.length).fill(value)];
  },
  cost: ([x]) => ({ flops: 0, bytes: bytesOf(x) }),
});

export const copy = defineKernel<NoAttrs>({
  name: 'copy',
  family: FAMILY,
  summary: 'y = x (a new tensor)',
  inputs: [{ name: 'x', dtypes: WORDS }],
  attributes: {},
  infer: ([x]) => [{ name: 'y', shape: x!.shape, dtype: x!.dtype }],
  reference: ([x]) => [x!.slice()],
  cost: ([x]) => ({ flops: 0, bytes: 2 * bytesOf(x) }),
});

export const transpose = defineKernel<NoAttrs>({
  name: 'transpose',
  family: FAMILY,
  summary: 'y[..., c, r] = x[..., r, c] (swaps the last two axes)',
  inputs: [{ name: 'x', dtypes: WORDS, doc: '[..., R, C]; leading axes are a batch' }],
  attributes: {},
  infer([x]) {
    new ArgCheck('transpose').minRank('x', x!, 2, '[..., R, C]');
    const shape = [...x!.shape];
    const rank = shape.length;
    [shape[rank - 2], shape[rank - 1]] = [shape[rank - 1]!, shape[rank - 2]!];
    return [{ name: 'y', shape, dtype: x!.dtype }];
  },
  reference([x], _attrs, io) {
    const shape = io.inputs[0]!.shape;
    const rows = shape[shape.length - 2]!;
    const cols = shape[shape.length - 1]!;
    const matrix = rows * cols;
    const y: HostArray = allocHost(io.outputs[0]!.dtype, x!.length);
    for (let base = 0; base < x!.length; base += matrix) {
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < cols; c++) y[base + c * rows + r] = x![base + r * cols + c]!;
      }
    }
    return [y];
  },
  cost: ([x]) => ({ flops: 0, bytes: 2 * bytesOf(x) }),
});
