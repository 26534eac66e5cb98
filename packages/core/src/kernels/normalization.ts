import type { HostArray } from '../dtype.js';
import { defineKernel, type TensorMeta } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import { bytesOf, FLOAT, type OutDType, outDtypeAttr, outDtypeOf, rowsOf } from './vocabulary.js';

const FAMILY = 'normalization';

type EpsAttrs = { eps: number };
type RmsNormAttrs = EpsAttrs & { out: OutDType };

/**
 * Checks `x` is [..., N] with N >= 1 (a mean over no elements is undefined)
 * and that each per-feature vector is [N]; returns N.
 */
function checkRows(
  check: ArgCheck,
  xName: string,
  x: TensorMeta,
  vectors: readonly (readonly [string, TensorMeta])[],
): number {
  check.minRank(xName, x, 1, '[..., N]');
  const n = x.shape[x.shape.length - 1]!;
  check.shape(n > 0, xName, 'the normalized axis is empty', 'a last dimension of at least 1', x.shape);
  for (const [name, v] of vectors) {
    check.rank(name, v, 1, '[N]');
    check.dim(name, v, 0, n, `the last dimension of '${xName}'`);
  }
  return n;
}

function epsAttr(value: number) {
  return {
    eps: { kind: 'number', default: value, above: 0, doc: 'added to the variance before the square root' },
  } as const;
}

/** 1 / sqrt(mean(x²) + eps) of one row. */
function rmsScale(x: HostArray, start: number, n: number, eps: number): number {
  let sumSq = 0;
  for (let i = start; i < start + n; i++) sumSq += x[i]! * x[i]!;
  return 1 / Math.sqrt(sumSq / n + eps);
}

/** Mean and 1 / sqrt(var + eps) of one row, with the biased variance (divided by n, like PyTorch). */
function meanAndScale(x: HostArray, start: number, n: number, eps: number): { mean: number; scale: number } {
  let sum = 0;
  for (let i = start; i < start + n; i++) sum += x[i]!;
  const mean = sum / n;
  // Two passes: E[x²] − E[x]² would cancel badly for rows far from zero.
  let sumSq = 0;
  for (let i = start; i < start + n; i++) sumSq += (x[i]! - mean) ** 2;
  return { mean, scale: 1 / Math.sqrt(sumSq / n + eps) };
}

export const rmsNorm = defineKernel<RmsNormAttrs>({
  name: 'rmsNorm',
  family: FAMILY,
  summary: 'y = x / sqrt(mean(x²) + eps) · weight over the last axis',
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[..., N]' },
    { name: 'weight', dtypes: FLOAT, doc: '[N]' },
  ],
  attributes: { ...epsAttr(1e-6), out: outDtypeAttr("is x's") },
  infer([x, weight], { out }) {
    checkRows(new ArgCheck('rmsNorm'), 'x', x!, [['weight', weight!]]);
    return [{ name: 'y', shape: x!.shape, dtype: outDtypeOf(out, x!.dtype) }];
  },
  reference([x, weight], { eps }, io) {
    const { rows, n } = rowsOf(io.inputs[0]!.shape);
    const y = new Float32Array(x!.length);
    for (let r = 0; r < rows; r++) {
      const start = r * n;
      const scale = rmsScale(x!, start, n, eps);
      for (let j = 0; j < n; j++) y[start + j] = x![start + j]! * scale * weight![j]!;
    }
    return [y];
  },
  cost: ([x, w], { out }) => ({
    flops: 4 * sizeOf(x!.shape),
    bytes: bytesOf(x) + bytesOf(w) + bytesOf({ shape: x!.shape, dtype: outDtypeOf(out, x!.dtype) }),
  }),
});

export const rmsNormBackward = defineKernel<EpsAttrs>({
  name: 'rmsNormBackward',
  family: FAMILY,
  summary: 'dx and dweight of rmsNorm, recomputing the row scale from x',
  inputs: [
    { name: 'dy', dtypes: FLOAT, doc: '[..., N]' },
    { name: 'x', dtypes: FLOAT, doc: 'the forward input, same shape as dy' },
    { name: 'weight', dtypes: FLOAT, doc: '[N]' },
  ],
  attributes: epsAttr(1e-6),
  infer([dy, x, weight]) {
    const check = new ArgCheck('rmsNormBackward');
    const n = checkRows(check, 'dy', dy!, [['weight', weight!]]);
    check.sameShape('x', x!, dy!.shape, "'dy'");
    return [
      { name: 'dx', shape: dy!.shape, dtype: dy!.dtype },
      { name: 'dweight', shape: [n], dtype: dy!.dtype },
    ];
  },
  reference([dy, x, weight], { eps }, io) {
    const { rows, n } = rowsOf(io.inputs[0]!.shape);
    const dx = new Float32Array(dy!.length);
    const dweight = new Float64Array(n);
    for (let r = 0; r < rows; r++) {
      const start = r * n;
      const s = rmsScale(x!, start, n, eps);
      // y_j = x_j · s · w_j with ds/dx_i = −s³ · x_i / n, so
      // dx_i = s · g_i − s³ · x_i · (Σ_j g_j · x_j) / n, where g = dy · w.
      let gx = 0;
      for (let j = 0; j < n; j++) gx += dy![start + j]! * weight![j]! * x![start + j]!;
      const c = (s * s * s * gx) / n;
      for (let j = 0; j < n; j++) {
        const xj = x![start + j]!;
        const dyj = dy![start + j]!;
        dx[start + j] = s * dyj * weight![j]! - c * xj;
        dweight[j]! += dyj * xj * s;
      }
    }
    return [dx, Float32Array.from(dweight)];
  },
  cost: ([dy, _x, w]) => ({
    flops: 11 * sizeOf(dy!.shape),
    bytes: 3 * bytesOf(dy) + 2 * bytesOf(w),
  }),
});

