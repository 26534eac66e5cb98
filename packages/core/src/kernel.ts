import { type DType, type HostArray, isHalf, toHostArray, toNumbers } from './dtype.js';
import { InvalidArgumentError, RayoError } from './errors.js';
import type { Shape } from './shape.js';

// The kernel spec language: what a spec declares, `defineKernel`, and the
// helpers its reference implementations use. Checking a call against a spec
// is kernelAttrs.ts and kernelChecks.ts.

export type AttrValue = number | boolean | string | readonly number[];
export type AttrValues = { readonly [key: string]: AttrValue };

export type AttrDecl =
  | {
      readonly kind: 'number';
      readonly default?: number;
      readonly integer?: boolean;
      /** Inclusive bounds. */
      readonly min?: number;
      readonly max?: number;
      /** Exclusive lower bound. */
      readonly above?: number;
      /** Refuses ±Infinity (NaN is always refused). */
      readonly finite?: boolean;
      readonly doc?: string;
    }
  | { readonly kind: 'boolean'; readonly default?: boolean; readonly doc?: string }
  | {
      /** A list of numbers, e.g. one per tensor of a multi-tensor kernel; `infer` checks its length. */
      readonly kind: 'numbers';
      readonly default?: readonly number[];
      /** Inclusive bounds on every element. */
      readonly min?: number;
      readonly max?: number;
      readonly doc?: string;
    }
  | {
      readonly kind: 'enum';
      readonly values: readonly string[];
      readonly default?: string;
      readonly doc?: string;
    };

export type AttrDecls<A extends AttrValues> = { readonly [K in keyof A]-?: AttrDecl };

export interface InputDecl {
  readonly name: string;
  readonly dtypes: readonly DType[];
  /**
   * Float inputs of one group must share one dtype. An input that allows a
   * half dtype is in group `activation` unless it names another (weights
   * that may be half under f32 activations, caches, gradients).
   */
  readonly dtypeGroup?: string;
  /** May be passed as `undefined`. */
  readonly optional?: boolean;
  /** The last input only: one or more tensors, named `name[0]`, `name[1]`, … */
  readonly variadic?: boolean;
  /**
   * A variadic input of repeating roles (an optimizer's param, grad, m, v):
   * its element k takes the dtypes and dtype group of `roles[k % length]`
   * instead of the input's own.
   */
  readonly roles?: readonly Pick<InputDecl, 'dtypes' | 'dtypeGroup'>[];
  /**
   * An optional one-element tensor (shape [1]) that holds this attribute's
   * value on the device. The kernel reads it when it runs, so a recorded batch
   * replays with whatever was last written to it. When the tensor is given the
   * attribute must not be, and it resolves to 0; the spec's `infer` checks
   * only the bounds that hold for every value, and a value outside the
   * attribute's range gives an unspecified result (never an access outside a
   * tensor on a device; an error from the reference).
   */
  readonly attribute?: string;
  readonly doc?: string;
}

export interface TensorMeta {
  readonly shape: Shape;
  readonly dtype: DType;
}

export interface OutputMeta extends TensorMeta {
  readonly name: string;
  /** The output is written in place into this input (a flat input index). */
  readonly aliasOf?: number;
}

export interface KernelCost {
  /** Floating-point operations (a multiply-add counts as two). */
  readonly flops: number;
  /** Bytes a perfect kernel must move to and from memory. */
  readonly bytes: number;
}

export type InputMetas = readonly (TensorMeta | undefined)[];

/**
 * One operation, declared once: its inputs, attributes, shape and dtype
 * inference with argument validation, and a plain reference implementation
 * that is the oracle for every backend.
 */
export interface KernelSpec<A extends AttrValues = AttrValues> {
  readonly name: string;
  /** The kernel family (one file per family in every backend). */
  readonly family: string;
  readonly summary: string;
  readonly inputs: readonly InputDecl[];
  readonly attributes: AttrDecls<A>;
  /**
   * Attributes users of other frameworks reach for that the kernel does not
   * take, each with what to do instead: the error for one given says that
   * rather than only "unknown attribute" (e.g. softmax's `axis`).
   */
  readonly refusedAttributes?: Readonly<Record<string, string>>;
  /**
   * Output shapes and dtypes. Called after the declared checks (input count,
   * dtypes, live tensors, one backend, attribute kinds and ranges) passed;
   * checks what they cannot express and throws a RayoError naming the argument.
   */
  infer(inputs: InputMetas, attrs: A): OutputMeta[];
  /**
   * Plain TypeScript implementation. Never writes its inputs; returns one new
   * array per output (for in-place outputs, the new contents).
   */
  reference(inputs: readonly (HostArray | undefined)[], attrs: A, io: KernelIO): HostArray[];
  /** Work done, for the benchmark's GFLOP/s and GB/s. */
  cost?(inputs: InputMetas, attrs: A): KernelCost;
}

