// Helpers shared by the reference-implementation tests of the kernel families.

import {
  type AttrValues,
  type DType,
  type HostArray,
  type InputMetas,
  type InvalidArgumentError,
  inferKernel,
  type KernelSpec,
  type OutputMeta,
  type RayoError,
  runReference,
  type Shape,
  type ShapeError,
  toHostArray,
} from '@rayo/core';
import { type Rng, thrownBy } from '@rayo/core/testing';
import { expect } from 'vitest';

/** A reference input: f32 values unless it names another dtype (with data of that dtype's array type). */
export interface Input<Data extends HostArray = Float32Array> {
  readonly shape: Shape;
  readonly data: Data;
  readonly dtype?: DType;
}

/** Runs the reference with the io metadata `inferKernel` derives, and checks it left its inputs alone. */
export function run<A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly Input<HostArray>[],
  attrs?: Partial<A>,
): { outputs: OutputMeta[]; values: HostArray[] } {
  const metas = inputs.map((x) => ({ shape: x.shape, dtype: x.dtype ?? 'f32' }));
  const io = inferKernel(spec, metas, attrs);
  const before = inputs.map((x) => x.data.slice());
  const values = runReference(
    spec,
    inputs.map((x) => x.data),
    io.attrs,
    { inputs: metas, outputs: io.outputs },
  );
  inputs.forEach((x, i) => {
    expect(unchanged(x.data, before[i]!), `input ${i} was written`).toBe(true);
  });
  return { outputs: io.outputs, values };
}

/** The reference's first output, as `run` gives it (and with its check that the inputs are left alone). */
export function runFirst<A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly Input<HostArray>[],
  attrs?: Partial<A>,
): Float32Array {
  return run(spec, inputs, attrs).values[0] as Float32Array;
}

/** An input as listed values, its shape, and its dtype (f32 where not given). */
export type ListedInput = readonly [values: readonly number[], shape: Shape, dtype?: DType];

/**
 * Runs the reference on listed inputs with the io metadata `inferKernel`
 * gives, checks it left its inputs alone, and returns every output as plain
 * numbers with its shape.
 */
export function runListed<A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly ListedInput[],
  attrs?: Partial<A>,
): { values: number[][]; shapes: Shape[] } {
  const metas = inputs.map(([, shape, dtype = 'f32']) => ({ shape, dtype }));
  const data = inputs.map(([values, , dtype = 'f32']) => toHostArray(dtype, values));
  const copies = data.map((d) => d.slice());
  const io = inferKernel(spec, metas, attrs);
  const out = spec.reference(data, io.attrs, { inputs: metas, outputs: io.outputs });
  // The reference must never write its inputs.
  data.forEach((d, i) => {
    expect(d).toEqual(copies[i]);
  });
  return { values: out.map((o) => Array.from(o)), shapes: io.outputs.map((o) => o.shape) };
}

export function unchanged(a: HostArray, b: HostArray): boolean {
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return a.length === b.length;
}

export function thrown(call: () => unknown): RayoError {
  try {
    call();
  } catch (error) {
    return error as RayoError;
  }
  throw new Error('expected the call to throw');
}

export function expectError(
  error: RayoError,
  cls: typeof ShapeError | typeof InvalidArgumentError,
  kernel: string,
  argument: string,
  expected: string,
  actual: string,
): void {
  expect(error).toBeInstanceOf(cls);
  expect(error.operation).toBe(kernel);
  expect(error.argument).toBe(argument);
  expect(error.message).toContain(expected);
  expect(error.message).toContain(actual);
}

export function random(rng: Rng, n: number, lo = -1, hi = 1): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform(lo, hi));
}

/**
 * Central differences of `loss` with respect to each element of `x` (changed
 * in place and restored), dividing by the step `x`'s element type actually took.
 */
export function numericGradient(loss: () => number, x: Float32Array | number[], h = 1e-3): Float64Array {
  const grad = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    x[i] = v + h;
    const up = loss();
    const stepUp = x[i]!;
    x[i] = v - h;
    const down = loss();
    grad[i] = (up - down) / (stepUp - x[i]!);
    x[i] = v;
  }
  return grad;
}

export function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < a.length; i++) total += a[i]! * b[i]!;
  return total;
}

export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < actual.length; i++) expect(Math.abs(actual[i]! - expected[i]!)).toBeLessThan(tolerance);
}

export const meta = (shape: Shape) => ({ shape, dtype: 'f32' as const });

/** Asserts `call` throws `errorClass` naming the kernel and argument, with expected and actual in the message. */
export function expectThrows(
  call: () => unknown,
  errorClass: typeof ShapeError | typeof InvalidArgumentError,
  kernel: string,
  argument: string,
  expected: string,
  actual: string,
): void {
  const caught = thrownBy(call);
  expect(caught).toBeInstanceOf(errorClass);
  const e = caught as RayoError;
  expect(e.operation).toBe(kernel);
  expect(e.argument).toBe(argument);
  expect(e.message).toContain(expected);
  expect(e.message).toContain(actual);
}

/** A call `inferKernel` must refuse: its inputs and attributes, then the error's class, argument, expected and actual. */
export type InferErrorRow<A extends AttrValues> = readonly [
  inputs: InputMetas,
  attrs: Partial<A> | undefined,
  errorClass: typeof ShapeError | typeof InvalidArgumentError,
  argument: string,
  expected: string,
  actual: string,
];

/** Asserts, as `expectThrows` does, that `inferKernel` refuses each row's call of `spec`, naming `spec`. */
export function expectInferErrors<A extends AttrValues>(
  spec: KernelSpec<A>,
  rows: readonly InferErrorRow<A>[],
): void {
  for (const [inputs, attrs, errorClass, argument, expected, actual] of rows) {
    expectThrows(() => inferKernel(spec, inputs, attrs), errorClass, spec.name, argument, expected, actual);
  }
}
