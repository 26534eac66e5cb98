import {
  add,
  type Backend,
  type DType,
  type HostArray,
  inferKernel,
  runReference,
  scale as scaleSpec,
  type TensorMeta,
  toHostArray,
  toNumbers,
} from '@rayo/core';
import { hashString, Rng } from '@rayo/core/testing';
import {
  type BenchCase,
  CHAIN_SCALE,
  type CheckTolerance,
  caseVia,
  type InputFill,
  inputMetas,
} from './case.js';
import { outputsOnce } from './drive.js';

/** Host values for one input; never zeros. */
export function fillInput(rng: Rng, dtype: DType, size: number, fill: InputFill = 'uniform'): HostArray {
  if (typeof fill === 'function') return toHostArray(dtype, fill(rng, size));
  const [lo, hi] = fill === 'positive' ? [0.5, 1.5] : [-1, 1];
  const values = new Float32Array(size);
  for (let i = 0; i < size; i++) values[i] = rng.uniform(lo, hi);
  return dtype === 'f32' ? values : toHostArray(dtype, values);
}

/** The seed of a case's inputs: a hash of its id, so every run (and backend) sees the same data. */
export function caseSeed(c: BenchCase): number {
  return hashString(c.id);
}

/** The case's inputs, filled from `Rng(seed)`. */
export function makeInputs(c: BenchCase, seed = caseSeed(c)): (HostArray | undefined)[] {
  const rng = new Rng(seed);
  return inputMetas(c).map((meta, i) => {
    if (!meta) return undefined;
    const size = meta.shape.reduce((p, d) => p * d, 1);
    return fillInput(rng, meta.dtype, size, c.inputs[i]?.fill);
  });
}

/** What a backend's outputs must match: the reference on the same inputs (or on a subset of them). */
export interface Expectation {
  readonly names: readonly string[];
  readonly dtypes: readonly DType[];
  readonly outputs: readonly HostArray[];
  /** Picks from a backend's output `index` the elements `outputs[index]` holds. */
  select(index: number, actual: HostArray): HostArray;
}

/** The end of a `batch` case's chain, on the host: `add(y, b)` and `scale(y)` in turn, from `y = x`. */
function chainReference(c: BenchCase, data: readonly (HostArray | undefined)[]): HostArray {
  const [meta] = inputMetas(c);
  const io = { inputs: [meta, meta], outputs: [{ name: 'y', shape: meta!.shape, dtype: meta!.dtype }] };
  const scaleAttrs = { alpha: CHAIN_SCALE, beta: 0 };
  let y = data[0]!;
  for (let i = 0; i < (c.chain ?? 1); i++) {
    y =
      i % 2 === 0
        ? runReference(add, [y, data[1]], {}, io)[0]!
        : runReference(scaleSpec, [y], scaleAttrs, io)[0]!;
  }
  return y;
}

/** Runs the case's reference (`runReference`) on `data` (copies: the reference must not see shared arrays). */
export function expectedOutputs(c: BenchCase, data: readonly (HostArray | undefined)[]): Expectation {
  if (caseVia(c) === 'batch') {
    return {
      names: ['y'],
      dtypes: ['f32'],
      outputs: [chainReference(c, data)],
      select: (_i, actual) => actual,
    };
  }
  const subset = c.subset?.(data);
  const metas: readonly (TensorMeta | undefined)[] = subset?.inputs ?? inputMetas(c);
  const inputs = (subset?.data ?? data).map((d) => d?.slice());
  const { attrs, outputs } = inferKernel(c.spec, metas, { ...c.attrs, ...subset?.attrs });
  const result = runReference(c.spec, inputs, attrs, { inputs: metas, outputs });
  return {
    names: outputs.map((o) => o.name),
    dtypes: outputs.map((o) => o.dtype),
    outputs: result,
    select: subset ? (i, actual) => subset.select(i, actual) : (_i, actual) => actual,
  };
}

export interface Comparison {
  readonly ok: boolean;
  /** Elements outside the tolerance. */
  readonly mismatches: number;
  /** Largest |actual − expected| (NaN where a value is NaN and should not be). */
  readonly maxError: number;
  /** First mismatching index, or -1. */
  readonly first: number;
  readonly message?: string;
}

/**
 * Compares element by element: |a − e| <= atol + rtol · s, with s = |e|
 * (`relativeTo: 'element'`) or max|e| over the output (`relativeTo: 'max'`).
 * NaN or infinite values match only the same value in the reference.
 */
export function compareOutput(
  actual: HostArray,
  expected: HostArray,
  tolerance: CheckTolerance,
  dtype: DType = 'f32',
): Comparison {
  if (actual.length !== expected.length) {
    return {
      ok: false,
      mismatches: Math.max(actual.length, expected.length),
      maxError: Number.NaN,
      first: 0,
      message: `${actual.length} elements, expected ${expected.length}`,
    };
  }
  // Only 16-bit floats are stored as bit patterns; other arrays hold their values.
  const bits = dtype === 'f16' || dtype === 'bf16';
  const a = bits ? toNumbers(dtype, actual) : actual;
  const e = bits ? toNumbers(dtype, expected) : expected;
  let scale = 0;
  if (tolerance.relativeTo === 'max')
    for (const v of e) if (Number.isFinite(v)) scale = Math.max(scale, Math.abs(v));
  let mismatches = 0;
  let first = -1;
  let maxError = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = e[i]!;
    const err = Math.abs(x - y);
    let ok: boolean;
    if (!Number.isFinite(y)) ok = Object.is(x, y) || (Number.isNaN(x) && Number.isNaN(y));
    else {
      const s = tolerance.relativeTo === 'max' ? scale : Math.abs(y);
      ok = err <= tolerance.atol + tolerance.rtol * s;
    }
    if (Number.isFinite(y) && !(err <= maxError)) maxError = err;
    if (!ok) {
      mismatches++;
      if (first < 0) first = i;
    }
  }
  if (mismatches === 0) return { ok: true, mismatches, maxError, first };
  const rel = tolerance.relativeTo === 'max' ? ` of max|expected| ${scale.toPrecision(4)}` : '';
  return {
    ok: false,
    mismatches,
    maxError,
    first,
    message:
      `${mismatches} of ${a.length} elements differ (rtol ${tolerance.rtol}${rel}, atol ${tolerance.atol}); ` +
      `first at [${first}]: got ${a[first]}, expected ${e[first]}; max |error| ${maxError.toPrecision(4)}`,
  };
}

/** Compares a backend's full outputs with an expectation; undefined when all agree, else why not. */
export function checkOutputs(
  c: BenchCase,
  actual: readonly HostArray[],
  expected: Expectation,
): string | undefined {
  if (actual.length !== expected.outputs.length) {
    return `${actual.length} outputs, expected ${expected.outputs.length}`;
  }
  const problems: string[] = [];
  expected.outputs.forEach((want, i) => {
    const got = expected.select(i, actual[i]!);
    const result = compareOutput(got, want, c.tolerance, expected.dtypes[i]);
    if (!result.ok) problems.push(`output '${expected.names[i] ?? i}': ${result.message}`);
  });
  return problems.length ? problems.join('; ') : undefined;
}

/**
 * Runs the case once on `backend` on fresh copies of `data` and compares every
 * output with `expected`. Returns undefined when the results agree, or what
 * differs. Errors of the backend propagate.
 */
export async function verifyOnBackend(
  backend: Backend,
  c: BenchCase,
  data: readonly (HostArray | undefined)[],
  expected: Expectation,
): Promise<string | undefined> {
  return checkOutputs(c, await outputsOnce(backend, c, data), expected);
}
