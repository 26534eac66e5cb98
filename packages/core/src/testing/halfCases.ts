import type { Backend } from '../backend.js';
import { type DType, isFloat, isHalf } from '../dtype.js';
import { UnsupportedOnBackendError } from '../errors.js';
import {
  ACTIVATIONS,
  type AnyKernelSpec,
  dtypeGroupOf,
  inputDecl,
  inputName,
  type TensorMeta,
} from '../kernel.js';
import { inferKernel } from '../kernelChecks.js';
import type { AnyConformanceCase, AnyErrorCase, InputSample, Tolerance } from './cases.js';
import { DEFAULT_TOLERANCE } from './compare.js';
import { fail } from './expect.js';

/** The half dtypes every half-capable spec is checked in. */
export const HALF_DTYPES = ['f16', 'bf16'] as const;
export type HalfDType = (typeof HALF_DTYPES)[number];

/** Unit roundoff: half the distance from 1 to the next value (f16 11 significant bits, bf16 8). */
export const UNIT_ROUNDOFF: Readonly<Record<HalfDType, number>> = { f16: 2 ** -11, bf16: 2 ** -8 };

/**
 * A case of a half-capable spec in half storage: the reference sees the same
 * rounded inputs as the backend and rounds its outputs, so a backend differs
 * only by its f32 arithmetic (the case's own tolerance) and by rounding an
 * output to the other neighbour, which grows with the length summed over.
 * One rule for every spec: rtol = atol = max(the case's, 4·u·√L), with u the
 * unit roundoff and L the longest axis of any input (a bound on every
 * reduction length of these kernels).
 */
export function halfTolerance(dtype: HalfDType, c: AnyConformanceCase): Tolerance {
  return roundoffTolerance(UNIT_ROUNDOFF[dtype], c);
}

/** tf32's unit roundoff (a 10-bit mantissa): matmul's precision 'tf32' rounds a and b to it. */
export const TF32_UNIT_ROUNDOFF = 2 ** -11;

/** The rule of `halfTolerance` for any unit roundoff `u`: max(the case's, 4·u·√L). */
export function roundoffTolerance(u: number, c: Pick<AnyConformanceCase, 'inputs' | 'tolerance'>): Tolerance {
  const longest = Math.max(1, ...c.inputs.flatMap((s) => s?.shape ?? []));
  const bound = 4 * u * Math.sqrt(longest);
  return {
    rtol: Math.max(c.tolerance?.rtol ?? DEFAULT_TOLERANCE.rtol, bound),
    atol: Math.max(c.tolerance?.atol ?? DEFAULT_TOLERANCE.atol, bound),
  };
}

function declOf(spec: AnyKernelSpec, index: number) {
  return inputDecl(spec, index)!;
}

/** The case with the inputs `pick` selects stored in `dtype` (the others as they were). */
function storedIn(
  c: AnyConformanceCase,
  dtype: HalfDType,
  label: string,
  pick: (group: string) => boolean,
): AnyConformanceCase {
  const inputs = c.inputs.map((s, i): InputSample | undefined => {
    const group = dtypeGroupOf(declOf(c.spec, i));
    if (!s || group === undefined || (s.dtype !== undefined && s.dtype !== 'f32') || !pick(group)) return s;
    return { ...s, dtype };
  });
  return { ...c, label: `${c.label} (${label})`, inputs, tolerance: halfTolerance(dtype, c) };
}

/**
 * The half variants of a valid case of a spec that takes half storage: every
 * float input in f16, then in bf16, and, where the spec has inputs of other
 * dtype groups (weights, caches, gradients), those alone in bf16 under f32
 * activations. Fresh inputs: the label seeds them.
 */
export function halfVariants(c: AnyConformanceCase): AnyConformanceCase[] {
  const groups = new Set(c.inputs.map((s, i) => (s ? dtypeGroupOf(declOf(c.spec, i)) : undefined)));
  groups.delete(undefined);
  if (groups.size === 0) return [];
  const variants = HALF_DTYPES.map((dtype) => storedIn(c, dtype, dtype, () => true));
  if (groups.has(ACTIVATIONS) && groups.size > 1) {
    variants.push(storedIn(c, 'bf16', 'bf16 beside f32 activations', (g) => g !== ACTIVATIONS));
  }
  return variants;
}

/**
 * An error case derived from a valid one: the second given input of a dtype
 * group in another dtype than the first must be a DTypeError naming it.
 */
export function mixedDtypeError(c: AnyConformanceCase): AnyErrorCase | undefined {
  const seen = new Map<string, number>();
  for (let i = 0; i < c.inputs.length; i++) {
    const s = c.inputs[i];
    const group = s && (s.dtype ?? 'f32') === 'f32' ? dtypeGroupOf(declOf(c.spec, i)) : undefined;
    if (group === undefined) continue;
    if (!seen.has(group)) {
      seen.set(group, i);
      continue;
    }
    const inputs = c.inputs.map((x, j) => (j === i ? { ...x!, dtype: 'f16' as const } : x));
    const { spec, attrs } = c;
    const argument = inputName(spec, i);
    return {
      spec,
      attrs,
      inputs,
      label: `'${argument}' of another dtype than its group`,
      error: 'dtype',
      argument,
    };
  }
  return undefined;
}

/** A check whose call the backend declares it cannot run, and refused as declared. */
export class UnsupportedOnBackend extends Error {
  override name = 'UnsupportedOnBackend';
}

/** The float dtypes of a case's inputs and outputs. */
function floatDtypesOf(c: AnyConformanceCase): DType[] {
  const metas = c.inputs.map((s, i) =>
    s ? ({ shape: s.shape, dtype: s.dtype ?? declOf(c.spec, i).dtypes[0]! } as TensorMeta) : undefined,
  );
  const outputs = inferKernel(c.spec, metas, c.attrs).outputs;
  return [...new Set([...metas, ...outputs].flatMap((m) => (m && isFloat(m.dtype) ? [m.dtype] : [])))];
}

/**
 * Runs a valid case where the backend declares every dtype of it; otherwise
 * checks that the call is refused with an UnsupportedOnBackendError naming the
 * kernel (never run in f32 instead) and reports it as unsupported.
 */
export async function runAsDeclared(
  backend: Backend,
  c: AnyConformanceCase,
  run: () => Promise<void>,
): Promise<void> {
  const missing = floatDtypesOf(c).filter((d) => isHalf(d) && !backend.supports(c.spec.name, d));
  if (missing.length === 0) return run();
  try {
    await run();
  } catch (error) {
    if (error instanceof UnsupportedOnBackendError && error.operation === c.spec.name) {
      throw new UnsupportedOnBackend(
        `${backend.name} does not run '${c.spec.name}' in ${missing.join(', ')} (refused as declared: ${error.message})`,
      );
    }
    throw error;
  }
  fail(`${backend.name} declares no ${missing.join(', ')} for '${c.spec.name}', yet ran the call`);
}
