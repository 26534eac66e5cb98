import { type KernelRunner, sgdStep } from '@rayo/core';
import { Optimizer, type ParameterList } from './optimizer.js';

export interface SgdOptions {
  readonly lr?: number;
  readonly momentum?: number;
  readonly dampening?: number;
  /** L2 penalty added to the gradient. */
  readonly weightDecay?: number;
  readonly nesterov?: boolean;
}

/** SGD with momentum on the device (the `sgdStep` kernel, PyTorch semantics). */
export class SGD extends Optimizer {
  readonly kind = 'sgd';
  readonly momentum: number;
  readonly dampening: number;
  readonly weightDecay: number;
  readonly nesterov: boolean;

  constructor(params: ParameterList, options: SgdOptions = {}) {
    super(params, options.lr ?? 1e-2, ['momentum']);
    this.momentum = options.momentum ?? 0;
    this.dampening = options.dampening ?? 0;
    this.weightDecay = options.weightDecay ?? 0;
    this.nesterov = options.nesterov ?? false;
  }

  step(runner: KernelRunner = this.backend): void {
    this.stepCount++;
    const { lr, momentum, dampening, weightDecay, nesterov } = this;
    this.params.forEach((p, i) => {
      if (!p.grad) return;
      runner.run(sgdStep, [p.value, p.grad, this.slot(i, 'momentum')], {
        lr,
        momentum,
        dampening,
        weightDecay,
        nesterov,
      });
    });
  }

  hyperparameters(): Record<string, number | boolean> {
    const { momentum, dampening, weightDecay, nesterov } = this;
    return { momentum, dampening, weightDecay, nesterov };
  }
}
