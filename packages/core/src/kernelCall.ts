import type { Backend, RunOptions, Tensor } from './backend.js';
import { duplicateCoreError, otherCores } from './coreCopies.js';
import { type DType, isFloat } from './dtype.js';
import { UnsupportedOnBackendError } from './errors.js';
import {
  type AnyKernelSpec,
  type AttrValues,
  inputName,
  type KernelIO,
  type KernelSpec,
  type OutputMeta,
} from './kernel.js';
import { prepareKernel } from './kernelChecks.js';

/** What a backend's kernel (WGSL, PTX) says of itself. */
export interface KernelImplementation {
  readonly spec: AnyKernelSpec;
  /**
   * The float dtypes its tensors may have (inputs and outputs); f32 only when
   * absent. `checkCall` refuses any other with an UnsupportedOnBackendError,
   * never a silent f32 fallback.
   */
  readonly dtypes?: readonly DType[];
}

/** What an implementation that declares nothing runs: f32 only. */
export const F32_ONLY: readonly DType[] = ['f32'];

/** A backend's implementations of kernel specs, looked up by spec. */
export class KernelTable<K extends KernelImplementation> {
  readonly #byName: ReadonlyMap<string, K>;

  /**
   * @param backend the backend's registry name, for errors
   * @param language what its kernels are written in (`WGSL`, `PTX`), for errors
   */
  constructor(
    private readonly backend: string,
    private readonly language: string,
    kernels: readonly K[],
  ) {
    this.#byName = new Map(kernels.map((k) => [k.spec.name, k]));
  }

  has(kernel: string): boolean {
    return this.#byName.has(kernel);
  }

  /** Whether `kernel` is implemented and, given `dtype`, runs float tensors of that dtype. */
  supports(kernel: string, dtype?: DType): boolean {
    const implementation = this.#byName.get(kernel);
    if (!implementation) return false;
    return dtype === undefined || !isFloat(dtype) || floatDtypesOf(implementation).includes(dtype);
  }

  /** The implementation of `spec` itself; another spec object of the same name is refused. */
  get(spec: AnyKernelSpec): K {
    const kernel = this.#byName.get(spec?.name);
    if (kernel && kernel.spec === spec) return kernel;
    if (kernel && otherCores().length > 0) {
      throw duplicateCoreError(`the ${this.backend} backend cannot run this '${spec.name}' spec`, undefined, {
        operation: spec.name,
      });
    }
    throw new UnsupportedOnBackendError(`kernel is not implemented on the ${this.backend} backend`, {
      operation: spec?.name ?? String(spec),
      expected: 'a kernel spec from @rayo/core that this backend implements',
      actual: kernel
        ? 'another spec object of the same name'
        : `no ${this.language} implementation of '${spec?.name}'`,
    });
  }
}

/** A validated kernel call whose outputs exist. */
export interface PreparedCall<K, A extends AttrValues> {
  readonly implementation: K;
  readonly attrs: A;
  readonly io: KernelIO;
  /** One tensor per declared output: in-place outputs are their inputs, given ones are `options.out`'s. */
  readonly outputs: Tensor[];
  /** The outputs allocated for this call, which the caller disposes if the call fails later. */
  readonly fresh: Tensor[];
}

/** What `checkCall` finds of a valid call: the resolved attributes and every tensor's metadata. */
export interface CheckedCall<A extends AttrValues> {
  readonly attrs: A;
  readonly io: KernelIO;
}

/**
 * Validation every backend does before it allocates a call's outputs: the
 * spec's own checks and inference, then the float dtypes the backend's
 * implementation runs (`floats`, see `floatDtypesOf`). Throws for bad input;
 * calls nothing of the backend.
 */
export function checkCall<A extends AttrValues>(
  backend: Backend,
  spec: KernelSpec<A>,
  floats: readonly DType[],
  inputs: readonly (Tensor | undefined)[],
  attrs: Partial<A> | undefined,
  options: RunOptions | undefined,
): CheckedCall<A> {
  const prepared = prepareKernel(spec, backend, inputs, attrs, options);
  checkFloatDtypes(backend.name, spec as AnyKernelSpec, floats, prepared);
  return { attrs: prepared.attrs, io: { inputs: prepared.inputs, outputs: prepared.outputs } };
}

/** The float dtypes an implementation declares (`KernelImplementation.dtypes`), else f32 only. */
export function floatDtypesOf(implementation: unknown): readonly DType[] {
  const declared = (implementation as Partial<KernelImplementation> | undefined)?.dtypes;
  return Array.isArray(declared) ? declared : F32_ONLY;
}

/** Refuses a float input or output of a dtype the implementation does not declare. */
function checkFloatDtypes(
  backend: string,
  spec: AnyKernelSpec,
  floats: readonly DType[],
  call: { readonly inputs: KernelIO['inputs']; readonly outputs: readonly OutputMeta[] },
): void {
  const tensors = [
    ...call.inputs.map((meta, i) => ({ meta, argument: inputName(spec, i), what: 'input' })),
    ...call.outputs.map((meta, i) => ({ meta, argument: `out[${i}]`, what: `output '${meta.name}'` })),
  ];
  for (const { meta, argument, what } of tensors) {
    if (!meta || !isFloat(meta.dtype) || floats.includes(meta.dtype)) continue;
    throw new UnsupportedOnBackendError(
      `the ${backend} backend does not run this kernel with an ${what} in ${meta.dtype}`,
      {
        operation: spec.name,
        argument,
        expected: `${floats.join(' | ')} (what the ${backend} backend implements)`,
        actual: meta.dtype,
      },
    );
  }
}
