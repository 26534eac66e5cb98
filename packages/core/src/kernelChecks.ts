import { type Backend, type RunOptions, Tensor } from './backend.js';
import { describeValue } from './describeValue.js';
import { type DType, isFloat } from './dtype.js';
import {
  BackendMismatchError,
  DisposedTensorError,
  DTypeError,
  InvalidArgumentError,
  ShapeError,
} from './errors.js';
import {
  type AnyKernelSpec,
  type AttrValues,
  dtypeGroupOf,
  type InputMetas,
  inputDecl,
  inputName,
  type KernelSpec,
  type OutputMeta,
  type TensorMeta,
} from './kernel.js';
import { resolveAttrs } from './kernelAttrs.js';
import { formatShape, shapesEqual } from './shape.js';

/** A call's tensor argument: a Tensor, not disposed. */
function checkLiveTensor(
  kernel: string,
  argument: string,
  role: 'input' | 'output',
  t: unknown,
): asserts t is Tensor {
  if (!(t instanceof Tensor)) {
    throw new InvalidArgumentError(`${role} must be a Tensor`, {
      operation: kernel,
      argument,
      expected: 'a Tensor',
      actual: describeValue(t),
    });
  }
  checkTensorAlive(kernel, argument, t);
}

/** Throws a `DisposedTensorError` naming the operation and argument when `tensor` was disposed. */
export function checkTensorAlive(
  operation: string,
  argument: string,
  tensor: Tensor,
  message = 'tensor was used after dispose()',
): void {
  if (tensor.disposed) {
    throw new DisposedTensorError(message, {
      operation,
      argument,
      expected: 'a live tensor',
      actual: `disposed ${tensor.describe()}`,
    });
  }
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
      operation: kernel,
      argument: 'inputs',
      expected: arity,
      actual: describeValue(inputs),
    });
  }
  if ((!last?.variadic && inputs.length > spec.inputs.length) || (last?.variadic && inputs.length <= fixed)) {
    throw new InvalidArgumentError('wrong number of inputs', {
      operation: kernel,
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
          operation: kernel,
          argument,
          expected: `a tensor of ${decl.dtypes.join(' | ')}`,
          actual: 'nothing',
        });
      }
      metas.push(undefined);
      continue;
    }
    checkLiveTensor(kernel, argument, 'input', t);
    owner ??= t.backend;
    if (t.backend !== owner) {
      throw new BackendMismatchError('all tensors of one call must live on one backend', {
        operation: kernel,
        argument,
        expected: `a tensor on ${owner.name}`,
        actual: `a tensor on ${t.backend.name}${t.backend.name === owner.name ? ' (another instance)' : ''}`,
      });
    }
    if (!decl.dtypes.includes(t.dtype)) {
      throw new DTypeError('unsupported element type', {
        operation: kernel,
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
        operation: spec.name,
        argument,
        expected: `${first.dtype} (the type of '${first.argument}')`,
        actual: meta.dtype,
      });
    }
  });
}

/**
 * An input written in place (an output's `aliasOf`) must be the only input
 * over its memory: read through another binding it would be read while being
 * written (a GPU refuses one buffer bound writable and again), and passed
 * twice it would be updated twice (`clipByGlobalNorm([g, g])`). Inputs that
 * are only read may repeat (`mul(x, x)`).
 */
export function checkInPlaceInputs(
  spec: AnyKernelSpec,
  outputs: readonly OutputMeta[],
  inputs: readonly (Tensor | undefined)[],
): void {
  // Inputs by the tensor they view: only those can overlap (an optimizer writes hundreds in place).
  let byBase: Map<Tensor, number[]> | undefined;
  for (const meta of outputs) {
    const written = meta.aliasOf === undefined ? undefined : inputs[meta.aliasOf];
    if (written === undefined) continue;
    if (!byBase) {
      byBase = new Map();
      inputs.forEach((x, i) => {
        if (!x) return;
        const list = byBase!.get(x.base);
        if (list) list.push(i);
        else byBase!.set(x.base, [i]);
      });
    }
    const other =
      byBase.get(written.base)?.find((i) => i !== meta.aliasOf && inputs[i]!.overlaps(written)) ?? -1;
    if (other === -1) continue;
    throw new InvalidArgumentError('an input written in place is also passed as another input', {
      operation: spec.name,
      argument: inputName(spec, other),
      expected: `a tensor over other memory than input '${inputName(spec, meta.aliasOf!)}', which output '${meta.name}' writes in place`,
      actual: inputs[other] === written ? 'the same tensor' : 'the same memory through a view',
    });
  }
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
      operation: kernel,
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
        operation: kernel,
        argument,
        expected: `nothing (output '${meta.name}' is input '${inputName(spec, meta.aliasOf)}')`,
        actual: describeValue(t),
      });
    }
    checkLiveTensor(kernel, argument, 'output', t);
    if (t.backend !== backend) {
      throw new BackendMismatchError('output lives on another backend', {
        operation: kernel,
        argument,
        expected: `a tensor on ${backend.name}`,
        actual: `a tensor on ${t.backend.name}`,
      });
    }
    const input = inputs.findIndex((x) => x !== undefined && x.base === t.base);
    if (input !== -1) {
      // GPUs cannot read and write one buffer in one dispatch; in-place
      // updates are the in-place kernels' job. A view shares its base's memory.
      throw new InvalidArgumentError('a preallocated output must not also be an input', {
        operation: kernel,
        argument,
        expected: 'a tensor that is not an input of this call, nor a view of one, nor the base of one',
        actual: `input '${inputName(spec, input)}'${inputs[input] === t ? '' : ' (the same memory through a view)'}`,
      });
    }
    if (!shapesEqual(t.shape, meta.shape)) {
      throw new ShapeError('preallocated output has the wrong shape', {
        operation: kernel,
        argument,
        expected: formatShape(meta.shape),
        actual: formatShape(t.shape),
      });
    }
    if (t.dtype !== meta.dtype) {
      throw new DTypeError('preallocated output has the wrong element type', {
        operation: kernel,
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
  checkInPlaceInputs(spec, outputs, inputs);
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