export interface KernelIO {
  readonly inputs: InputMetas;
  readonly outputs: readonly OutputMeta[];
}

// biome-ignore lint/suspicious/noExplicitAny: a list of specs of different attribute types
export type AnyKernelSpec = KernelSpec<any>;

export function defineKernel<A extends AttrValues>(spec: KernelSpec<A>): KernelSpec<A> {
  const variadic = spec.inputs.findIndex((d) => d.variadic);
  if (variadic !== -1 && variadic !== spec.inputs.length - 1) {
    throw new RayoError(`only the last input may be variadic`, { operation: spec.name });
  }
  for (const decl of spec.inputs) {
    const target =
      decl.attribute === undefined
        ? undefined
        : (spec.attributes as Record<string, AttrDecl>)[decl.attribute];
    if (decl.attribute !== undefined && (!decl.optional || target?.kind !== 'number')) {
      throw new RayoError(`input '${decl.name}' must be optional and stand for a number attribute`, {
        operation: spec.name,
      });
    }
  }
  return Object.freeze(spec);
}

/**
 * Runs `implementation` (the spec's reference by default) as f32 code:
 * half inputs are widened to Float32Array and each half output is rounded to
 * its dtype, ties to even. Every caller of a reference goes through here.
 */
export function runReference<A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly (HostArray | undefined)[],
  attrs: A,
  io: KernelIO,
  implementation: KernelSpec<A>['reference'] = spec.reference,
): HostArray[] {
  const widened = inputs.map((data, i) => {
    const dtype = io.inputs[i]?.dtype;
    return data && dtype && isHalf(dtype) ? Float32Array.from(toNumbers(dtype, data)) : data;
  });
  return implementation(widened, attrs, io).map((result, i) => {
    const dtype = io.outputs[i]?.dtype;
    return dtype && isHalf(dtype) && !(result instanceof Uint16Array) ? toHostArray(dtype, result) : result;
  });
}

/** The dtype group of every half-capable input that names no other; outputs take its dtype. */
export const ACTIVATIONS = 'activation';

/** The dtype group of a float input (see `InputDecl.dtypeGroup`), or undefined. */
export function dtypeGroupOf(decl: InputDecl): string | undefined {
  return decl.dtypeGroup ?? (decl.dtypes.some(isHalf) ? ACTIVATIONS : undefined);
}

/** The name of flat input `index` (`grads[2]` for a variadic input). */
export function inputName(spec: AnyKernelSpec, index: number): string {
  const fixed = spec.inputs.length;
  const last = spec.inputs[fixed - 1];
  if (last?.variadic && index >= fixed - 1) return `${last.name}[${index - (fixed - 1)}]`;
  return spec.inputs[index]?.name ?? `input${index}`;
}

/** The declaration of flat input `index`, a variadic element's role applied. */
export function inputDecl(spec: AnyKernelSpec, index: number): InputDecl | undefined {
  const fixed = spec.inputs.length - 1;
  const last = spec.inputs[fixed];
  if (!last?.variadic || index < fixed) return spec.inputs[index];
  if (!last.roles?.length) return last;
  return roleDecls(spec, last, last.roles)[(index - fixed) % last.roles.length];
}

/**
 * A variadic input's declaration under each of its roles, made once per
 * spec: calls check every element of a list of hundreds (an optimizer's
 * tensors) on every call.
 */
function roleDecls(
  spec: AnyKernelSpec,
  last: InputDecl,
  roles: readonly Pick<InputDecl, 'dtypes' | 'dtypeGroup'>[],
): InputDecl[] {
  let decls = ROLE_DECLS.get(spec);
  if (!decls) {
    decls = roles.map((role) => ({ ...last, ...role }));
    ROLE_DECLS.set(spec, decls);
  }
  return decls;
}

const ROLE_DECLS = new WeakMap<AnyKernelSpec, InputDecl[]>();

/**
 * The value of a device-held attribute for a reference implementation: the
 * tensor's element when it is given, else the resolved attribute. A value
 * outside [min, max] is an error here; on a device its result is unspecified.
 */
export function deviceAttribute(
  spec: AnyKernelSpec,
  attribute: string,
  tensor: HostArray | undefined,
  attrValue: number,
  min: number,
  max: number,
): number {
  if (tensor === undefined) return attrValue;
  const value = Number(tensor[0]);
  if (!(value >= min && value <= max)) {
    const decl = spec.inputs.find((d) => d.attribute === attribute);
    throw new InvalidArgumentError('device value out of range', {
      operation: spec.name,
      argument: decl?.name ?? attribute,
      expected: `${min} … ${max}`,
      actual: String(tensor[0]),
    });
  }
  return value;
}
