import { type Backend, InvalidArgumentError } from '@rayo/core';
import type { ActivationName } from '../autograd/ops/activation.js';
import type { Tape, Variable } from '../autograd/tape.js';
import { Linear } from './linear.js';
import { type InitOptions, Module, rngOf } from './module.js';

export interface MlpOptions extends InitOptions {
  /** Between layers, not after the last (default relu). */
  readonly activation?: ActivationName;
  readonly bias?: boolean;
}

/**
 * Linear layers of the given sizes (`[784, 256, 10]`: two layers) with an
 * activation between them, applied in each hidden layer's product kernel.
 */
export class MLP extends Module {
  readonly layers: readonly Linear[];
  readonly activation: ActivationName;

  constructor(backend: Backend, sizes: readonly number[], options: MlpOptions = {}) {
    super(backend);
    if (sizes.length < 2 || !sizes.every((s) => Number.isInteger(s) && s > 0)) {
      throw new InvalidArgumentError('an MLP needs at least an input and an output size', {
        operation: 'MLP',
        argument: 'sizes',
        expected: 'two or more positive integers',
        actual: JSON.stringify(sizes),
      });
    }
    const rng = rngOf(options);
    this.activation = options.activation ?? 'relu';
    this.layers = sizes
      .slice(1)
      .map((out, i) =>
        this.addModule(String(i), new Linear(backend, sizes[i]!, out, { rng, bias: options.bias ?? true })),
      );
  }

  forward(tape: Tape, x: Variable): Variable {
    let h = x;
    this.layers.forEach((layer, i) => {
      h = layer.forward(tape, h, i < this.layers.length - 1 ? this.activation : 'none');
    });
    return h;
  }
}
