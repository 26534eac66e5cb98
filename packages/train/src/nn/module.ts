import { type Backend, InvalidArgumentError, type Shape, shapesEqual, type Tensor } from '@rayo/core';
import { Variable } from '../autograd/tape.js';
import { checkTrainPrecision, type TrainPrecision } from '../precision.js';
import { Rng } from '../random.js';

/** A trainable tensor: a leaf variable whose gradient accumulates until `zeroGrad()`. */
export class Parameter extends Variable {
  constructor(value: Tensor, name?: string) {
    super(value, { requiresGrad: true, name });
  }

  /**
   * Moves the parameter's values into `target` (same shape and dtype, on the
   * same backend; typically a view into a flat buffer that collectives take
   * whole), frees its own memory, and makes `target` its value from now on.
   * Kernels recorded before keep reading the old memory: move parameters
   * before any step is recorded.
   */
  moveInto(target: Tensor): void {
    const value = this.value;
    if (
      target.backend !== value.backend ||
      target.dtype !== value.dtype ||
      !shapesEqual(target.shape, value.shape)
    ) {
      throw new InvalidArgumentError('a parameter moves into a tensor like its own', {
        operation: 'Parameter.moveInto',
        argument: 'target',
        expected: `${value.describe()}`,
        actual: target.describe(),
      });
    }
    value.backend.copy(value, target);
    this.replaceValue(target);
    value.dispose();
  }
}

/** How a module's parameters are initialised: a generator, or a seed for a new one. */
export interface InitOptions {
  readonly rng?: Rng;
  /** Used when no `rng` is given (default 0). */
  readonly seed?: number;
}

export function rngOf(options: InitOptions): Rng {
  return options.rng ?? new Rng(options.seed ?? 0);
}

/**
 * A tree of parameters and submodules. Names are dotted paths
 * (`blocks.0.attn.q.weight`), in the order the module registered them, which
 * is also the order of `parameters()`.
 */
export abstract class Module {
  readonly backend: Backend;
  readonly #params = new Map<string, Parameter>();
  readonly #children = new Map<string, Module>();
  readonly #buffers = new Set<Tensor>();
  #precision: TrainPrecision = 'f32';

  protected constructor(backend: Backend) {
    this.backend = backend;
  }

  /** Uploads a parameter (f32) and registers it under `name`. */
  protected addParameter(name: string, data: Float32Array, shape: Shape): Parameter {
    this.#checkName(name);
    const p = new Parameter(this.backend.upload(data, shape), name);
    this.#params.set(name, p);
    return p;
  }

  protected addModule<M extends Module>(name: string, module: M): M {
    this.#checkName(name);
    if (module.backend !== this.backend) {
      throw new InvalidArgumentError('a submodule must live on its parent’s backend', {
        operation: 'Module.addModule',
        argument: name,
        expected: `a module on ${this.backend.name}`,
        actual: `a module on ${module.backend.name}`,
      });
    }
    this.#children.set(name, module);
    return module;
  }

  /** A tensor the module owns that is not trained (e.g. a mask); freed with the module. */
  protected addBuffer(tensor: Tensor): Tensor {
    this.#buffers.add(tensor);
    return tensor;
  }

  #checkName(name: string): void {
    if (!name || name.includes('.') || this.#params.has(name) || this.#children.has(name)) {
      throw new InvalidArgumentError('parameter and submodule names must be unique and dot-free', {
        operation: 'Module',
        argument: 'name',
        expected: 'a new name without dots',
        actual: JSON.stringify(name),
      });
    }
  }

  /** How this module's matrix products are computed (see `TrainPrecision`; default 'f32'). */
  get precision(): TrainPrecision {
    return this.#precision;
  }

  /**
   * Sets the precision policy of this module and every submodule; parameters
   * stay f32 (master weights). Takes effect from the next forward, so a
   * replayed step records it once.
   */
  setPrecision(precision: TrainPrecision): this {
    this.#precision = checkTrainPrecision(precision, 'Module.setPrecision');
    for (const child of this.#children.values()) child.setPrecision(precision);
    return this;
  }

  /** Every parameter with its dotted path. */
  namedParameters(prefix = ''): [string, Parameter][] {
    const out: [string, Parameter][] = [];
    for (const [name, p] of this.#params) out.push([`${prefix}${name}`, p]);
    for (const [name, child] of this.#children) out.push(...child.namedParameters(`${prefix}${name}.`));
    return out;
  }

  parameters(): Parameter[] {
    return this.namedParameters().map(([, p]) => p);
  }

  /** Total number of trainable elements. */
  parameterCount(): number {
    return this.parameters().reduce((n, p) => n + p.size, 0);
  }

  zeroGrad(): void {
    for (const p of this.parameters()) p.zeroGrad();
  }

  /** Frees parameters, their gradients and buffers. */
  dispose(): void {
    for (const p of this.#params.values()) {
      p.zeroGrad();
      p.value.dispose();
    }
    for (const child of this.#children.values()) child.dispose();
    for (const t of this.#buffers) t.dispose();
    this.#buffers.clear();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
