import { InvalidArgumentError } from '@rayo/core';

/** Learning rate of the step with 0-based index `step`. */
export type LrSchedule = (step: number) => number;

export interface WarmupCosineOptions {
  /** Peak learning rate, reached at the end of the warm-up. */
  readonly lr: number;
  readonly warmupSteps: number;
  readonly totalSteps: number;
  /** Floor of the cosine decay (default 0). */
  readonly minLr?: number;
}

/** Linear warm-up from lr / warmupSteps to lr, then cosine decay to minLr at totalSteps. */
export function warmupCosine(options: WarmupCosineOptions): LrSchedule {
  const { lr, warmupSteps, totalSteps, minLr = 0 } = options;
  if (!(warmupSteps >= 0 && totalSteps >= warmupSteps && Number.isInteger(warmupSteps))) {
    throw new InvalidArgumentError('the warm-up must fit in the schedule', {
      operation: 'warmupCosine',
      argument: 'warmupSteps',
      expected: `an integer in [0, totalSteps = ${totalSteps}]`,
      actual: String(warmupSteps),
    });
  }
  return (step) => {
    if (step < warmupSteps) return (lr * (step + 1)) / warmupSteps;
    const span = Math.max(1, totalSteps - warmupSteps);
    const progress = Math.min(1, (step - warmupSteps) / span);
    return minLr + (lr - minLr) * 0.5 * (1 + Math.cos(Math.PI * progress));
  };
}

export function constantLr(lr: number): LrSchedule {
  return () => lr;
}