export const layerNorm = defineKernel<EpsAttrs>({
  name: 'layerNorm',
  family: FAMILY,
  summary: 'y = (x − mean) / sqrt(var + eps) · gamma + beta over the last axis (biased variance)',
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[..., N]' },
    { name: 'gamma', dtypes: FLOAT, doc: '[N]' },
    { name: 'beta', dtypes: FLOAT, doc: '[N]' },
  ],
  attributes: epsAttr(1e-5),
  infer([x, gamma, beta]) {
    checkRows(new ArgCheck('layerNorm'), 'x', x!, [
      ['gamma', gamma!],
      ['beta', beta!],
    ]);
    return [{ name: 'y', shape: x!.shape, dtype: x!.dtype }];
  },
  reference([x, gamma, beta], { eps }, io) {
    const { rows, n } = rowsOf(io.inputs[0]!.shape);
    const y = new Float32Array(x!.length);
    for (let r = 0; r < rows; r++) {
      const start = r * n;
      const { mean, scale } = meanAndScale(x!, start, n, eps);
      for (let j = 0; j < n; j++) y[start + j] = (x![start + j]! - mean) * scale * gamma![j]! + beta![j]!;
    }
    return [y];
  },
  cost: ([x, g]) => ({
    flops: 8 * sizeOf(x!.shape),
    bytes: 2 * bytesOf(x) + 2 * bytesOf(g),
  }),
});

export const layerNormBackward = defineKernel<EpsAttrs>({
  name: 'layerNormBackward',
  family: FAMILY,
  summary: 'dx, dgamma and dbeta of layerNorm, recomputing mean and variance from x',
  inputs: [
    { name: 'dy', dtypes: FLOAT, doc: '[..., N]' },
    { name: 'x', dtypes: FLOAT, doc: 'the forward input, same shape as dy' },
    { name: 'gamma', dtypes: FLOAT, doc: '[N]' },
  ],
  attributes: epsAttr(1e-5),
  infer([dy, x, gamma]) {
    const check = new ArgCheck('layerNormBackward');
    const n = checkRows(check, 'dy', dy!, [['gamma', gamma!]]);
    check.sameShape('x', x!, dy!.shape, "'dy'");
    return [
      { name: 'dx', shape: dy!.shape, dtype: dy!.dtype },
      { name: 'dgamma', shape: [n], dtype: dy!.dtype },
      { name: 'dbeta', shape: [n], dtype: dy!.dtype },
    ];
  },
  reference([dy, x, gamma], { eps }, io) {
    const { rows, n } = rowsOf(io.inputs[0]!.shape);
    const dx = new Float32Array(dy!.length);
    const dgamma = new Float64Array(n);
    const dbeta = new Float64Array(n);
    const xhat = new Float64Array(n);
    for (let r = 0; r < rows; r++) {
      const start = r * n;
      const { mean, scale } = meanAndScale(x!, start, n, eps);
      // With x̂ = (x − mean) · s and g = dy · gamma:
      // dx = s · (g − mean(g) − x̂ · mean(g · x̂)).
      let sumG = 0;
      let sumGXhat = 0;
      for (let j = 0; j < n; j++) {
        xhat[j] = (x![start + j]! - mean) * scale;
        const g = dy![start + j]! * gamma![j]!;
        sumG += g;
        sumGXhat += g * xhat[j]!;
        dgamma[j]! += dy![start + j]! * xhat[j]!;
        dbeta[j]! += dy![start + j]!;
      }
      const meanG = sumG / n;
      const meanGXhat = sumGXhat / n;
      for (let j = 0; j < n; j++) {
        const g = dy![start + j]! * gamma![j]!;
        dx[start + j] = scale * (g - meanG - xhat[j]! * meanGXhat);
      }
    }
    return [dx, Float32Array.from(dgamma), Float32Array.from(dbeta)];
  },
  cost: ([dy, _x, g]) => ({
    flops: 14 * sizeOf(dy!.shape),
    bytes: 3 * bytesOf(dy) + 3 * bytesOf(g),
  }),
});
