// Matrix product cases: GEMM and GEMV in f32, tf32 and half precision, the
// weight cache, and the fused layers built on a product (linear, gate/up,
// rmsNorm then product).

import {
  gateUpSwiglu,
  type LinearActivation,
  linear,
  matmul,
  rmsNormMatmul,
  rmsNormMatmul3,
} from '@rayo/core';
import { type BenchCase, linearRowSubset, matmulRowSubset } from './case.js';
import { FULL_CHECK_MACS, halfTolerance, MAX_TOL, type Modes, modes, SAMPLED_ROWS } from './caseDefaults.js';

type GemmVariant = 'gemm' | 'gemm-llm' | 'gemm-tb' | 'gemm-ta' | 'gemv';

export function gemm(
  family: GemmVariant,
  [m, k, n]: readonly [number, number, number],
  when: Modes,
): BenchCase {
  const transA = family === 'gemm-ta';
  const transB = family === 'gemm-tb';
  const flops = 2 * m * k * n;
  const x = family === 'gemm' ? n : family === 'gemv' ? 4 * k * n : flops;
  return {
    id: `${family}/${m}x${k}x${n}`,
    family,
    spec: matmul,
    inputs: [{ shape: transA ? [k, m] : [m, k] }, { shape: transB ? [n, k] : [k, n] }],
    attrs: { transA, transB },
    // Few rows read the whole weight once: memory-bound.
    bound: m < 64 ? 'bytes' : 'flops',
    x,
    ...modes(when),
    tolerance: MAX_TOL,
    ...(m * k * n > FULL_CHECK_MACS && m > SAMPLED_ROWS
      ? { subset: matmulRowSubset(m, k, n, SAMPLED_ROWS, { transA, transB }) }
      : {}),
  };
}

/** A square product with both operands (and so the output) in `dtype`. */
export function halfGemm(dtype: 'f16' | 'bf16', n: number, when: Modes): BenchCase {
  return {
    id: `gemm-half/${dtype}-${n}x${n}x${n}`,
    family: 'gemm-half',
    spec: matmul,
    inputs: [
      { shape: [n, n], dtype },
      { shape: [n, n], dtype },
    ],
    attrs: { transA: false, transB: false },
    bound: 'flops',
    x: 2 * n ** 3,
    ...modes(when),
    tolerance: halfTolerance(dtype),
    ...(n ** 3 > FULL_CHECK_MACS
      ? { subset: matmulRowSubset(n, n, n, SAMPLED_ROWS, { dtypes: [dtype, dtype] }) }
      : {}),
  };
}

/** tf32's unit roundoff (10 explicit mantissa bits): its products are checked to a few of them. */
const TF32_ROUNDOFF = 2 ** -11;

/** A square f32 product that allows tf32 tensor cores (opt-in; PyTorch's side sets allow_tf32). */
export function tf32Gemm(n: number, when: Modes): BenchCase {
  return {
    id: `gemm-tf32/${n}x${n}x${n}`,
    family: 'gemm-tf32',
    spec: matmul,
    inputs: [{ shape: [n, n] }, { shape: [n, n] }],
    attrs: { transA: false, transB: false, precision: 'tf32' },
    bound: 'flops',
    x: 2 * n ** 3,
    ...modes(when),
    tolerance: { rtol: 4 * TF32_ROUNDOFF, atol: 0, relativeTo: 'max' },
    ...(n ** 3 > FULL_CHECK_MACS ? { subset: matmulRowSubset(n, n, n, SAMPLED_ROWS) } : {}),
  };
}

/**
 * One row against a half weight stored [N, K], as a decoder's linear layers
 * hold it: x (and y) f32 against bf16 weights, or x, weights and y all bf16
 * (`bf16`) or all f16 (`f16`).
 */
