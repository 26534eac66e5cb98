import { bytesPerElement, type HostArray } from '../dtype.js';
import { defineKernel, type KernelSpec, type TensorMeta } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import { FLOAT } from './vocabulary.js';

const FAMILY = 'reduction';

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
    inputs: [{ name: 'x', dtypes: FLOAT, doc: '[..., N]' }],
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
      return [{ name: 'y', shape: axis === 'last' ? x!.shape.slice(0, -1) : [], dtype: x!.dtype }];
    },
    reference([x], { axis }, io) {
      const { length, count } = runsOf(io.inputs[0]!, axis);
      const y = new Float32Array(count);
      for (let r = 0; r < count; r++) y[r] = reduce(x!, r * length, (r + 1) * length);
      return [y];
    },
    cost([x], { axis }) {
      const n = sizeOf(x!.shape);
      return { flops: flopsPerElement * n, bytes: (n + runsOf(x!, axis).count) * bytesPerElement(x!.dtype) };
    },
  });
}

/** A sum of `term(x[i])` over each run. */
const sumOf =
  (term: (v: number) => number) =>
  (x: HostArray, start: number, end: number): number => {
    let acc = 0;
    for (let i = start; i < end; i++) acc += term(x[i]!);
    return acc;
  };

/** The largest element of a run; Math.max keeps a NaN, like PyTorch. */
function maxOf(x: HostArray, start: number, end: number): number {
  // infer rejects empty runs, so -Infinity never escapes.
  let acc = Number.NEGATIVE_INFINITY;
  for (let i = start; i < end; i++) acc = Math.max(acc, x[i]!);
  return acc;
}

export const sum = reduceKernel(
  'sum',
  'y = Σ x over the last axis or everything',
  1,
  true,
  sumOf((v) => v),
);
export const max = reduceKernel('max', 'y = max x over the last axis or everything', 1, false, maxOf);
export const sumSquares = reduceKernel(
  'sumSquares',
  'y = Σ x² over the last axis or everything',
  2,
  true,
  sumOf((v) => v * v),
);

/**
 * Whether `v` at a later index displaces the best so far: strictly larger, or
 * the first NaN (NaN counts as larger than every number, +Infinity included).
 * Equal values keep the lower index; -0 and +0 are equal.
 */
function displaces(v: number, best: number): boolean {
  return !Number.isNaN(best) && (v > best || Number.isNaN(v));
}

export const argmax = defineKernel<Record<never, never>>({
  name: 'argmax',
  family: FAMILY,
  summary:
    'y[...] = the index of the largest x[..., i] (the lowest among equal ones; a NaN counts as largest, so the first NaN wins)',
  inputs: [{ name: 'x', dtypes: FLOAT, doc: '[..., N] with N >= 1' }],
  attributes: {},
  infer([x]) {
    const check = new ArgCheck('argmax');
    check.minRank('x', x!, 1, '[..., N]');
    const n = x!.shape[x!.shape.length - 1]!;
    check.shape(n > 0, 'x', 'argmax of no elements is undefined', 'a last dimension of at least 1', x!.shape);
    // The last axis is dropped, as in torch.argmax(x, dim=-1): [N] gives [].
    return [{ name: 'y', shape: x!.shape.slice(0, -1), dtype: 'i32' }];
  },
  reference([x], _attrs, io) {
    const { length, count } = runsOf(io.inputs[0]!, 'last');
    const y = new Int32Array(count);
    for (let r = 0; r < count; r++) {
      const start = r * length;
      let best = 0;
      for (let i = 1; i < length; i++) if (displaces(x![start + i]!, x![start + best]!)) best = i;
      y[r] = best;
    }
    return [y];
  },
  cost([x]) {
    const n = sizeOf(x!.shape);
    // One comparison per element; reads x, writes one i32 per row.
    return {
      flops: n,
      bytes: n * bytesPerElement(x!.dtype) + runsOf(x!, 'last').count * bytesPerElement('i32'),
    };
  },
});
