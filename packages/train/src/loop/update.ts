import {
  type Backend,
  type CommandBatch,
  InvalidArgumentError,
  type KernelRunner,
  type Tensor,
} from '@rayo/core';
import type { Tape } from '../autograd/tape.js';
import type { Parameter } from '../nn/module.js';
import { AdamW } from '../optim/adamw.js';
import { clipGradNorm, gradNorm, NO_CLIP } from '../optim/clip.js';
import type { LossScaler } from '../optim/lossScaler.js';
import type { Optimizer } from '../optim/optimizer.js';

export interface UpdateOptions {
  /** Clip the gradients to this global norm. */
  readonly clipNorm?: number;
  /** Compute the global norm (before clipping) even without a clip, to read it back. */
  readonly readGradNorm?: boolean;
  /** Dynamic loss scaling (AdamW only): backward was seeded with its scale, which the update divides out. */
  readonly lossScaler?: LossScaler;
}

/** What an eager update leaves to read back: the norm, and under loss scaling the step number it advanced. */
export interface UpdateRecord {
  /** The gradients' global norm (of the scaled ones under loss scaling), when one was computed: the caller's. */
  readonly norm: Tensor | undefined;
  /** i32 [1]: the step number the update read, plus one where it was taken (loss scaling only): the caller's. */
  readonly stepNumber: Tensor | undefined;
}

/** The error for loss scaling with an optimizer that does not unscale on the device. */
export function checkLossScalable(
  optimizer: Optimizer,
  lossScaler: LossScaler | undefined,
  operation: string,
): void {
  if (lossScaler && !(optimizer instanceof AdamW)) {
    throw new InvalidArgumentError(
      'loss scaling needs an optimizer that unscales the gradients on the device',
      {
        operation,
        argument: 'optimizer',
        expected: 'AdamW with lossScaler',
        actual: (optimizer as { kind?: string }).kind ?? typeof optimizer,
      },
    );
  }
}

/** The error for loss scaling where a step does not seed backward with the scale (the data-parallel steps). */
export function refuseLossScaling(options: object, operation: string): void {
  if ((options as UpdateOptions).lossScaler !== undefined) {
    throw new InvalidArgumentError('this step does not take loss scaling', {
      operation,
      argument: 'lossScaler',
      expected: 'no lossScaler (trainStep, train and ReplayedStep take one)',
      actual: 'a LossScaler',
    });
  }
}

/**
 * Clipping by global norm (if asked) and the optimizer's update, on
 * `runner`. AdamW takes the norm alone (one read of the gradients) and
 * applies the clip (and, under loss scaling, 1/S) as it reads them; other
 * optimizers clip in place first. Under loss scaling the norm is always
 * computed, and the scale's update follows AdamW's.
 */
export function clipAndUpdate(
  optimizer: Optimizer,
  runner: KernelRunner,
  options: UpdateOptions,
): UpdateRecord {
  const { clipNorm, readGradNorm, lossScaler } = options;
  checkLossScalable(optimizer, lossScaler, 'trainStep');
  const wantNorm = clipNorm !== undefined || readGradNorm === true || lossScaler !== undefined;
  if (optimizer instanceof AdamW) {
    const norm = wantNorm ? gradNorm(optimizer.params, { runner }) : undefined;
    const clip = norm && clipNorm !== undefined ? { norm, maxNorm: clipNorm } : undefined;
    if (!lossScaler) {
      optimizer.step(runner, clip);
      return { norm, stepNumber: undefined };
    }
    const stepNumber = optimizer.backend.upload(Int32Array.of(optimizer.stepCount + 1), [1], 'i32');
    optimizer.step(runner, clip, { norm: norm!, scale: lossScaler.scale });
    lossScaler.recordUpdate(runner, norm!, stepNumber);
    return { norm, stepNumber };
  }
  const norm = wantNorm ? clipGradNorm(optimizer.params, clipNorm ?? NO_CLIP, { runner }) : undefined;
  optimizer.step(runner);
  return { norm, stepNumber: undefined };
}

/**
 * What a replayed step's update reads on the device: AdamW's step number
 * and learning rate, rewritten by the host before every replay so that
 * replays need no re-recording.
 */
export class DeviceSchedule {
  readonly optimizer: AdamW;
  readonly #backend: Backend;
  readonly #step: Tensor;
  readonly #lr: Tensor;

  /** `kernel` names the step in the error for an optimizer other than AdamW. */
  constructor(backend: Backend, optimizer: Optimizer, kernel: string) {
    if (!(optimizer instanceof AdamW)) {
      throw new InvalidArgumentError(
        'a replayed step needs an optimizer that reads its step and rate on the device',
        {
          operation: kernel,
          argument: 'optimizer',
          expected: 'AdamW',
          actual: (optimizer as { kind?: string }).kind ?? typeof optimizer,
        },
      );
    }
    this.optimizer = optimizer;
    this.#backend = backend;
    this.#step = backend.zeros([1], 'i32');
    this.#lr = backend.zeros([1]);
  }

  /** Writes the coming step's number and the optimizer's rate (in queue order, before the replay). */
  write(): void {
    this.#backend.write(this.#step, [this.optimizer.stepCount + 1]);
    this.#backend.write(this.#lr, [this.optimizer.lr]);
  }

  /**
   * Records the update on `runner`: the norm (if asked, or under loss
   * scaling; `givenNorm` when the caller computed it, e.g. a sharded
   * optimizer's global one) and AdamW reading the step and rate from the
   * device; under loss scaling, then the scale's update, which advances the
   * device step number where the step was taken (`stepNumber` reads it).
   * Returns the norm tensor when one was computed or given.
   */
  recordUpdate(runner: KernelRunner, options: UpdateOptions, givenNorm?: Tensor): Tensor | undefined {
    const { clipNorm, readGradNorm, lossScaler } = options;
    const params = this.optimizer.params;
    const wanted = clipNorm !== undefined || readGradNorm || lossScaler !== undefined;
    const norm = wanted ? (givenNorm ?? gradNorm(params, { runner })) : undefined;
    const clip = norm && clipNorm !== undefined ? { norm, maxNorm: clipNorm } : undefined;
    const lossScale = lossScaler && { norm: norm!, scale: lossScaler.scale };
    this.optimizer.stepOnDevice(runner, this.#step, this.#lr, clip, lossScale);
    lossScaler?.recordUpdate(runner, norm!, this.#step);
    return norm;
  }

  /** The device step number: after a loss-scaled replay, the written one plus one where the step was taken. */
  get stepNumber(): Tensor {
    return this.#step;
  }

  dispose(): void {
    this.#step.dispose();
    this.#lr.dispose();
  }
}

/** Throws if a replayed step is used after its dispose. */
export function checkNotDisposed(disposed: boolean, kernel: string): void {
  if (disposed) {
    throw new InvalidArgumentError('the replayed step was disposed', {
      operation: kernel,
      argument: 'this',
      expected: 'a live replayed step',
      actual: 'a disposed one',
    });
  }
}

/** What a recorded step holds for its replays, freed together (after a failed recording, or on dispose). */
export interface RecordedParts {
  readonly batches: Iterable<CommandBatch>;
  readonly norm: Tensor | undefined;
  readonly tape: Tape;
  readonly grads?: Iterable<Tensor>;
}

export function disposeRecorded(parts: RecordedParts): void {
  for (const b of parts.batches) b.dispose();
  parts.norm?.dispose();
  parts.tape.dispose();
  for (const g of parts.grads ?? []) g.dispose();
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
