import {
  clipByGlobalNorm,
  globalNorm,
  InvalidArgumentError,
  type KernelRunner,
  type Tensor,
} from '@rayo/core';
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
  const grads = gradientsOf(params, 'clipGradNorm');
  const runner = options.runner ?? grads[0]!.backend;
  const outputs = runner.run(clipByGlobalNorm, grads, { maxNorm, eps: options.eps ?? 1e-6 });
  return outputs[outputs.length - 1]!;
}

/**
 * The global L2 norm of the gradients of `params`, on the device, leaving
 * them as they are: one read of each. `AdamW.stepOnDevice` clips with it
 * inside its update. Returns a device scalar: read it only to log it, and
 * dispose it.
 */
export function gradNorm(params: readonly Parameter[], options: Pick<ClipOptions, 'runner'> = {}): Tensor {
  const grads = gradientsOf(params, 'gradNorm');
  const runner = options.runner ?? grads[0]!.backend;
  return runner.run(globalNorm, grads)[0]!;
}

function gradientsOf(params: readonly Parameter[], kernel: string): Tensor[] {
  const grads = params.flatMap((p) => (p.grad ? [p.grad] : []));
  if (grads.length === 0) {
    throw new InvalidArgumentError('no parameter has a gradient', {
      operation: kernel,
      argument: 'params',
      expected: 'parameters after backward',
      actual: `${params.length} parameters without gradients`,
    });
  }
  return grads;
}
