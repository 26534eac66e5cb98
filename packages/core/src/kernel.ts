import type { Backend, RunOptions } from './backend.js';
import { type DType, type HostArray, isFloat, isHalf, toHostArray, toNumbers } from './dtype.js';
import {
  BackendMismatchError,
  DisposedTensorError,
  DTypeError,
  InvalidArgumentError,
  RayoError,
  ShapeError,
} from './errors.js';
import { ACTIVATIONS } from './kernels/vocabulary.js';
import { formatShape, type Shape, shapesEqual } from './shape.js';
import { Tensor } from './tensor.js';

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
    throw new RayoError(`only the last input may be variadic`, { kernel: spec.name });
  }
  for (const decl of spec.inputs) {
    const target =
      decl.attribute === undefined
        ? undefined
        : (spec.attributes as Record<string, AttrDecl>)[decl.attribute];
    if (decl.attribute !== undefined && (!decl.optional || target?.kind !== 'number')) {
      throw new RayoError(`input '${decl.name}' must be optional and stand for a number attribute`, {
        kernel: spec.name,
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
  const role = last.roles?.[(index - fixed) % last.roles.length];
  return role ? { ...last, ...role } : last;
}

function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (value instanceof Tensor) return `tensor ${value.describe()}`;
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return `[${value.map(describeValue).join(', ')}]`;
  return String(value);
}

/**
 * Applies defaults and checks each attribute against its declaration. An
 * attribute whose device tensor is among `inputs` must not be given and
 * resolves to 0.
 */
export function resolveAttrs<A extends AttrValues>(
  spec: KernelSpec<A>,
  given: Partial<A> | undefined,
  inputs: InputMetas = [],
): A {
  const kernel = spec.name;
  const decls = spec.attributes as Record<string, AttrDecl>;
  const values: Record<string, AttrValue> = {};
  const onDevice = deviceAttributes(spec, inputs, given);
  for (const key of Object.keys(given ?? {})) {
    if (!(key in decls)) {
      const known = Object.keys(decls);
      throw new InvalidArgumentError('unknown attribute', {
        kernel,
        argument: `attrs.${key}`,
        expected: known.length ? `one of ${known.join(', ')}` : 'no attributes',
        actual: key,
      });
    }
  }
  for (const [key, decl] of Object.entries(decls)) {
    if (onDevice.has(key)) {
      values[key] = 0;
      continue;
    }
    const value = (given as Record<string, unknown> | undefined)?.[key] ?? decl.default;
    const argument = `attrs.${key}`;
    if (value === undefined) {
      throw new InvalidArgumentError('required attribute is missing', {
        kernel,
        argument,
        expected:
          decl.kind === 'enum'
            ? decl.values.join(' | ')
            : decl.kind === 'numbers'
              ? 'a list of numbers'
              : `a ${decl.kind}`,
        actual: 'nothing',
      });
    }
    if (decl.kind === 'number') {
      if (typeof value !== 'number' || Number.isNaN(value)) {
        throw new InvalidArgumentError('attribute must be a number', {
          kernel,
          argument,
          expected: decl.integer ? 'an integer' : 'a number',
          actual: describeValue(value),
        });
      }
      if (decl.integer && !Number.isInteger(value)) {
        throw new InvalidArgumentError('attribute must be an integer', {
          kernel,
          argument,
          expected: 'an integer',
          actual: String(value),
        });
      }
      const bounds = [
        decl.min !== undefined && value < decl.min ? `>= ${decl.min}` : undefined,
        decl.max !== undefined && value > decl.max ? `<= ${decl.max}` : undefined,
        decl.above !== undefined && value <= decl.above ? `> ${decl.above}` : undefined,
      ].find((b) => b !== undefined);
      if (bounds) {
        throw new InvalidArgumentError('attribute out of range', {
          kernel,
          argument,
          expected: bounds,
          actual: String(value),
        });
      }
    } else if (decl.kind === 'numbers') {
      values[key] = checkNumberList(kernel, argument, decl, value);
      continue;
    } else if (decl.kind === 'boolean') {
      if (typeof value !== 'boolean') {
        throw new InvalidArgumentError('attribute must be a boolean', {
          kernel,
          argument,
          expected: 'true or false',
          actual: describeValue(value),
        });
      }
    } else if (typeof value !== 'string' || !decl.values.includes(value)) {
      throw new InvalidArgumentError('attribute must be one of its values', {
        kernel,
        argument,
        expected: decl.values.map((v) => JSON.stringify(v)).join(' | '),
        actual: describeValue(value),
      });
    }
    values[key] = value as AttrValue;
  }
  return values as unknown as A;
}

/** A copy of a `numbers` attribute after checking every element; frozen, so a recorded call keeps its values. */
function checkNumberList(
  kernel: string,
  argument: string,
  decl: Extract<AttrDecl, { kind: 'numbers' }>,
  value: unknown,
): readonly number[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new InvalidArgumentError('attribute must be a non-empty list of numbers', {
      kernel,
      argument,
      expected: 'an array of numbers',
      actual: Array.isArray(value) ? 'an empty array' : describeValue(value),
    });
  }
  value.forEach((x: unknown, i) => {
    const bound =
      typeof x !== 'number' || Number.isNaN(x)
        ? 'a number'
        : decl.min !== undefined && x < decl.min
          ? `>= ${decl.min}`
          : decl.max !== undefined && x > decl.max
            ? `<= ${decl.max}`
            : undefined;
    if (bound) {
      throw new InvalidArgumentError('attribute element out of range', {
        kernel,
        argument: `${argument}[${i}]`,
        expected: bound,
        actual: describeValue(x),
      });
    }
  });
  return Object.freeze([...(value as number[])]);
}

/**
 * The attributes whose value a given input holds on the device; checks that
 * such an input is one element of shape [1] and that its attribute is not
 * also given.
 */
function deviceAttributes(
  spec: AnyKernelSpec,
  inputs: InputMetas,
  given: Partial<AttrValues> | undefined,
): Set<string> {
  const keys = new Set<string>();
  spec.inputs.forEach((decl, i) => {
    const meta = inputs[i];
    if (decl.attribute === undefined || !meta) return;
    if (meta.shape.length !== 1 || meta.shape[0] !== 1) {
      throw new ShapeError('a device value must be a tensor of one element', {
        kernel: spec.name,
        argument: decl.name,
        expected: '[1]',
        actual: formatShape(meta.shape),
      });
    }
    const value = (given as Record<string, unknown> | undefined)?.[decl.attribute];
    if (value !== undefined) {
      throw new InvalidArgumentError(
        `give either attrs.${decl.attribute} or input '${decl.name}', not both`,
        {
          kernel: spec.name,
          argument: `attrs.${decl.attribute}`,
          expected: `nothing (input '${decl.name}' holds it on the device)`,
          actual: describeValue(value),
        },
      );
    }
    keys.add(decl.attribute);
  });
  return keys;
}

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
      kernel: spec.name,
      argument: decl?.name ?? attribute,
      expected: `${min} … ${max}`,
      actual: String(tensor[0]),
    });
  }
  return value;
}

