import { type FlashPrecision, InvalidArgumentError, type MatmulPrecision } from '@rayo/core';

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
 * - `'f16'`: a linear layer's three products as under 'bf16' with f16 in
 *   place of bf16 (weight cast to f16 once per forward, an f16 copy of its
 *   input for dW, f32 sums and outputs): f16 keeps 3 more mantissa bits than
 *   bf16 and WGSL can multiply it (subgroup matrices on wgpu), but its range
 *   ends at 65504 and small gradients underflow: train with a `LossScaler`.
 *   Attention's products stay f32, since the flash kernels' and batched
 *   products' 'half' rounds to bf16, which is not what 'f16' asks for.
 */
export const TRAIN_PRECISIONS = ['f32', 'tf32', 'bf16', 'f16'] as const;
export type TrainPrecision = (typeof TRAIN_PRECISIONS)[number];

/** The matmul `precision` attribute of a policy's linear layers. */
export function matmulPrecisionOf(precision: TrainPrecision): MatmulPrecision {
  return precision === 'bf16' || precision === 'f16' ? 'half' : precision;
}

/** The half dtype a policy's linear layers round their operands to, if any. */
export function halfDtypeOf(precision: TrainPrecision): 'f16' | 'bf16' | undefined {
  return precision === 'bf16' || precision === 'f16' ? precision : undefined;
}

/**
 * The precision of attention's products under a policy: the batched products'
 * and flash kernels' 'half' rounds f32 operands to bf16, so only 'bf16' takes
 * it; 'f16' computes them in f32 (more precisely than asked, never in bf16).
 */
export function attentionPrecisionOf(precision: TrainPrecision): MatmulPrecision {
  return precision === 'f16' ? 'f32' : matmulPrecisionOf(precision);
}

/** The flash kernels' precision under a policy (see `attentionPrecisionOf`). */
export function flashPrecisionOf(precision: TrainPrecision): FlashPrecision {
  return precision === 'bf16' ? 'half' : 'f32';
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
