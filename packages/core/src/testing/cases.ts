import type { DType } from '../dtype.js';
import type { AnyKernelSpec, AttrValues, KernelSpec } from '../kernel.js';
import type { Shape } from '../shape.js';
import type { Rng } from './random.js';

/**
 * How an input is filled. Never zeros: a kernel that skips elements or reads
 * the wrong ones must change the result.
 * - `uniform`: uniform in [-1, 1) (the default for float inputs)
 * - `positive`: uniform in [0.5, 1.5)
 * - `wide`: uniform in [-8, 8), to reach saturating regions (exp, tanh, sigmoid)
 * - `{ int: [lo, hi] }`: integers in [lo, hi) (indices, class ids)
 * - a function: any other values
 */
export type InputInit =
  | 'uniform'
  | 'positive'
  | 'wide'
  | { readonly int: readonly [number, number] }
  | ((rng: Rng, size: number) => ArrayLike<number>);

export interface InputSample {
  readonly shape: Shape;
  /** Defaults to the first dtype the spec declares for this input. */
  readonly dtype?: DType;
  readonly init?: InputInit;
}

export interface Tolerance {
  /** Relative tolerance (default 1e-5). */
  readonly rtol?: number;
  /** Absolute tolerance (default 1e-5). */
  readonly atol?: number;
}

/** A call of `spec` on sampled inputs, under a label that names it in reports. */
export interface CaseCall<A extends AttrValues = AttrValues> {
  readonly spec: KernelSpec<A>;
  readonly label: string;
  readonly inputs: readonly (InputSample | undefined)[];
  readonly attrs?: Partial<A>;
}

/** A valid call whose every output is compared with the reference. */
export interface ConformanceCase<A extends AttrValues = AttrValues> extends CaseCall<A> {
  readonly tolerance?: Tolerance;
}

/** An invalid call that must throw a RayoError of `error`'s class naming `argument`. */
export interface ErrorCase<A extends AttrValues = AttrValues> extends CaseCall<A> {
  readonly error: 'shape' | 'dtype' | 'argument';
  /** Expected `RayoError.argument`, e.g. `b` or `attrs.eps`. */
  readonly argument: string;
}

// biome-ignore lint/suspicious/noExplicitAny: cases of specs with different attribute types
export type AnyConformanceCase = ConformanceCase<any>;
// biome-ignore lint/suspicious/noExplicitAny: cases of specs with different attribute types
export type AnyErrorCase = ErrorCase<any>;

export interface FamilyCases {
  readonly cases: readonly AnyConformanceCase[];
  readonly errors: readonly AnyErrorCase[];
}

/** A family's case lists while its file declares them. */
export interface FamilyCaseLists {
  readonly cases: AnyConformanceCase[];
  readonly errors: AnyErrorCase[];
}

/** Empty valid and error case lists for one family's file to fill. */
export function newFamilyCases(): FamilyCaseLists {
  return { cases: [], errors: [] };
}

/** Typed constructor so that `attrs` is checked against the spec. */
export function valid<A extends AttrValues>(
  spec: KernelSpec<A>,
  c: Omit<ConformanceCase<A>, 'spec'>,
): ConformanceCase<A> {
  return { spec, ...c };
}

/** Typed constructor so that `attrs` is checked against the spec. */
export function invalid<A extends AttrValues>(
  spec: KernelSpec<A>,
  c: Omit<ErrorCase<A>, 'spec'>,
): ErrorCase<A> {
  return { spec, ...c };
}

/** One invalid call of a spec as a table row, its attributes last since most rows need none. */
export type InvalidRow<A extends AttrValues = AttrValues> = readonly [
  label: string,
  inputs: readonly (InputSample | undefined)[],
  error: ErrorCase['error'],
  argument: string,
  attrs?: Partial<A>,
];

/** The invalid calls of `spec`, one per row, typed so that each row's `attrs` is checked against the spec. */
export function invalidCalls<A extends AttrValues>(
  spec: KernelSpec<A>,
  rows: readonly InvalidRow<A>[],
): ErrorCase<A>[] {
  return rows.map(([label, inputs, error, argument, attrs]) =>
    attrs === undefined
      ? { spec, label, inputs, error, argument }
      : { spec, label, inputs, attrs, error, argument },
  );
}

export function f32(shape: Shape, init?: InputInit): InputSample {
  return init === undefined ? { shape } : { shape, init };
}

export function i32(shape: Shape, lo: number, hi: number): InputSample {
  return { shape, dtype: 'i32', init: { int: [lo, hi] } };
}

export function u32(shape: Shape, lo: number, hi: number): InputSample {
  return { shape, dtype: 'u32', init: { int: [lo, hi] } };
}

/**
 * i32 ids of `shape` in [0, limit), every other one (while they last)
 * replaced by the next of `outside`, ids a kernel must not read through.
 */
export function idsWithOutliers(shape: Shape, limit: number, outside: readonly number[]): InputSample {
  const init = (rng: Rng, size: number) =>
    Array.from({ length: size }, (_, i) => {
      const b = i % 2 === 1 ? outside[(i - 1) / 2] : undefined;
      return b ?? rng.int(0, limit);
    });
  return { shape, dtype: 'i32', init };
}

/** A one-element i32 tensor holding `value`: a position or length read on the device. */
export function deviceValue(value: number): InputSample {
  return { shape: [1], dtype: 'i32', init: () => [value] };
}

/** Lengths that catch vectorisation and tiling bugs: 1, primes, non-multiples of 4/16/64, large. */
export const ODD_LENGTHS = [1, 3, 7, 13, 61, 67, 257, 1031, 65537] as const;

export type SpecList = readonly AnyKernelSpec[];