export function halfGemv(
  [k, n]: readonly [number, number],
  x: 'f32' | 'bf16' | 'f16',
  when: Modes,
): BenchCase {
  const weights = x === 'f16' ? 'f16' : 'bf16';
  return {
    id: `gemv-half/${x === 'f32' ? 'f32xbf16' : x}-1x${k}x${n}`,
    family: 'gemv-half',
    spec: matmul,
    inputs: [
      { shape: [1, k], dtype: x },
      { shape: [n, k], dtype: weights },
    ],
    attrs: { transB: true },
    bound: 'bytes',
    x: 2 * k * n,
    ...modes(when),
    tolerance: x === 'f32' ? MAX_TOL : halfTolerance(weights),
  };
}

export function weightCache(m: number, k: number, n: number, when: Modes): BenchCase {
  return {
    id: `wcache/${m}x${k}x${n}`,
    family: 'wcache',
    spec: matmul,
    via: 'weightCache',
    // x [M, K] against a weight stored [N, K], as a linear layer holds it.
    inputs: [{ shape: [m, k] }, { shape: [n, k] }],
    attrs: { transB: true },
    bound: m < 64 ? 'bytes' : 'flops',
    x: m,
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/** act(x·Wᵀ + b) against a weight stored [N, K]: a training layer's forward, z kept for its backward. */
export function linearCase(
  [m, k, n]: readonly [number, number, number],
  activation: LinearActivation,
  when: Modes,
): BenchCase {
  // relu's backward reads y; the others keep z, as a training step does.
  const preActivation = activation !== 'none' && activation !== 'relu';
  return {
    id: `linear/${m}x${k}x${n}-${activation}`,
    family: 'linear',
    spec: linear,
    inputs: [{ shape: [m, k] }, { shape: [n, k] }, { shape: [n] }],
    attrs: { activation, preActivation },
    bound: m < 64 ? 'bytes' : 'flops',
    x: 2 * m * k * n,
    ...modes(when),
    tolerance: MAX_TOL,
    ...(m * k * n > FULL_CHECK_MACS && m > SAMPLED_ROWS
      ? { subset: linearRowSubset(m, k, n, SAMPLED_ROWS) }
      : {}),
  };
}

/**
 * silu(x·Wgᵀ) ⊙ (x·Wuᵀ) against weights stored [N, K], with rmsNorm of x
 * folded in when `norm`: the decoder's MLP up to the down projection.
 */
export function gateUp([m, k, n]: readonly [number, number, number], norm: boolean, when: Modes): BenchCase {
  return {
    id: `gateup/${m}x${k}x${n}${norm ? '-norm' : ''}`,
    family: 'gateup',
    spec: gateUpSwiglu,
    inputs: [
      { shape: [m, k] },
      { shape: [n, k] },
      { shape: [n, k] },
      ...(norm ? [{ shape: [k], fill: 'positive' as const }] : []),
    ],
    attrs: { eps: 1e-5 },
    bound: 'bytes',
    x: 2 * 4 * k * n,
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/** rmsNorm(x)·Wᵀ against a weight stored [N, K]: a decoder's attention projections and head. */
export function normMatmul([m, k, n]: readonly [number, number, number], when: Modes): BenchCase {
  return {
    id: `normmatmul/${m}x${k}x${n}`,
    family: 'normmatmul',
    spec: rmsNormMatmul,
    inputs: [{ shape: [m, k] }, { shape: [k], fill: 'positive' }, { shape: [n, k] }],
    attrs: { eps: 1e-5 },
    bound: 'bytes',
    x: 4 * k * n,
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/** rmsNorm(x)·W_iᵀ against three weights stored [N_i, K] in one launch: a decoder's q, k and v. */
export function normMatmul3(
  [m, k, ...ns]: readonly [number, number, number, number, number],
  when: Modes,
): BenchCase {
  return {
    id: `normmatmul3/${m}x${k}x${ns.join('+')}`,
    family: 'normmatmul3',
    spec: rmsNormMatmul3,
    inputs: [{ shape: [m, k] }, { shape: [k], fill: 'positive' }, ...ns.map((n) => ({ shape: [n, k] }))],
    attrs: { eps: 1e-5 },
    bound: 'bytes',
    x: 4 * k * ns.reduce((a, b) => a + b, 0),
    ...modes(when),
    tolerance: MAX_TOL,
  };
}
