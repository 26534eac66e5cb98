import type { KernelRunner, Tensor } from '@rayo/core';
import type { Parameter } from '../nn/module.js';
import { AdamW } from '../optim/adamw.js';
import { clipGradNorm, gradNorm, NO_CLIP } from '../optim/clip.js';
import type { Optimizer } from '../optim/optimizer.js';

export interface UpdateOptions {
  /** Clip the gradients to this global norm. */
  readonly clipNorm?: number;
  /** Compute the global norm (before clipping) even without a clip, to read it back. */
  readonly readGradNorm?: boolean;
}

/**
 * Clipping by global norm (if asked) and the optimizer's update, on
 * `runner`; returns the norm tensor when one was computed (the caller's).
 * AdamW takes the norm alone (one read of the gradients) and applies the
 * clip as it reads them; other optimizers clip in place first.
 */
export function clipAndUpdate(
  optimizer: Optimizer,
  runner: KernelRunner,
  options: UpdateOptions,
): Tensor | undefined {
  const { clipNorm, readGradNorm } = options;
  const wantNorm = clipNorm !== undefined || readGradNorm === true;
  if (optimizer instanceof AdamW) {
    const norm = wantNorm ? gradNorm(optimizer.params, { runner }) : undefined;
    optimizer.step(runner, norm && clipNorm !== undefined ? { norm, maxNorm: clipNorm } : undefined);
    return norm;
  }
  const norm = wantNorm ? clipGradNorm(optimizer.params, clipNorm ?? NO_CLIP, { runner }) : undefined;
  optimizer.step(runner);
  return norm;
}

/**
 * The update of a replayed step, recorded on `runner`: AdamW reading its
 * step number and learning rate from device tensors, so that replays need
 * no re-recording; returns the norm tensor when one was computed.
 */
export function recordUpdate(
  optimizer: AdamW,
  runner: KernelRunner,
  device: { readonly step: Tensor; readonly lr: Tensor },
  options: UpdateOptions,
): Tensor | undefined {
  const { clipNorm, readGradNorm } = options;
  const norm = clipNorm !== undefined || readGradNorm ? gradNorm(optimizer.params, { runner }) : undefined;
  const clip = norm && clipNorm !== undefined ? { norm, maxNorm: clipNorm } : undefined;
  optimizer.stepOnDevice(runner, device.step, device.lr, clip);
  return norm;
}

/**
 * Takes the gradients off the parameters for a recording to keep (its
 * replays write them), leaving the parameters without, as after an eager step.
 */
export function takeGradients(params: readonly Parameter[]): Map<Parameter, Tensor> {
  const grads = new Map(params.flatMap((p) => (p.grad ? [[p, p.grad] as const] : [])));
  for (const p of params) p.grad = undefined;
  return grads;
}
