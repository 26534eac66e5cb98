import { InvalidArgumentError, type MatmulPrecision } from '@rayo/core';

/**
 * How a model's matrix products are computed in training. Master weights,
 * their gradients, optimizer state, norms, softmax and the loss are f32 under
 * every policy; only the products change.
 * - `'f32'`: exact f32 products (the default).
 * - `'tf32'`: f32 operands rounded to tf32 on tensor cores, summed in f32
 *   (PyTorch's `allow_tf32`); a backend without tf32 computes in f32.
 * - `'bf16'`: every product (a linear layer's forward, dX = dY·W and
 *   dW = dYᵀ·X, attention's scores and weighted values and their gradients)
 *   rounds its operands to bf16 and sums in f32. Each linear layer casts its
 *   weight to bf16 once per forward (the copy serves forward and dX) and keeps
 *   a bf16 copy of its input for dW instead of the f32 one. bf16 has f32's
 *   exponent range, so gradients need no loss scaling.
 */
export const TRAIN_PRECISIONS = ['f32', 'tf32', 'bf16'] as const;
export type TrainPrecision = (typeof TRAIN_PRECISIONS)[number];

/** The matmul `precision` attribute of a policy. */
export function matmulPrecisionOf(precision: TrainPrecision): MatmulPrecision {
  return precision === 'bf16' ? 'half' : precision;
}

/** `value` as a policy, or a RayoError naming `operation`. */
export function checkTrainPrecision(value: unknown, operation: string): TrainPrecision {
  if (!TRAIN_PRECISIONS.includes(value as TrainPrecision)) {
    throw new InvalidArgumentError('unknown training precision', {
      operation,
      argument: 'precision',
      expected: TRAIN_PRECISIONS.map((p) => `'${p}'`).join(', '),
      actual: typeof value === 'string' ? `'${value}'` : String(value),
    });
  }
  return value as TrainPrecision;
}
