import type { Backend } from '@rayo/core';
import { LossScaler, type TrainPrecision } from '@rayo/train';

/**
 * The loss scaler a workload trains with: 'f16' gradients underflow (and
 * overflow) without one, so an f16 workload trains with dynamic loss scaling
 * at GradScaler's defaults; every other policy keeps f32's range and needs
 * none. The caller disposes it.
 */
export function lossScalerFor(
  backend: Backend,
  spec: { readonly precision?: TrainPrecision },
): LossScaler | undefined {
  return spec.precision === 'f16' ? new LossScaler(backend) : undefined;
}
