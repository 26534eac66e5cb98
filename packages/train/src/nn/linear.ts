import type { Backend, LinearActivation } from '@rayo/core';
import { ACTIVATIONS } from '../autograd/ops/activation.js';
import { biasAdd } from '../autograd/ops/elementwise.js';
import { linear, reducedLinear } from '../autograd/ops/linalg.js';
import { reshape } from '../autograd/ops/shape.js';
import type { Tape, Variable } from '../autograd/tape.js';
import { halfDtypeOf, matmulPrecisionOf } from '../precision.js';
import { type InitOptions, Module, type Parameter, rngOf } from './module.js';

export interface LinearOptions extends InitOptions {
  /** Add a bias (default true). */
  readonly bias?: boolean;
}

/**
 * `y = x · Wᵀ + b`, or `act(x · Wᵀ + b)` for an activation passed to
 * `forward`, with W stored [out, in] (PyTorch's layout), initialised uniform
 * in ±1/√in like PyTorch. One kernel computes the product with the bias and
 * activation in its epilogue; the backward uses the transpose flags, so no
 * weight is transposed in memory. Under a 'tf32', 'bf16' or 'f16' precision
 * the product is a matmul of that precision (see `reducedLinear`), the bias
 * and activation separate kernels after it.
 */
export class Linear extends Module {
  readonly inFeatures: number;
  readonly outFeatures: number;
  readonly weight: Parameter;
  readonly bias: Parameter | undefined;

  constructor(backend: Backend, inFeatures: number, outFeatures: number, options: LinearOptions = {}) {
    super(backend);
    this.inFeatures = inFeatures;
    this.outFeatures = outFeatures;
    const rng = rngOf(options);
    const bound = 1 / Math.sqrt(inFeatures);
    this.weight = this.addParameter('weight', rng.uniformArray(outFeatures * inFeatures, -bound, bound), [
      outFeatures,
      inFeatures,
    ]);
    this.bias =
      (options.bias ?? true)
        ? this.addParameter('bias', rng.uniformArray(outFeatures, -bound, bound), [outFeatures])
        : undefined;
  }

  /** `x` is [..., in]; the result [..., out]. */
  forward(tape: Tape, x: Variable, activation: LinearActivation = 'none'): Variable {
    const lead = x.shape.slice(0, -1);
    const rows = lead.reduce((n, d) => n * d, 1);
    const x2 = x.shape.length === 2 ? x : reshape(tape, x, [rows, this.inFeatures]);
    const y = this.#product(tape, x2, activation);
    return x.shape.length === 2 ? y : reshape(tape, y, [...lead, this.outFeatures]);
  }

  #product(tape: Tape, x: Variable, activation: LinearActivation): Variable {
    if (this.precision === 'f32') return linear(tape, x, this.weight, this.bias, activation);
    let y = reducedLinear(
      tape,
      x,
      this.weight,
      matmulPrecisionOf(this.precision),
      halfDtypeOf(this.precision),
    );
    if (this.bias) y = biasAdd(tape, y, this.bias);
    return activation === 'none' ? y : ACTIVATIONS[activation](tape, y);
  }
}
