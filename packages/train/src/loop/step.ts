import { type Backend, type CommandBatch, type KernelRunner, type Tensor, TrackingRunner } from '@rayo/core';
import type { Variable } from '../autograd/tape.js';
import { Tape } from '../autograd/tape.js';
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
}

export interface StepResult {
  readonly loss: number | undefined;
  readonly gradNorm: number | undefined;
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
  let norm: Tensor | undefined;
  try {
    if (options.lr !== undefined) optimizer.lr = options.lr;
    const loss = options.loss(tape);
    tape.backward(loss);
    norm = clipAndUpdate(optimizer, runner, options);
    if (batch) await batch.submit();
    const lossValue = (options.readLoss ?? true) ? (await loss.value.read())[0]! : undefined;
    const gradNorm = options.readGradNorm && norm ? (await norm.read())[0]! : undefined;
    return { loss: lossValue, gradNorm };
  } finally {
    norm?.dispose();
    tape.dispose();
    optimizer.zeroGrad();
  }
}
