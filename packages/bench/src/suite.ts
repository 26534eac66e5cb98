import {
  type AnyKernelSpec,
  type AttrValues,
  adamwStep,
  type HostArray,
  incrementalAttention,
  inferKernel,
  type KernelCost,
  matmul,
  rmsNorm,
  type Shape,
  softmax,
  type TensorMeta,
} from '@rayo/core';
import type { Rng } from '@rayo/core/testing';

/**
 * How an input is filled. Never zeros, so that a kernel that skips or misreads
 * elements changes its result:
 * - `uniform`: uniform in [-1, 1)
 * - `positive`: uniform in [0.5, 1.5) (second moments, scales)
 * - a function: any other values
 */
export type InputFill = 'uniform' | 'positive' | ((rng: Rng, size: number) => ArrayLike<number>);

export interface BenchInput {
  readonly shape: Shape;
  readonly fill?: InputFill;
}

export interface CheckTolerance {
  /** Relative tolerance. */
  readonly rtol: number;
  /** Absolute tolerance. */
  readonly atol: number;
  /**
   * `max`: |actual − expected| <= atol + rtol · max|expected| (norm-wise, for
   * long dot products); `element` (default): atol + rtol · |expected|.
   */
  readonly relativeTo?: 'max' | 'element';
}

/** A smaller reference computation whose outputs are a known part of the full ones. */
export interface CheckSubset {
  /** Inputs of the smaller call, metadata and data. */
  readonly inputs: readonly (TensorMeta | undefined)[];
  readonly data: readonly (HostArray | undefined)[];
  /** Picks, from one full output, the elements the smaller call computes. */
  select(output: number, actual: HostArray): HostArray;
}

export interface BenchCase {
  /** Stable id, e.g. `gemm/256x256x256`; `--filter` matches it. */
  readonly id: string;
  readonly spec: AnyKernelSpec;
  readonly inputs: readonly (BenchInput | undefined)[];
  readonly attrs?: AttrValues;
  /** Part of the `--quick` run. */
  readonly quick: boolean;
  /** Part of the full run (the default). */
  readonly full: boolean;
  readonly tolerance: CheckTolerance;
  /**
   * Checks a subset of the outputs when the whole reference would be too slow
   * (large GEMMs): the reference runs on part of the same inputs.
   */
  readonly subset?: (data: readonly (HostArray | undefined)[]) => CheckSubset;
}

export type SuiteMode = 'quick' | 'full';

/** Evenly spread row indices of `[0, rows)`, the first and last included. */
export function sampleRows(rows: number, count: number): number[] {
  if (count >= rows) return Array.from({ length: rows }, (_, i) => i);
  const picked = new Set<number>();
  for (let i = 0; i < count; i++) picked.add(Math.round((i * (rows - 1)) / (count - 1)));
  return [...picked].sort((a, b) => a - b);
}

function takeRows(data: HostArray, cols: number, rows: readonly number[]): Float32Array {
  const out = new Float32Array(rows.length * cols);
  rows.forEach((r, i) => {
    out.set(data.subarray(r * cols, (r + 1) * cols), i * cols);
  });
  return out;
}

/** Checks `rowCount` rows of `C = A·B` (+ `c`), for `matmul` without transA. */
export function matmulRowSubset(m: number, k: number, n: number, rowCount: number) {
  return (data: readonly (HostArray | undefined)[]): CheckSubset => {
    const rows = sampleRows(m, rowCount);
    const [a, b, c] = data;
    const meta = (shape: Shape): TensorMeta => ({ shape, dtype: 'f32' });
    return {
      inputs: [meta([rows.length, k]), meta([k, n]), c ? meta([rows.length, n]) : undefined],
      data: [takeRows(a!, k, rows), b, c ? takeRows(c, n, rows) : undefined],
      select: (_output, actual) => takeRows(actual, n, rows),
    };
  };
}

/** GEMMs at or above this many multiply-adds check sampled rows only. */
const FULL_CHECK_MACS = 512 ** 3;
const SAMPLED_ROWS = 24;

