import type { AttrValues, KernelSpec } from '../kernel.js';
import type { Shape } from '../shape.js';

/** A kernel call as a backend receives it, over its own operand type `O` (validated inputs, allocated outputs). */
export interface SpecCall<O extends { readonly shape: Shape }, A extends AttrValues> {
  readonly inputs: readonly (O | undefined)[];
  readonly outputs: readonly O[];
  readonly attrs: A;
}

/** The attribute values of a kernel spec. */
export type AttrsOf<S> = S extends KernelSpec<infer A> ? A : never;
