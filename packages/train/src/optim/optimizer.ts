import {
  type Backend,
  type DType,
  formatShape,
  type HostArray,
  InvalidArgumentError,
  type KernelRunner,
  type Shape,
  ShapeError,
  shapesEqual,
  type Tensor,
} from '@rayo/core';
import type { Parameter } from '../nn/module.js';

/** Parameters with their names (as `Module.namedParameters()` gives them), or a plain list. */
export type ParameterList = readonly Parameter[] | readonly (readonly [string, Parameter])[];

export interface HostTensor {
  readonly data: HostArray;
  readonly shape: Shape;
}

/** A state tensor read to the host, as a checkpoint stores it. */
export interface StoredState extends HostTensor {
  readonly dtype: DType;
}

function named(params: ParameterList): [string, Parameter][] {
  return params.map((entry, i) =>
    Array.isArray(entry) ? [entry[0] as string, entry[1] as Parameter] : [String(i), entry as Parameter],
  );
}

/**
 * Updates parameters from their gradients on the device. State tensors (one
 * or more per parameter) are named `<parameter>.<slot>` for checkpoints.
 */
export abstract class Optimizer {
  readonly backend: Backend;
  readonly names: readonly string[];
  readonly params: readonly Parameter[];
  /** Learning rate of the next step; a schedule sets it before each step. */
  lr: number;
  /** Steps taken so far (AdamW's bias correction uses it). */
  stepCount = 0;
  /** Checkpoint tag of the optimizer kind. */
  abstract readonly kind: string;
  readonly #state = new Map<string, Tensor>();

  protected constructor(params: ParameterList, lr: number, slots: readonly string[]) {
    const entries = named(params);
    if (entries.length === 0) {
      throw new InvalidArgumentError('an optimizer needs parameters', {
        operation: 'Optimizer',
        argument: 'params',
        expected: 'at least one parameter',
        actual: 'none',
      });
    }
    if (!(lr >= 0)) {
      throw new InvalidArgumentError('the learning rate must be a non-negative number', {
        operation: 'Optimizer',
        argument: 'lr',
        expected: '>= 0',
        actual: String(lr),
      });
    }
    this.backend = entries[0]![1].value.backend;
    this.names = entries.map(([n]) => n);
    this.params = entries.map(([, p]) => p);
    this.lr = lr;
    for (const [name, p] of entries) {
      for (const slot of slots) this.#state.set(`${name}.${slot}`, this.backend.zeros(p.shape));
    }
  }

  /** The state tensor of a parameter's slot. */
  protected slot(index: number, slot: string): Tensor {
    return this.#state.get(`${this.names[index]}.${slot}`)!;
  }

  /** Records one update of every parameter that has a gradient into `runner` (default: the backend). */
  abstract step(runner?: KernelRunner): void;

  /** Hyperparameters, for checkpoint metadata. */
  abstract hyperparameters(): Record<string, number | boolean>;

  /**
   * Orders later work on the backend (reads of the parameters) after any
   * update of the parameters still running beside it: a sharded
   * optimizer's all-gathers left running by a step (`gatherAhead`). Nothing
   * to do for an optimizer that updates in its backend's queue.
   */
  settle(): void {}

  zeroGrad(): void {
    for (const p of this.params) p.zeroGrad();
  }

  /** Named state tensors (live; read them to save). */
  stateTensors(): [string, Tensor][] {
    return [...this.#state];
  }

  /**
   * The state read to the host, whole, as a checkpoint stores it (a sharded
   * optimizer gathers it from the ranks).
   */
  async readState(): Promise<[string, StoredState][]> {
    const out: [string, StoredState][] = [];
    for (const [name, t] of this.#state)
      out.push([name, { dtype: t.dtype, shape: t.shape, data: await t.read() }]);
    return out;
  }

  /** Checks that `tensors` hold every state tensor with its shape, writing nothing (else the error `loadState` would give). */
  checkState(tensors: ReadonlyMap<string, HostTensor>): void {
    for (const [name, target] of this.#state) {
      const source = tensors.get(name);
      if (!source) {
        throw new InvalidArgumentError('optimizer state is missing a tensor', {
          operation: 'Optimizer.loadState',
          argument: name,
          expected: `a tensor of shape ${formatShape(target.shape)}`,
          actual: 'nothing',
        });
      }
      if (!shapesEqual(source.shape, target.shape)) {
        throw new ShapeError('optimizer state has the wrong shape', {
          operation: 'Optimizer.loadState',
          argument: name,
          expected: formatShape(target.shape),
          actual: formatShape(source.shape),
        });
      }
    }
  }

  /** Overwrites the state from host data (every slot must be given) and the step count. */
  loadState(tensors: ReadonlyMap<string, HostTensor>, stepCount: number): void {
    this.checkState(tensors);
    for (const [name, target] of this.#state) {
      const source = tensors.get(name)!;
      const staged = this.backend.upload(source.data, source.shape, target.dtype);
      this.backend.copy(staged, target);
      staged.dispose();
    }
    this.stepCount = stepCount;
  }

  dispose(): void {
    for (const t of this.#state.values()) t.dispose();
    this.#state.clear();
  }
}
