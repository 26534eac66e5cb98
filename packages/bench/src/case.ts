import {
  type AnyKernelSpec,
  type AttrValues,
  add,
  bytesPerElement,
  type DType,
  type HostArray,
  inferKernel,
  type KernelCost,
  type Shape,
  scale,
  sizeOf,
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
  /** Storage dtype (default: the spec's first for that input, f32). PyTorch's side uses the same. */
  readonly dtype?: DType;
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
  /** Attributes of the smaller call, when they differ from the case's. */
  readonly attrs?: AttrValues;
  /** Picks, from one full output, the elements the smaller call computes. */
  select(output: number, actual: HostArray): HostArray;
}

/**
 * How a case drives the backend:
 * - `run`: `backend.run(spec, inputs, attrs)` (device-timed where the backend can)
 * - `weightCache`: input 1 is uploaded once into `createWeightCache()` as a
 *   `[N, K]` weight, and `matmul(name, x)` is timed (spec: `matmul` with transB)
 * - `batch`: `chain` kernels alternating `add(y, b)` and `scale(y)` recorded in
 *   one `backend.batch()`; `submit()` is timed and reported per kernel
 * - `upload`: `upload` of input 0 and `sync()`
 * - `read`: `read` of a tensor holding input 0
 */
export type CaseVia = 'run' | 'weightCache' | 'batch' | 'upload' | 'read';

/**
 * What limits a case, and so which ceiling its fraction is of: `flops` (the
 * `--peak-tflops` figure), `bytes` (the measured copy bandwidth), or
 * `latency` (per-call overhead and host transfers: no device ceiling).
 */
export type CaseBound = 'flops' | 'bytes' | 'latency';

export interface BenchCase {
  /** Stable id, `family/params`, e.g. `gemm/256x256x256`; `--filter` matches it. */
  readonly id: string;
  /** The chart and Markdown section the case belongs to (the id's prefix). */
  readonly family: string;
  readonly spec: AnyKernelSpec;
  readonly inputs: readonly (BenchInput | undefined)[];
  readonly attrs?: AttrValues;
  readonly via?: CaseVia;
  /** `batch`: kernels recorded per submission. */
  readonly chain?: number;
  readonly bound: CaseBound;
  /** Position on the family chart's x axis (its unit is the family's). */
  readonly x: number;
  /** Part of the `--quick` run. */
  readonly quick: boolean;
  /** Part of the full run (the default). */
  readonly full: boolean;
  readonly tolerance: CheckTolerance;
  /**
   * Checks a subset of the outputs when the whole reference would be too slow
   * (large GEMMs, 10⁸-element optimizer steps): the reference runs on part of
   * the same inputs.
   */
  readonly subset?: (data: readonly (HostArray | undefined)[]) => CheckSubset;
}

export type SuiteMode = 'quick' | 'full';

export function caseVia(c: BenchCase): CaseVia {
  return c.via ?? 'run';
}

/** Evenly spread indices of `[0, count)`, the first and last included. */
export function sampleRows(rows: number, count: number): number[] {
  if (count >= rows) return Array.from({ length: rows }, (_, i) => i);
  const picked = new Set<number>();
  for (let i = 0; i < count; i++) picked.add(Math.round((i * (rows - 1)) / (count - 1)));
  return [...picked].sort((a, b) => a - b);
}

/** An empty array of `data`'s kind: half data stay 16-bit words. */
function likeOf(data: HostArray, length: number): HostArray {
  return new (data.constructor as new (n: number) => HostArray)(length);
}

function takeRows(data: HostArray, cols: number, rows: readonly number[]): HostArray {
  const out = likeOf(data, rows.length * cols);
  rows.forEach((r, i) => {
    out.set(data.subarray(r * cols, (r + 1) * cols), i * cols);
  });
  return out;
}

/** Columns `cols` of a row-major `[rows, width]` matrix, as a `[cols.length, rows]` matrix. */
function takeColumns(data: HostArray, width: number, rows: number, cols: readonly number[]): HostArray {
  const out = likeOf(data, cols.length * rows);
  cols.forEach((c, i) => {
    for (let r = 0; r < rows; r++) out[i * rows + r] = data[r * width + c]!;
  });
  return out;
}

const meta = (shape: Shape, dtype: DType = 'f32'): TensorMeta => ({ shape, dtype });

/**
 * Checks `rowCount` evenly spread rows of `y = op(A)·op(B)` (+ `c`): the
 * reference multiplies those rows of op(A) (gathered, so without transA)
 * by the whole op(B).
 */
