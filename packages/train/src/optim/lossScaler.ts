import {
  type Backend,
  InvalidArgumentError,
  type KernelRunner,
  type Shape,
  type Tensor,
  updateLossScale,
} from '@rayo/core';

export interface LossScalerOptions {
  /** The first scale S (default 2^16, as PyTorch's GradScaler). */
  readonly initScale?: number;
  /** S is multiplied by this after `growthInterval` finite steps in a row (default 2). */
  readonly growthFactor?: number;
  /** S is multiplied by this after a step whose gradients are not finite (default 0.5). */
  readonly backoffFactor?: number;
  /** Finite steps in a row before S grows (default 2000). */
  readonly growthInterval?: number;
}

/** The count of finite steps is an i32 on the device (and exact in f32). */
const MAX_GROWTH_INTERVAL = 2 ** 24;

/**
 * Dynamic loss scaling for f16 training (PyTorch's GradScaler, with its
 * defaults): backward is seeded with the scale S instead of 1, so that small
 * gradients survive f16's range; AdamW unscales the gradients by 1/S inside
 * its update (in the factor it already reads them with) and leaves
 * parameters, moments and the step count as they were where their norm is
 * not finite; then S is halved after such a step and doubled after
 * `growthInterval` finite steps in a row. S, the count and the decision live
 * on the device, so a recorded step replays with no readback in between.
 * Pass it as `lossScaler` to `trainStep`, `train` or `ReplayedStep`.
 */
export class LossScaler {
  readonly backend: Backend;
  readonly initScale: number;
  readonly growthFactor: number;
  readonly backoffFactor: number;
  readonly growthInterval: number;
  /** S, f32 [1], on the device. */
  readonly scale: Tensor;
  /** Finite steps in a row since S last changed, i32 [1], on the device. */
  readonly growth: Tensor;

  constructor(backend: Backend, options: LossScalerOptions = {}) {
    const { initScale = 2 ** 16, growthFactor = 2, backoffFactor = 0.5, growthInterval = 2000 } = options;
    check(
      initScale > 0 && initScale <= 3.4028234663852886e38,
      'initScale',
      'a positive finite f32',
      initScale,
    );
    check(
      growthFactor > 1 && Number.isFinite(growthFactor),
      'growthFactor',
      'a finite number > 1',
      growthFactor,
    );
    check(backoffFactor > 0 && backoffFactor < 1, 'backoffFactor', 'a number in (0, 1)', backoffFactor);
    check(
      Number.isInteger(growthInterval) && growthInterval >= 1 && growthInterval <= MAX_GROWTH_INTERVAL,
      'growthInterval',
      `an integer in 1 … ${MAX_GROWTH_INTERVAL}`,
      growthInterval,
    );
    this.backend = backend;
    this.initScale = initScale;
    this.growthFactor = growthFactor;
    this.backoffFactor = backoffFactor;
    this.growthInterval = growthInterval;
    this.scale = backend.upload(Float32Array.of(initScale), [1]);
    this.growth = backend.zeros([1], 'i32');
  }

  /** Backward's seed for a loss of `shape` (one element): S itself, viewed in that shape, read when the step runs. */
  seedFor(shape: Shape): Tensor {
    return this.scale.reshape(shape);
  }

  /**
   * Records the update of S from `norm`, the norm of the scaled gradients,
   * after the optimizer's update; `step` (i32 [1], the step number the
   * update read) is advanced by one where the step was taken.
   */
  recordUpdate(runner: KernelRunner, norm: Tensor, step: Tensor): void {
    const { growthFactor, backoffFactor, growthInterval } = this;
    runner.run(updateLossScale, [norm, this.scale, this.growth, step], {
      growthFactor,
      backoffFactor,
      growthInterval,
    });
  }

  /** The current S, read from the device. */
  async readScale(): Promise<number> {
    return (await this.scale.read())[0]!;
  }

  dispose(): void {
    this.scale.dispose();
    this.growth.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

function check(ok: boolean, argument: string, expected: string, actual: number): void {
  if (!ok) {
    throw new InvalidArgumentError('invalid loss scaling option', {
      operation: 'LossScaler',
      argument,
      expected,
      actual: String(actual),
    });
  }
}
