import { type Backend, type CommandBatch, type KernelRunner, type Tensor, TrackingRunner } from '@rayo/core';
import type { Variable } from '../autograd/tape.js';
import { Tape } from '../autograd/tape.js';
import type { LossScaler } from '../optim/lossScaler.js';
import type { Optimizer } from '../optim/optimizer.js';
import { clipAndUpdate } from './update.js';

export interface StepOptions {
  readonly backend: Backend;
  readonly optimizer: Optimizer;
  /** Builds the loss (a scalar) on the tape. */
  readonly loss: (tape: Tape) => Variable;
  /** Learning rate of this step (default: the optimizer's). */
  readonly lr?: number;
  /** Clip the gradients to this global norm. */
  readonly clipNorm?: number;
  /** Read the loss back (default true); false keeps the step free of readbacks. */
  readonly readLoss?: boolean;
  /** Read the global gradient norm (before clipping) back (default false). */
  readonly readGradNorm?: boolean;
  /**
   * Record the whole step (forward, backward, clipping, update) into one
   * command batch and submit it once (default true); false runs each kernel
   * eagerly.
   */
  readonly batch?: boolean;
  /** Collects the names of the kernels the step runs. */
  readonly kernelsUsed?: Set<string>;
  /**
   * Dynamic loss scaling (with AdamW): backward is seeded with the scaler's S,
   * the update unscales the gradients and is skipped where they are not
   * finite, and S moves, all on the device. The step number is read back to
   * keep `optimizer.stepCount` (a skipped step is not counted).
   */
  readonly lossScaler?: LossScaler;
}

export interface StepResult {
  readonly loss: number | undefined;
  /** The global gradient norm; under loss scaling, of the scaled gradients (S times the true one). */
  readonly gradNorm: number | undefined;
  /** Under loss scaling: whether the update was skipped for gradients that were not finite. */
  readonly skipped?: boolean;
}

/**
 * One training step on the device: forward and backward on a tape, optional
 * clipping by global norm, the optimizer's update; then the tape's tensors and
 * the gradients are freed. Only the loss (and the norm, if asked) is read back.
 */
export async function trainStep(options: StepOptions): Promise<StepResult> {
  const { backend, optimizer } = options;
  const batch: CommandBatch | undefined = (options.batch ?? true) ? backend.batch() : undefined;
  const base: KernelRunner = batch ?? backend;
  const names = options.kernelsUsed;
  const runner = names ? new TrackingRunner(base, { onRun: ({ spec }) => names.add(spec.name) }) : base;
  const tape = new Tape(backend, { runner });
  const scaler = options.lossScaler;
  let norm: Tensor | undefined;
  let stepNumber: Tensor | undefined;
  try {
    if (options.lr !== undefined) optimizer.lr = options.lr;
    const loss = options.loss(tape);
    tape.backward(loss, scaler?.seedFor(loss.shape));
    ({ norm, stepNumber } = clipAndUpdate(optimizer, runner, options));
    if (batch) await batch.submit();
    const lossValue = (options.readLoss ?? true) ? (await loss.value.read())[0]! : undefined;
    const gradNorm = options.readGradNorm && norm ? (await norm.read())[0]! : undefined;
    if (!stepNumber) return { loss: lossValue, gradNorm };
    // The update counted the step as taken; the device says whether it was.
    const taken = (await stepNumber.read())[0]! - 1;
    const skipped = taken !== optimizer.stepCount;
    optimizer.stepCount = taken;
    return { loss: lossValue, gradNorm, skipped };
  } finally {
    norm?.dispose();
    stepNumber?.dispose();
    tape.dispose();
    optimizer.zeroGrad();
  }
}