function gemmCase(m: number, k: number, n: number, prefix: string, quick: boolean, full = true): BenchCase {
  return {
    id: `${prefix}/${m}x${k}x${n}`,
    spec: matmul,
    inputs: [{ shape: [m, k] }, { shape: [k, n] }],
    attrs: {},
    quick,
    full,
    tolerance: { rtol: 1e-3, atol: 0, relativeTo: 'max' },
    ...(m * k * n > FULL_CHECK_MACS && m > SAMPLED_ROWS
      ? { subset: matmulRowSubset(m, k, n, SAMPLED_ROWS) }
      : {}),
  };
}

function attentionCase(
  heads: number,
  headDim: number,
  tokens: number,
  quick: boolean,
  full: boolean,
): BenchCase {
  return {
    id: `attention/h${heads}-d${headDim}-t${tokens}`,
    spec: incrementalAttention,
    inputs: [
      { shape: [heads, headDim] },
      { shape: [heads, tokens, headDim] },
      { shape: [heads, tokens, headDim] },
    ],
    attrs: { seqLen: tokens },
    quick,
    full,
    tolerance: { rtol: 1e-3, atol: 1e-6, relativeTo: 'max' },
  };
}

function adamwCase(params: number, label: string, quick: boolean, full: boolean): BenchCase {
  return {
    id: `adamw/${label}`,
    spec: adamwStep,
    // param, grad, m, v (v is a second moment: positive).
    inputs: [
      { shape: [params] },
      { shape: [params] },
      { shape: [params] },
      { shape: [params], fill: 'positive' },
    ],
    attrs: { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, step: 10 },
    quick,
    full,
    tolerance: { rtol: 1e-4, atol: 1e-6 },
  };
}

const CASES: BenchCase[] = [
  ...[128, 256, 512].map((s) => gemmCase(s, s, s, 'gemm', true)),
  ...[1024, 2048, 4096].map((s) => gemmCase(s, s, s, 'gemm', false)),
  gemmCase(1, 1024, 1024, 'gemv', true, false),
  gemmCase(1, 4096, 4096, 'gemv', false),
  {
    id: 'softmax/64x4096',
    spec: softmax,
    inputs: [{ shape: [64, 4096] }],
    attrs: {},
    quick: true,
    full: true,
    tolerance: { rtol: 1e-4, atol: 1e-7 },
  },
  {
    id: 'rmsnorm/64x4096',
    spec: rmsNorm,
    inputs: [{ shape: [64, 4096] }, { shape: [4096], fill: 'positive' }],
    attrs: { eps: 1e-5 },
    quick: true,
    full: true,
    tolerance: { rtol: 1e-4, atol: 1e-5 },
  },
  attentionCase(8, 128, 1024, true, false),
  attentionCase(32, 128, 4096, false, true),
  adamwCase(1e5, '1e5', true, false),
  adamwCase(1e6, '1e6', false, true),
];

/** Every benchmark case; `selectCases` picks those of a run. */
export const SUITE: readonly BenchCase[] = Object.freeze(CASES);

/**
 * A `--filter` value as a predicate on case ids: a regular expression when it
 * is one, and always also a plain substring.
 */
export function caseFilter(filter: string | undefined): (id: string) => boolean {
  if (filter === undefined || filter === '') return () => true;
  let pattern: RegExp | undefined;
  try {
    pattern = new RegExp(filter);
  } catch {
    pattern = undefined;
  }
  return (id) => id.includes(filter) || (pattern?.test(id) ?? false);
}

export function selectCases(
  cases: readonly BenchCase[],
  options: { mode: SuiteMode; filter?: string | undefined },
): BenchCase[] {
  const matches = caseFilter(options.filter);
  return cases.filter((c) => (options.mode === 'quick' ? c.quick : c.full) && matches(c.id));
}

/** Input metadata of a case (dtype: the first the spec declares). */
export function inputMetas(c: BenchCase): (TensorMeta | undefined)[] {
  return c.inputs.map((input, i) =>
    input ? { shape: input.shape, dtype: c.spec.inputs[i]?.dtypes[0] ?? 'f32' } : undefined,
  );
}

/** Work done by one run of a case, from the spec's `cost()`; undefined when the spec has none. */
export function caseCost(c: BenchCase): KernelCost | undefined {
  if (!c.spec.cost) return undefined;
  const metas = inputMetas(c);
  const { attrs } = inferKernel(c.spec, metas, c.attrs);
  return c.spec.cost(metas, attrs);
}
