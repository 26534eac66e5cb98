/**
 * The differentiable operations, each `op(tape, ...)` with a backward rule.
 * The package exports them as the `autograd` namespace, so that `matmul`,
 * `softmax` and the other names keep meaning the kernel specs of
 * `@rayo/core` in a program that imports both packages.
 */
export { gelu, relu, sigmoid, silu, swiglu, tanh } from './activation.js';
export { type FlashAttentionOptions, flashAttention } from './attention.js';
export { add, biasAdd, clip, div, exp, mul, scale, sub } from './elementwise.js';
export { embedding } from './embedding.js';
export {
  type BatchedMatmulOptions,
  batchedMatmul,
  linear,
  type MatmulOptions,
  matmul,
  reducedLinear,
  transpose,
} from './linalg.js';
export { crossEntropy, mseLoss } from './loss.js';
export { layerNorm, rmsNorm } from './normalization.js';
export { mean, type ReduceOptions, sum, sumSquares } from './reduction.js';
export { type RopeOptions, rope } from './rope.js';
export { reshape } from './shape.js';
export { logSoftmax, softmax } from './softmax.js';
