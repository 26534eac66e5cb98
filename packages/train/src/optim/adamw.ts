import { InvalidArgumentError, type KernelRunner, multiTensorAdamw, type Tensor } from '@rayo/core';
import type { Parameter } from '../nn/module.js';
import { Optimizer, type ParameterList } from './optimizer.js';

export interface AdamWOptions {
  readonly lr?: number;
  readonly beta1?: number;
  readonly beta2?: number;
  readonly eps?: number;
  /** Decoupled weight decay (default 0.01, like PyTorch). */
  readonly weightDecay?: number;
  /** Parameters to leave undecayed, e.g. `(name, p) => p.shape.length < 2` for biases and norms. */
  readonly noDecay?: (name: string, param: Parameter) => boolean;
}

/** Clipping inside the update: each gradient is scaled by min(1, maxNorm / (norm + eps)). */
export interface DeviceClip {
  /** The global gradient norm on the device (`gradNorm`), one element. */
  readonly norm: Tensor;
  readonly maxNorm: number;
  /** Default 1e-6, as `clipGradNorm`. */
  readonly eps?: number;
}

/**
 * Gradients of a loss scaled by S (`LossScaler`): the update reads them times
 * clip / S and is skipped (parameters and moments left as they are) where
 * their norm is not finite.
 */
export interface DeviceLossScale {
  /** The global norm of the scaled gradients on the device (`gradNorm`), one element; the clip's norm too where both are given. */
  readonly norm: Tensor;
  /** S, one element on the device. */
  readonly scale: Tensor;
}

/** The norm and loss scale inputs of the update: clip and loss scale read one norm. */
function normInputs(
  clip: DeviceClip | undefined,
  lossScale: DeviceLossScale | undefined,
): (Tensor | undefined)[] {
  if (clip && lossScale && clip.norm !== lossScale.norm) {
    throw new InvalidArgumentError('clipping and loss scaling read one gradient norm', {
      operation: 'AdamW.step',
      argument: 'lossScale.norm',
      expected: 'the tensor of clip.norm',
      actual: 'another tensor',
    });
  }
  return [clip?.norm ?? lossScale?.norm, lossScale?.scale];
}

function clipAttrs(clip: DeviceClip | undefined): { maxNorm?: number; clipEps?: number } {
  return clip ? { maxNorm: clip.maxNorm, clipEps: clip.eps ?? 1e-6 } : {};
}

/**
 * AdamW on the device: bias-corrected moments, decoupled weight decay; every
 * parameter with a gradient in one `multiTensorAdamw` call.
 */
export class AdamW extends Optimizer {
  readonly kind = 'adamw';
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  readonly #decays: readonly boolean[];

  constructor(params: ParameterList, options: AdamWOptions = {}) {
    super(params, options.lr ?? 1e-3, ['m', 'v']);
    this.beta1 = options.beta1 ?? 0.9;
    this.beta2 = options.beta2 ?? 0.999;
    this.eps = options.eps ?? 1e-8;
    this.weightDecay = options.weightDecay ?? 0.01;
    const noDecay = options.noDecay;
    this.#decays = this.params.map((p, i) => !noDecay?.(this.names[i]!, p));
  }

  /**
   * One update of every parameter with a gradient; with `clip`, the gradients
   * are clipped inside it (and left as they are); with `lossScale`, they are
   * unscaled inside it and a non-finite norm skips it on the device (the
   * caller then corrects `stepCount`, counted here as taken).
   */
  step(runner: KernelRunner = this.backend, clip?: DeviceClip, lossScale?: DeviceLossScale): void {
    this.stepCount++;
    const { lr, stepCount: step } = this;
    this.#update(runner, [undefined, undefined, ...normInputs(clip, lossScale)], {
      lr,
      step,
      ...clipAttrs(clip),
    });
  }

  /**
   * Records one update that reads the step number (i32 [1]) and the learning
   * rate (f32 [1]) from device tensors when it runs, so that a recorded batch
   * replays at the next step and a scheduled rate after `Backend.write`s to
   * them. With `clip`, the gradients are clipped by a norm on the device inside
   * the update and are left as they are; with `lossScale`, they are unscaled
   * inside it and a non-finite norm skips it. Leaves `stepCount` as it is:
   * the caller counts the replays.
   */
  stepOnDevice(
    runner: KernelRunner,
    step: Tensor,
    lr: Tensor,
    clip?: DeviceClip,
    lossScale?: DeviceLossScale,
  ): void {
    this.#update(runner, [step, lr, ...normInputs(clip, lossScale)], clipAttrs(clip));
  }

  #update(
    runner: KernelRunner,
    fixed: readonly (Tensor | undefined)[],
    attrs: { lr?: number; step?: number; maxNorm?: number; clipEps?: number },
  ): void {
    const tensors: Tensor[] = [];
    const weightDecay: number[] = [];
    this.params.forEach((p, i) => {
      if (!p.grad) return;
      tensors.push(p.value, p.grad, this.slot(i, 'm'), this.slot(i, 'v'));
      weightDecay.push(this.#decays[i] ? this.weightDecay : 0);
    });
    if (tensors.length === 0) return;
    const { beta1, beta2, eps } = this;
    runner.run(multiTensorAdamw, [...fixed, ...tensors], { ...attrs, beta1, beta2, eps, weightDecay });
  }

  hyperparameters(): Record<string, number | boolean> {
    const { beta1, beta2, eps, weightDecay } = this;
    return { beta1, beta2, eps, weightDecay };
  }
}
