import type { Backend } from '@rayo/core';
import { layerNorm, rmsNorm } from '../autograd/ops/normalization.js';
import type { Tape, Variable } from '../autograd/tape.js';
import { Module, type Parameter } from './module.js';

export interface NormOptions {
  readonly eps?: number;
}

/** RMSNorm over the last axis with a learned scale (initialised to ones). */
export class RMSNorm extends Module {
  readonly weight: Parameter;
  readonly eps: number;

  constructor(backend: Backend, dim: number, options: NormOptions = {}) {
    super(backend);
    this.eps = options.eps ?? 1e-6;
    this.weight = this.addParameter('weight', new Float32Array(dim).fill(1), [dim]);
  }

  forward(tape: Tape, x: Variable): Variable {
    return rmsNorm(tape, x, this.weight, this.eps);
  }
}

/** LayerNorm over the last axis with a learned scale (ones) and shift (zeros). */
export class LayerNorm extends Module {
  readonly weight: Parameter;
  readonly bias: Parameter;
  readonly eps: number;

  constructor(backend: Backend, dim: number, options: NormOptions = {}) {
    super(backend);
    this.eps = options.eps ?? 1e-5;
    this.weight = this.addParameter('weight', new Float32Array(dim).fill(1), [dim]);
    this.bias = this.addParameter('bias', new Float32Array(dim), [dim]);
  }

  forward(tape: Tape, x: Variable): Variable {
    return layerNorm(tape, x, this.weight, this.bias, this.eps);
  }
}