/** Checks the number of inputs, their liveness, backend and dtypes; returns their metadata. */
export function checkInputs(
  spec: AnyKernelSpec,
  inputs: readonly (Tensor | undefined)[],
  backend: Backend | undefined,
): (TensorMeta | undefined)[] {
  const kernel = spec.name;
  const last = spec.inputs[spec.inputs.length - 1];
  const fixed = last?.variadic ? spec.inputs.length - 1 : spec.inputs.length;
  const arity = last?.variadic
    ? `at least ${spec.inputs.length} input(s)`
    : `${spec.inputs.filter((d) => !d.optional).length}–${spec.inputs.length} inputs`;
  if (!Array.isArray(inputs)) {
    throw new InvalidArgumentError('inputs must be an array of tensors', {
      kernel,
      argument: 'inputs',
      expected: arity,
      actual: describeValue(inputs),
    });
  }
  if ((!last?.variadic && inputs.length > spec.inputs.length) || (last?.variadic && inputs.length <= fixed)) {
    throw new InvalidArgumentError('wrong number of inputs', {
      kernel,
      argument: 'inputs',
      expected: arity,
      actual: `${inputs.length}`,
    });
  }
  let owner = backend;
  const metas: (TensorMeta | undefined)[] = [];
  const count = Math.max(inputs.length, spec.inputs.length - (last?.variadic ? 1 : 0));
  for (let i = 0; i < count; i++) {
    const decl = inputDecl(spec, i)!;
    const argument = inputName(spec, i);
    const t = inputs[i];
    if (t === undefined || t === null) {
      if (!decl.optional) {
        throw new InvalidArgumentError('required input is missing', {
          kernel,
          argument,
          expected: `a tensor of ${decl.dtypes.join(' | ')}`,
          actual: 'nothing',
        });
      }
      metas.push(undefined);
      continue;
    }
    if (!(t instanceof Tensor)) {
      throw new InvalidArgumentError('input must be a Tensor', {
        kernel,
        argument,
        expected: 'a Tensor',
        actual: describeValue(t),
      });
    }
    if (t.disposed) {
      throw new DisposedTensorError('tensor was used after dispose()', {
        kernel,
        argument,
        expected: 'a live tensor',
        actual: `disposed ${t.describe()}`,
      });
    }
    owner ??= t.backend;
    if (t.backend !== owner) {
      throw new BackendMismatchError('all tensors of one call must live on one backend', {
        kernel,
        argument,
        expected: `a tensor on ${owner.name}`,
        actual: `a tensor on ${t.backend.name}${t.backend.name === owner.name ? ' (another instance)' : ''}`,
      });
    }
    if (!decl.dtypes.includes(t.dtype)) {
      throw new DTypeError('unsupported element type', {
        kernel,
        argument,
        expected: decl.dtypes.join(' | '),
        actual: t.dtype,
      });
    }
    metas.push({ shape: t.shape, dtype: t.dtype });
  }
  checkDtypeGroups(spec, metas);
  return metas;
}

