import { clipByGlobalNorm, InvalidArgumentError, type KernelRunner, type Tensor } from '@rayo/core';
import type { Parameter } from '../nn/module.js';

/** The largest f32: a limit that never clips, for measuring the norm alone. */
export const NO_CLIP = 3.4028234663852886e38;

export interface ClipOptions {
  /** Where the kernel goes (default: the parameters' backend). */
  readonly runner?: KernelRunner;
  readonly eps?: number;
}

/**
 * Scales the gradients of `params` in place so that their global L2 norm is
 * at most `maxNorm`, on the device. Returns the norm before clipping as a
 * device scalar: read it only to log it, and dispose it.
 */
export function clipGradNorm(
  params: readonly Parameter[],
  maxNorm: number,
  options: ClipOptions = {},
): Tensor {
  const grads = params.flatMap((p) => (p.grad ? [p.grad] : []));
  if (grads.length === 0) {
    throw new InvalidArgumentError('no parameter has a gradient to clip', {
      kernel: 'clipGradNorm',
      argument: 'params',
      expected: 'parameters after backward',
      actual: `${params.length} parameters without gradients`,
    });
  }
  const runner = options.runner ?? grads[0]!.backend;
  const outputs = runner.run(clipByGlobalNorm, grads, { maxNorm, eps: options.eps ?? 1e-6 });
  return outputs[outputs.length - 1]!;
}
