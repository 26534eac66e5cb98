import type { Backend, Tensor } from '@rayo/core';
import { embedding } from '../autograd/ops/embedding.js';
import type { Tape, Variable } from '../autograd/tape.js';
import { type InitOptions, Module, type Parameter, rngOf } from './module.js';

export interface EmbeddingOptions extends InitOptions {
  /** Standard deviation of the normal initialisation (default 1, like PyTorch). */
  readonly std?: number;
}

/** A table of `vocabSize` rows of `dim` values, looked up by i32 ids. */
export class Embedding extends Module {
  readonly vocabSize: number;
  readonly dim: number;
  readonly weight: Parameter;

  constructor(backend: Backend, vocabSize: number, dim: number, options: EmbeddingOptions = {}) {
    super(backend);
    this.vocabSize = vocabSize;
    this.dim = dim;
    const rng = rngOf(options);
    this.weight = this.addParameter('weight', rng.normalArray(vocabSize * dim, options.std ?? 1), [
      vocabSize,
      dim,
    ]);
  }

  /** `ids` (i32, any shape) → [...ids.shape, dim]. */
  forward(tape: Tape, ids: Tensor): Variable {
    return embedding(tape, this.weight, ids);
  }
}
