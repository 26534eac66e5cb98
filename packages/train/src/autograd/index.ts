export { broadcastTo, reduceToShape } from './broadcast.js';
export {
  ACTIVATIONS,
  type ActivationName,
  gelu,
  relu,
  sigmoid,
  silu,
  swiglu,
  tanh,
} from './ops/activation.js';
export { add, biasAdd, clip, div, exp, mul, scale, sub } from './ops/elementwise.js';
export { embedding } from './ops/embedding.js';
export {
  type BatchedMatmulOptions,
  batchedMatmul,
  linear,
  type MatmulOptions,
  matmul,
  transpose,
} from './ops/linalg.js';
export { crossEntropy, mseLoss } from './ops/loss.js';
export { layerNorm, rmsNorm } from './ops/normalization.js';
export { mean, type ReduceOptions, sum, sumSquares } from './ops/reduction.js';
export { type RopeOptions, rope } from './ops/rope.js';
export { reshape } from './ops/shape.js';
export { logSoftmax, softmax } from './ops/softmax.js';
export {
  type BackwardFn,
  type BackwardOptions,
  Tape,
  type TapeOptions,
  Variable,
  type VariableInit,
} from './tape.js';
