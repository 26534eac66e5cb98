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

/**
 * counters[...] += by, in place, for one or more i32 tensors in one launch:
 * what a recorded decode step ends with, so that its position and length
 * on the device are the next step's without a write from the host.
 */
export const increment = defineKernel<{ by: number }>({
  name: 'increment',
  family: FAMILY,
  summary: 'counters[...] += by, in place, for each of one or more i32 tensors (wrapping as i32 does)',
  inputs: [
    { name: 'counters', dtypes: ['i32'], variadic: true, doc: 'one or more i32 tensors of any shapes' },
  ],
  attributes: {
    by: {
      kind: 'number',
      integer: true,
      min: -(2 ** 31),
      max: 2 ** 31 - 1,
      doc: 'an i32 added to every element',
    },
  },
  infer(counters) {
    return counters.map((c, i) => ({
      name: `counters[${i}]`,
      shape: c!.shape,
      dtype: 'i32' as const,
      aliasOf: i,
    }));
  },
  reference(counters, { by }) {
    return counters.map((c) => Int32Array.from(c!, (v) => (v + by) | 0));
  },
  cost: (counters) => ({ flops: 0, bytes: counters.reduce((sum, c) => sum + 2 * bytesOf(c), 0) }),
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

/** Rows moved as they are stored: the 32-bit types and the halves. */
const ROW_DTYPES = [...WORDS, 'f16', 'bf16'] as const;

/**
 * y[row : row + R] = x in place: x's R rows written into y from row `row`
 * on, the rest of y kept, bit for bit. What joins tensors of rows on the
 * device (a layer's q, k and v weights into one) without a trip through
 * the host.
 */
export const copyRows = defineKernel<{ row: number }>({
  name: 'copyRows',
  family: FAMILY,
  summary: "y[row : row + R] = x in place (x's rows written into y, the rest kept)",
  inputs: [
    { name: 'y', dtypes: ROW_DTYPES, doc: '[N, ...]: written in place' },
    { name: 'x', dtypes: ROW_DTYPES, doc: "[R, ...]: y's dtype and row shape, R <= N - row" },
  ],
  attributes: { row: { kind: 'number', integer: true, min: 0, doc: 'the row of y that takes row 0 of x' } },
  infer([y, x], { row }) {
    const check = new ArgCheck('copyRows');
    check.minRank('y', y!, 1, '[N, ...]');
    check.sameDType('x', x!, y!.dtype, "'y'");
    const rowShape = y!.shape.slice(1);
    check.shape(
      x!.shape.length === y!.shape.length && x!.shape.slice(1).every((d, i) => d === rowShape[i]),
      'x',
      "x's rows must have y's row shape",
      `[R, ${rowShape.join(', ')}]`,
      x!.shape,
    );
    const rows = x!.shape[0]!;
    check.attr(
      row + rows <= y!.shape[0]!,
      'row',
      "x's rows must fit in y from this row on",
      `at most ${y!.shape[0]! - rows} (y's ${y!.shape[0]} rows less x's ${rows})`,
      row,
    );
    return [{ name: 'y', shape: y!.shape, dtype: y!.dtype, aliasOf: 0 }];
  },
  reference([y, x], { row }, io) {
    const out = y!.slice();
    const width = io.inputs[0]!.shape.slice(1).reduce((a, b) => a * b, 1);
    out.set(x!, row * width);
    return [out];
  },
  cost: ([, x]) => ({ flops: 0, bytes: 2 * bytesOf(x) }),
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
