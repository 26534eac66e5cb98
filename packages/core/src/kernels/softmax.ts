import type { HostArray } from '../dtype.js';
import { defineKernel, type KernelSpec } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import { bytesOf, FLOAT, type NoAttrs, rowsOf } from './vocabulary.js';

const FAMILY = 'softmax';

/** Every kernel of the family works over the last axis, which is what `axis` asks to change. */
const LAST_AXIS_ONLY = {
  axis:
    'the softmax kernels work over the last axis only and take no axis attribute: ' +
    'for another axis, move it last first (transpose swaps the last two axes), run the kernel, and move it back',
};

/** Per row: the max (subtracted before exp, so that exp never overflows) and Σ exp(x − max). */
function rowStats(x: HostArray, start: number, n: number): { max: number; sumExp: number } {
  let max = Number.NEGATIVE_INFINITY;
  for (let i = start; i < start + n; i++) max = Math.max(max, x[i]!);
  let sumExp = 0;
  for (let i = start; i < start + n; i++) sumExp += Math.exp(x[i]! - max);
  return { max, sumExp };
}

function forwardKernel(
  name: string,
  summary: string,
  flopsPerElement: number,
  row: (x: HostArray, y: Float32Array, start: number, n: number) => void,
): KernelSpec<NoAttrs> {
  return defineKernel<NoAttrs>({
    name,
    family: FAMILY,
    summary,
    inputs: [{ name: 'x', dtypes: FLOAT, doc: '[..., N]' }],
    attributes: {},
    refusedAttributes: LAST_AXIS_ONLY,
    infer([x]) {
      new ArgCheck(name).minRank('x', x!, 1, '[..., N]');
      return [{ name: 'y', shape: x!.shape, dtype: x!.dtype }];
    },
    reference([x], _attrs, io) {
      const { rows, n } = rowsOf(io.inputs[0]!.shape);
      const y = new Float32Array(x!.length);
      for (let r = 0; r < rows; r++) row(x!, y, r * n, n);
      return [y];
    },
    cost: ([x]) => ({ flops: flopsPerElement * sizeOf(x!.shape), bytes: 2 * bytesOf(x) }),
  });
}

export const softmax = forwardKernel(
  'softmax',
  'y = exp(x − max) / Σ exp(x − max) over the last axis',
  5,
  (x, y, start, n) => {
    const { max, sumExp } = rowStats(x, start, n);
    for (let i = start; i < start + n; i++) y[i] = Math.exp(x[i]! - max) / sumExp;
  },
);

export const logSoftmax = forwardKernel(
  'logSoftmax',
  'y = x − max − log Σ exp(x − max) over the last axis',
  4,
  (x, y, start, n) => {
    const { max, sumExp } = rowStats(x, start, n);
    const logSum = Math.log(sumExp);
    for (let i = start; i < start + n; i++) y[i] = x[i]! - max - logSum;
  },
);

/**
 * A backward whose row is dx_i = grad(dy_i, y_i, Σ_j term(dy_j, y_j)): one
 * sum over the row, then one element-wise pass.
 */
function backwardKernel(
  name: string,
  summary: string,
  yDoc: string,
  term: (dy: number, y: number) => number,
  grad: (dy: number, y: number, rowSum: number) => number,
): KernelSpec<NoAttrs> {
  return defineKernel<NoAttrs>({
    name,
    family: FAMILY,
    summary,
    inputs: [
      { name: 'dy', dtypes: FLOAT, doc: '[..., N]' },
      { name: 'y', dtypes: FLOAT, doc: yDoc },
    ],
    attributes: {},
    refusedAttributes: LAST_AXIS_ONLY,
    infer([dy, y]) {
      const check = new ArgCheck(name);
      check.minRank('dy', dy!, 1, '[..., N]');
      check.sameShape('y', y!, dy!.shape, "'dy'");
      return [{ name: 'dx', shape: dy!.shape, dtype: dy!.dtype }];
    },
    reference([dy, y], _attrs, io) {
      const { rows, n } = rowsOf(io.inputs[0]!.shape);
      const dx = new Float32Array(dy!.length);
      for (let start = 0; start < rows * n; start += n) {
        let rowSum = 0;
        for (let i = start; i < start + n; i++) rowSum += term(dy![i]!, y![i]!);
        for (let i = start; i < start + n; i++) dx[i] = grad(dy![i]!, y![i]!, rowSum);
      }
      return [dx];
    },
    cost: ([dy]) => ({ flops: 4 * sizeOf(dy!.shape), bytes: 3 * bytesOf(dy) }),
  });
}

export const softmaxBackward = backwardKernel(
  'softmaxBackward',
  'dx = y · (dy − Σ dy · y) over the last axis',
  'the forward output (softmax probabilities), same shape as dy',
  (dy, y) => dy * y,
  (dy, y, dot) => y * (dy - dot),
);

export const logSoftmaxBackward = backwardKernel(
  'logSoftmaxBackward',
  'dx = dy − exp(y) · Σ dy over the last axis',
  'the forward output (log-probabilities), same shape as dy',
  (dy) => dy,
  (dy, y, total) => dy - Math.exp(y) * total,
);