/** Float inputs of one dtype group share one dtype: the first given input's. */
export function checkDtypeGroups(spec: AnyKernelSpec, inputs: InputMetas): void {
  const groups = new Map<string, { dtype: DType; argument: string }>();
  inputs.forEach((meta, i) => {
    const decl = inputDecl(spec, i);
    if (!meta || !decl || !isFloat(meta.dtype)) return;
    const group = dtypeGroupOf(decl);
    if (group === undefined) return;
    const argument = inputName(spec, i);
    const first = groups.get(group);
    if (!first) groups.set(group, { dtype: meta.dtype, argument });
    else if (first.dtype !== meta.dtype) {
      throw new DTypeError(`inputs of dtype group '${group}' must share one element type`, {
        kernel: spec.name,
        argument,
        expected: `${first.dtype} (the type of '${first.argument}')`,
        actual: meta.dtype,
      });
    }
  });
}

/** Checks caller-provided outputs against the inferred ones. */
export function checkOutputs(
  spec: AnyKernelSpec,
  outputs: readonly OutputMeta[],
  out: RunOptions['out'],
  backend: Backend,
  inputs: readonly (Tensor | undefined)[] = [],
): void {
  if (!out) return;
  const kernel = spec.name;
  if (out.length > outputs.length) {
    throw new InvalidArgumentError('more preallocated outputs than the kernel has', {
      kernel,
      argument: 'out',
      expected: `at most ${outputs.length}`,
      actual: `${out.length}`,
    });
  }
  out.forEach((t, i) => {
    if (t === undefined) return;
    const meta = outputs[i]!;
    const argument = `out[${i}]`;
    if (meta.aliasOf !== undefined) {
      throw new InvalidArgumentError('this output is written in place into an input', {
        kernel,
        argument,
        expected: `nothing (output '${meta.name}' is input '${inputName(spec, meta.aliasOf)}')`,
        actual: describeValue(t),
      });
    }
    if (!(t instanceof Tensor)) {
      throw new InvalidArgumentError('output must be a Tensor', {
        kernel,
        argument,
        expected: 'a Tensor',
        actual: describeValue(t),
      });
    }
    if (t.disposed) {
      throw new DisposedTensorError('tensor was used after dispose()', {
        kernel,
        argument,
        expected: 'a live tensor',
        actual: `disposed ${t.describe()}`,
      });
    }
    if (t.backend !== backend) {
      throw new BackendMismatchError('output lives on another backend', {
        kernel,
        argument,
        expected: `a tensor on ${backend.name}`,
        actual: `a tensor on ${t.backend.name}`,
      });
    }
    const input = inputs.indexOf(t);
    if (input !== -1) {
      // GPUs cannot read and write one buffer in one dispatch; in-place
      // updates are the in-place kernels' job.
      throw new InvalidArgumentError('a preallocated output must not also be an input', {
        kernel,
        argument,
        expected: 'a tensor that is not an input of this call',
        actual: `input '${inputName(spec, input)}'`,
      });
    }
    if (!shapesEqual(t.shape, meta.shape)) {
      throw new ShapeError('preallocated output has the wrong shape', {
        kernel,
        argument,
        expected: formatShape(meta.shape),
        actual: formatShape(t.shape),
      });
    }
    if (t.dtype !== meta.dtype) {
      throw new DTypeError('preallocated output has the wrong element type', {
        kernel,
        argument,
        expected: meta.dtype,
        actual: t.dtype,
      });
    }
  });
}

export interface PreparedKernel<A extends AttrValues> {
  readonly attrs: A;
  readonly inputs: InputMetas;
  readonly outputs: readonly OutputMeta[];
}

/**
 * Everything a backend checks before it runs a kernel, in one place: inputs,
 * attributes, inferred outputs and preallocated outputs.
 */
export function prepareKernel<A extends AttrValues>(
  spec: KernelSpec<A>,
  backend: Backend,
  inputs: readonly (Tensor | undefined)[],
  attrs: Partial<A> | undefined,
  options: RunOptions | undefined,
): PreparedKernel<A> {
  const metas = checkInputs(spec, inputs, backend);
  const resolved = resolveAttrs(spec, attrs, metas);
  const outputs = spec.infer(metas, resolved);
  checkOutputs(spec, outputs, options?.out, backend, inputs);
  return { attrs: resolved, inputs: metas, outputs };
}

/** Metadata only: validates inputs given as shapes and dtypes and infers the outputs. */
export function inferKernel<A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: InputMetas,
  attrs?: Partial<A>,
): { attrs: A; outputs: OutputMeta[] } {
  checkDtypeGroups(spec, inputs);
  const resolved = resolveAttrs(spec, attrs, inputs);
  return { attrs: resolved, outputs: spec.infer(inputs, resolved) };
}