export function matmulRowSubset(
  m: number,
  k: number,
  n: number,
  rowCount: number,
  flags: { transA?: boolean; transB?: boolean; dtypes?: readonly [DType, DType] } = {},
) {
  return (data: readonly (HostArray | undefined)[]): CheckSubset => {
    const rows = sampleRows(m, rowCount);
    const [a, b, c] = data;
    const transB = flags.transB ?? false;
    const [aType, bType] = flags.dtypes ?? ['f32', 'f32'];
    return {
      inputs: [
        meta([rows.length, k], aType),
        meta(transB ? [n, k] : [k, n], bType),
        c ? meta([rows.length, n], aType) : undefined,
      ],
      // transA stores A as [K, M]: row r of op(A) is column r of the stored matrix.
      data: [
        flags.transA ? takeColumns(a!, m, k, rows) : takeRows(a!, k, rows),
        b,
        c ? takeRows(c, n, rows) : undefined,
      ],
      attrs: { transA: false, transB },
      select: (_output, actual) => takeRows(actual, n, rows),
    };
  };
}

/**
 * Checks `rowCount` evenly spread rows of a `linear` call (y, and z when it
 * returns it): the reference takes those rows of x, the whole weight and the
 * bias.
 */
export function linearRowSubset(m: number, k: number, n: number, rowCount: number) {
  return (data: readonly (HostArray | undefined)[]): CheckSubset => {
    const rows = sampleRows(m, rowCount);
    const [x, w, bias] = data;
    return {
      inputs: [meta([rows.length, k]), meta([n, k]), bias ? meta([n]) : undefined],
      data: [takeRows(x!, k, rows), w, bias],
      select: (_output, actual) => takeRows(actual, n, rows),
    };
  };
}

function takeIndices(data: HostArray, indices: readonly number[]): Float32Array {
  const out = new Float32Array(indices.length);
  indices.forEach((index, i) => {
    out[i] = data[index]!;
  });
  return out;
}

/**
 * Checks `count` evenly spread elements of an elementwise kernel whose inputs
 * and outputs all have `size` elements (AdamW, SwiGLU): the reference runs on
 * those elements only.
 */
export function elementSubset(size: number, count: number) {
  return (data: readonly (HostArray | undefined)[]): CheckSubset => {
    const indices = sampleRows(size, count);
    return {
      inputs: data.map((d) => (d ? meta([indices.length]) : undefined)),
      data: data.map((d) => (d ? takeIndices(d, indices) : undefined)),
      select: (_output, actual) => takeIndices(actual, indices),
    };
  };
}

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
  const declared = c.spec.inputs;
  return c.inputs.map((input, i) => {
    const decl = declared[Math.min(i, declared.length - 1)];
    return input ? { shape: input.shape, dtype: input.dtype ?? decl?.dtypes[0] ?? 'f32' } : undefined;
  });
}

function metaBytes(m: TensorMeta | undefined): number {
  return m ? sizeOf(m.shape) * bytesPerElement(m.dtype) : 0;
}

/** Attributes with the spec's defaults applied (what the baseline needs to match the call). */
export function resolvedAttrs(c: BenchCase): AttrValues {
  return inferKernel(c.spec, inputMetas(c), c.attrs).attrs;
}

/** The alpha of the `scale` kernels of a `batch` case. */
export const CHAIN_SCALE = 0.5;

/**
 * Work done by one call of a case, from the spec's `cost()`: one kernel for
 * `run` and `weightCache`, the mean kernel of a `batch` chain, the bytes
 * moved for `upload` and `read`. Undefined when the spec has no cost.
 */
export function caseCost(c: BenchCase): KernelCost | undefined {
  const metas = inputMetas(c);
  switch (caseVia(c)) {
    case 'upload':
    case 'read':
      return { flops: 0, bytes: metaBytes(metas[0]) };
    case 'batch': {
      const x = [metas[0]];
      const a = add.cost!([metas[0], metas[1]], {});
      const s = scale.cost!(x, { alpha: CHAIN_SCALE, beta: 0 });
      return { flops: (a.flops + s.flops) / 2, bytes: (a.bytes + s.bytes) / 2 };
    }
    default: {
      if (!c.spec.cost) return undefined;
      const { attrs } = inferKernel(c.spec, metas, c.attrs);
      return c.spec.cost(metas, attrs);
    }
  }
}

/**
 * Bytes one call touches on the device: inputs and outputs not written in
 * place. Decides whether the inputs are rotated to defeat the L2 cache.
 */
export function workingSetBytes(c: BenchCase): number {
  const metas = inputMetas(c);
  const inputs = metas.reduce((sum, m) => sum + metaBytes(m), 0);
  if (caseVia(c) !== 'run' && caseVia(c) !== 'weightCache') return inputs;
  const { outputs } = inferKernel(c.spec, metas, c.attrs);
  return inputs + outputs.reduce((sum, o) => sum + (o.aliasOf === undefined ? metaBytes(o) : 0), 0);
}
