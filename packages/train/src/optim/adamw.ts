import { adamwStep, type KernelRunner, type Tensor } from '@rayo/core';
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

/** AdamW on the device (the `adamwStep` kernel): bias-corrected moments, decoupled weight decay. */
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

  step(runner: KernelRunner = this.backend): void {
    this.stepCount++;
    const { lr, beta1, beta2, eps, stepCount: step } = this;
    this.params.forEach((p, i) => {
      if (!p.grad) return;
      const weightDecay = this.#decays[i] ? this.weightDecay : 0;
      runner.run(adamwStep, [p.value, p.grad, this.slot(i, 'm'), this.slot(i, 'v')], {
        lr,
        beta1,
        beta2,
        eps,
        weightDecay,
        step,
      });
    });
  }

  /**
   * Records one update that reads the step number (i32 [1]) and the learning
   * rate (f32 [1]) from device tensors when it runs, so that a recorded batch
   * replays at the next step and a scheduled rate after `Backend.write`s to
   * them. Leaves `stepCount` as it is: the caller counts the replays.
   */
  stepOnDevice(runner: KernelRunner, step: Tensor, lr: Tensor): void {
    const { beta1, beta2, eps } = this;
    this.params.forEach((p, i) => {
      if (!p.grad) return;
      const weightDecay = this.#decays[i] ? this.weightDecay : 0;
      runner.run(adamwStep, [p.value, p.grad, this.slot(i, 'm'), this.slot(i, 'v'), step, lr], {
        beta1,
        beta2,
        eps,
        weightDecay,
      });
    });
  }

  hyperparameters(): Record<string, number | boolean> {
    const { beta1, beta2, eps, weightDecay } = this;
    return { beta1, beta2, eps, weightDecay };
  }
}
