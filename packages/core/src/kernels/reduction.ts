import type { HostArray } from '../dtype.js';
import { defineKernel, type KernelSpec, type TensorMeta } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';

const FAMILY = 'reduction';
const F32 = ['f32'] as const;
const BYTES = 4;

type ReduceAttrs = { axis: 'last' | 'all' };

/** The reduced runs: `count` runs of `length` consecutive elements. */
function runsOf(x: TensorMeta, axis: ReduceAttrs['axis']): { length: number; count: number } {
  if (axis === 'all') return { length: sizeOf(x.shape), count: 1 };
  return { length: x.shape[x.shape.length - 1]!, count: sizeOf(x.shape.slice(0, -1)) };
}

function reduceKernel(
  name: string,
  summary: string,
  flopsPerElement: number,
  /** Whether the reduction of no elements is defined (0 for sums, nothing for max). */
  allowEmpty: boolean,
  reduce: (x: HostArray, start: number, end: number) => number,
): KernelSpec<ReduceAttrs> {
  return defineKernel<ReduceAttrs>({
    name,
    family: FAMILY,
    summary,
    inputs: [{ name: 'x', dtypes: F32, doc: '[..., N]' }],
    attributes: {
      axis: {
        kind: 'enum',
        values: ['last', 'all'],
        default: 'last',
        doc: "'last': over the last axis, which is dropped ([N] gives []); 'all': over every element, to []",
      },
    },
    infer([x], { axis }) {
      const check = new ArgCheck(name);
      check.minRank('x', x!, 1, '[..., N]');
      if (!allowEmpty) {
        const { length } = runsOf(x!, axis);
        const expected = axis === 'last' ? 'a last dimension of at least 1' : 'at least one element';
        check.shape(length > 0, 'x', `${name} of no elements is undefined`, expected, x!.shape);
      }
      return [{ name: 'y', shape: axis === 'last' ? x!.shape.slice(0, -1) : [], dtype: 'f32' }];
    },
    reference([x], { axis }, io) {
      const { length, count } = runsOf(io.inputs[0]!, axis);
      const y = new Float32Array(count);
      for (let r = 0; r < count; r++) y[r] = reduce(x!, r * length, (r + 1) * length);
      return [y];
    },
    cost([x], { axis }) {
      const n = sizeOf(x!.shape);
      return { flops: flopsPerElement * n, bytes: (n + runsOf(x!, axis).count) * BYTES };
    },
  });
}

export const sum = reduceKernel(
  'sum',
  'y = Σ x over the last axis or everything',
  1,
  true,
  (x, start, end) => {
    let acc = 0;
    for (let i = start; i < end; i++) acc += x[i]!;
    return acc;
  },
);

export const max = reduceKernel(
  'max',
  'y = max x over the last axis or everything',
  1,
  false,
  (x, start, end) => {
    // Math.max keeps a NaN, like PyTorch; infer rejects empty runs, so -Infinity never escapes.
    let acc = Number.NEGATIVE_INFINITY;
    for (let i = start; i < end; i++) acc = Math.max(acc, x[i]!);
    return acc;
  },
);

export const sumSquares = reduceKernel(
  'sumSquares',
  'y = Σ x² over the last axis or everything',
  2,
  true,
  (x, start, end) => {
    let acc = 0;
    for (let i = start; i < end; i++) acc += x[i]! * x[i]!;
    return acc;
  },
);
