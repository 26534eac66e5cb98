import type { DType, Shape, Tensor } from '@rayo/core';

/**
 * The backward rule of one recorded operation: from the gradient of its output,
 * the gradients of the inputs whose `needs` entry is true (the others may be
 * left undefined). Runs kernels on the tape; never reads a tensor back.
 */
export type BackwardFn = (dy: Tensor, needs: readonly boolean[]) => readonly (Tensor | undefined)[];

export interface VariableInit {
  readonly requiresGrad?: boolean;
  readonly name?: string;
}

/**
 * A value in a computation: a tensor, and how it was computed when it came
 * from a recorded operation. Leaves that require a gradient (parameters,
 * inputs being differentiated) receive it in `grad` after `Tape.backward`.
 */
export class Variable {
  #value: Tensor;
  readonly requiresGrad: boolean;
  /** Accumulated gradient of a leaf; stays until `zeroGrad()` (or the tape's dispose for tape leaves). */
  grad: Tensor | undefined;
  /**
   * Where backward puts this leaf's gradient: asked once per deposit, it
   * gives a tensor of the leaf's shape (a view of a flat buffer that
   * collectives take whole) that backward copies the gradient into and
   * `grad` then is. Undefined: the gradient is memory of its own.
   */
  gradientHome: (() => Tensor) | undefined;
  readonly name: string | undefined;
  /** Inputs of the operation that made this variable (empty for leaves). */
  readonly inputs: readonly Variable[];
  readonly backwardFn: BackwardFn | undefined;

  constructor(
    value: Tensor,
    init: VariableInit = {},
    inputs: readonly Variable[] = [],
    backwardFn?: BackwardFn,
  ) {
    this.#value = value;
    this.requiresGrad = init.requiresGrad ?? false;
    this.name = init.name;
    this.inputs = inputs;
    this.backwardFn = backwardFn;
  }

  get value(): Tensor {
    return this.#value;
  }

  /** Points the variable at other memory (a parameter moved into a flat buffer: `Parameter.moveInto`). */
  protected replaceValue(value: Tensor): void {
    this.#value = value;
  }

  get shape(): Shape {
    return this.value.shape;
  }

  get dtype(): DType {
    return this.value.dtype;
  }

  get size(): number {
    return this.value.size;
  }

  get isLeaf(): boolean {
    return this.backwardFn === undefined;
  }

  /** Drops the accumulated gradient. */
  zeroGrad(): void {
    this.grad?.dispose();
    this.grad = undefined;
  }
}
