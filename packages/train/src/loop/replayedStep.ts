import {
  type Backend,
  BackendMismatchError,
  type CommandBatch,
  checkTensorAlive,
  checkWritten,
  type DType,
  DTypeError,
  formatShape,
  type HostArray,
  InvalidArgumentError,
  type Shape,
  ShapeError,
  shapesEqual,
  Tensor,
} from '@rayo/core';
import { Tape, type Variable } from '../autograd/tape.js';
import type { AdamW } from '../optim/adamw.js';
import type { LossScaler } from '../optim/lossScaler.js';
import type { Optimizer } from '../optim/optimizer.js';
import type { StepResult } from './step.js';
import { checkNotDisposed, DeviceSchedule, disposeRecorded, takeGradients } from './update.js';

/** The shape and dtype of one fixed input tensor of a replayed step. */
export interface ReplayedInput {
  readonly shape: Shape;
  readonly dtype?: DType;
}

/** One batch's data for an input on the host: values and the shape they have. */
export interface ReplayedHostInput {
  readonly data: HostArray | readonly number[];
  readonly shape: Shape;
}

/**
 * One batch's data for an input: host values, written into the step's fixed
 * input each run, or a tensor of the step's backend (same shape and dtype as
 * declared), copied into it on the device.
 */
export type ReplayedBatchInput = ReplayedHostInput | Tensor;

export interface ReplayedStepOptions<N extends string> {
  readonly backend: Backend;
  /** AdamW: its step count and learning rate are read on the device, so replays need no re-recording. */
  readonly optimizer: Optimizer;
  /** The batch's inputs: fixed device tensors that each step's data is written into. */
  readonly inputs: Readonly<Record<N, ReplayedInput>>;
  /** Builds the loss (a scalar) on the tape from the input tensors; called once, when the step is recorded. */
  readonly loss: (tape: Tape, inputs: Readonly<Record<N, Tensor>>) => Variable;
  /** Clip the gradients to this global norm. */
  readonly clipNorm?: number;
  /** Read the global gradient norm (before clipping) back after each step (default false). */
  readonly readGradNorm?: boolean;
  /**
   * Dynamic loss scaling: the recording seeds backward with the scaler's S,
   * unscales inside the update, skips a step with non-finite gradients and
   * moves S, all on the device (every replay reads the S of its time). Each
   * run reads the device step number back with the loss, to keep
   * `optimizer.stepCount` (a skipped step is not counted).
   */
  readonly lossScaler?: LossScaler;
}

export interface ReplayedRunOptions {
  /** Learning rate of this step (default: the optimizer's `lr`, which a schedule may set). */
  readonly lr?: number;
  /** Read the loss back (default true). */
  readonly readLoss?: boolean;
}

interface Recording<N extends string> {
  readonly batch: CommandBatch;
  readonly tape: Tape;
  readonly loss: Tensor;
  readonly norm: Tensor | undefined;
  readonly grads: Tensor[];
  readonly inputs: Readonly<Record<N, Tensor>>;
}

/**
 * A training step recorded once and replayed: the first `run` records
 * forward, backward, clipping and the AdamW update into one command batch
 * (one CUDA graph on cuda) over fixed input tensors and submits it; every
 * later `run` only puts the batch into the fixed inputs (host data written,
 * device tensors copied on the device), writes the step number and the
 * learning rate into device tensors, submits the same batch and reads the
 * loss, waiting for the device once. Data already on the device (a data set
 * uploaded once, split into batch tensors) costs no host transfer. The
 * activations and gradients are the recording's own tensors, reused by every
 * replay, so a warm step allocates nothing.
 *
 * The model's shapes are fixed by the first batch: data of another shape is a
 * `ShapeError` (use `trainStep`, the eager path, where shapes change, and to
 * debug). Gradients stay with the recording, not on the parameters, so eager
 * steps may be interleaved with replays.
 */
export class ReplayedStep<N extends string = string> {
  readonly backend: Backend;
  readonly #options: ReplayedStepOptions<N>;
  readonly #optimizer: AdamW;
  readonly #names: readonly N[];
  readonly #schedule: DeviceSchedule;
  #recording: Recording<N> | undefined;
  #disposed = false;

  constructor(options: ReplayedStepOptions<N>) {
    this.backend = options.backend;
    this.#options = options;
    this.#names = Object.keys(options.inputs) as N[];
    if (this.#names.length === 0) {
      throw new InvalidArgumentError('a replayed step needs at least one input', {
        operation: 'ReplayedStep',
        argument: 'inputs',
        expected: 'one or more named inputs',
        actual: 'none',
      });
    }
    this.#schedule = new DeviceSchedule(this.backend, options.optimizer, 'ReplayedStep');
    this.#optimizer = this.#schedule.optimizer;
  }

  /** Whether the step has been recorded (after the first `run`). */
  get recorded(): boolean {
    return this.#recording !== undefined;
  }

  /** Trains on one batch: records the step the first time, replays it afterwards. */
  async run(
    batch: Readonly<Record<N, ReplayedBatchInput>>,
    options: ReplayedRunOptions = {},
  ): Promise<StepResult> {
    checkNotDisposed(this.#disposed, 'ReplayedStep');
    this.#check(batch);
    const optimizer = this.#optimizer;
    if (options.lr !== undefined) optimizer.lr = options.lr;
    if (!(optimizer.lr >= 0)) {
      throw new InvalidArgumentError('the learning rate must be a non-negative number', {
        operation: 'ReplayedStep',
        argument: 'lr',
        expected: '>= 0',
        actual: String(optimizer.lr),
      });
    }
    const recording = this.#recording ?? this.#record();
    for (const name of this.#names) {
      const given = batch[name];
      // A device copy runs in queue (stream) order before the submit below,
      // with no host round trip; it cannot be part of the recorded batch,
      // which replays fixed addresses while the source changes every step.
      if (given instanceof Tensor) this.backend.copy(given, recording.inputs[name]);
      else this.backend.write(recording.inputs[name], given.data);
    }
    this.#schedule.write();
    // Every backend enqueues a batch when submit() is called, before its
    // promise settles, and orders reads after enqueued work: the readbacks
    // start at once and the step waits for the device once, not twice.
    const submitted = recording.batch.submit();
    const readLoss = options.readLoss ?? true;
    const readNorm = this.#options.readGradNorm === true && recording.norm !== undefined;
    const scaled = this.#options.lossScaler !== undefined;
    const [done, loss, norm, stepNumber] = await Promise.allSettled([
      submitted,
      readLoss ? recording.loss.read() : undefined,
      readNorm ? recording.norm!.read() : undefined,
      scaled ? this.#schedule.stepNumber.read() : undefined,
    ]);
    // The submit's failure explains a failed (or meaningless) readback: it comes first.
    if (done.status === 'rejected') throw done.reason;
    if (stepNumber.status === 'rejected') throw stepNumber.reason;
    // Under loss scaling the device advanced the written step number only where it took the step.
    const taken = stepNumber.value ? stepNumber.value[0]! - 1 : optimizer.stepCount + 1;
    const skipped = scaled ? taken === optimizer.stepCount : undefined;
    optimizer.stepCount = taken;
    if (loss.status === 'rejected') throw loss.reason;
    if (norm.status === 'rejected') throw norm.reason;
    const result = { loss: loss.value?.[0], gradNorm: norm.value?.[0] };
    return skipped === undefined ? result : { ...result, skipped };
  }

  #check(batch: Readonly<Record<N, ReplayedBatchInput>>): void {
    for (const key of Object.keys(batch ?? {})) {
      if (!this.#names.includes(key as N)) {
        throw new InvalidArgumentError('unknown input', {
          operation: 'ReplayedStep',
          argument: `batch.${key}`,
          expected: `one of ${this.#names.join(', ')}`,
          actual: key,
        });
      }
    }
    for (const name of this.#names) {
      const given = batch?.[name];
      const declared = this.#options.inputs[name];
      if (!given) {
        throw new InvalidArgumentError('an input of the step is missing', {
          operation: 'ReplayedStep',
          argument: `batch.${name}`,
          expected: `data or a tensor of shape ${formatShape(declared.shape)}`,
          actual: 'nothing',
        });
      }
      const argument = `batch.${name}`;
      if (given instanceof Tensor) {
        this.#checkTensor(given, declared, argument);
        continue;
      }
      const size = declared.shape.reduce((a, b) => a * b, 1);
      if (!shapesEqual(given.shape, declared.shape) || given.data.length !== size) {
        throw new ShapeError('a replayed step takes batches of the shape it was recorded for', {
          operation: 'ReplayedStep',
          argument,
          expected: `${formatShape(declared.shape)} (${size} values)`,
          actual: `${formatShape(given.shape)} (${given.data.length} values)`,
        });
      }
    }
  }

  /** A device input: a live, written tensor of this backend with the declared shape and dtype. */
  #checkTensor(given: Tensor, declared: ReplayedInput, argument: string): void {
    const kernel = 'ReplayedStep';
    if (given.backend !== this.backend) {
      throw new BackendMismatchError('a device input must live on the step’s backend', {
        operation: kernel,
        argument,
        expected: `a tensor of this ${this.backend.name} backend`,
        actual:
          given.backend.name === this.backend.name
            ? `a tensor of another ${given.backend.name} backend`
            : `a tensor of the ${given.backend.name} backend`,
      });
    }
    checkTensorAlive(kernel, argument, given, 'a device input was disposed');
    if (!shapesEqual(given.shape, declared.shape)) {
      throw new ShapeError('a replayed step takes batches of the shape it was recorded for', {
        operation: kernel,
        argument,
        expected: formatShape(declared.shape),
        actual: formatShape(given.shape),
      });
    }
    const dtype = declared.dtype ?? 'f32';
    if (given.dtype !== dtype) {
      throw new DTypeError('a device input must have the declared dtype', {
        operation: kernel,
        argument,
        expected: dtype,
        actual: given.dtype,
      });
    }
    // An output of a batch not yet submitted holds nothing to train on.
    checkWritten(kernel, given, argument);
  }

  #record(): Recording<N> {
    const optimizer = this.#optimizer;
    // Gradients left by an eager step would be added to, and read by every replay.
    optimizer.zeroGrad();
    const inputs = Object.fromEntries(
      this.#names.map((name) => {
        const { shape, dtype } = this.#options.inputs[name];
        return [name, this.backend.zeros(shape, dtype ?? 'f32')];
      }),
    ) as Record<N, Tensor>;
    const batch = this.backend.batch();
    const tape = new Tape(this.backend, { runner: batch });
    let norm: Tensor | undefined;
    try {
      const loss = this.#options.loss(tape, inputs);
      tape.backward(loss, this.#options.lossScaler?.seedFor(loss.shape));
      norm = this.#schedule.recordUpdate(batch, this.#options);
      // The recording keeps the gradients; the parameters are left without, as after an eager step.
      const grads = [...takeGradients(optimizer.params).values()];
      this.#recording = { batch, tape, loss: loss.value, norm, grads, inputs };
      return this.#recording;
    } catch (error) {
      disposeRecorded({ batches: [batch], norm, tape });
      optimizer.zeroGrad();
      for (const t of Object.values<Tensor>(inputs)) t.dispose();
      throw error;
    }
  }

  /** Frees the recording, its tensors and the device step and rate. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const r = this.#recording;
    if (r) {
      disposeRecorded({ batches: [r.batch], norm: r.norm, tape: r.tape, grads: r.grads });
      for (const t of Object.values<Tensor>(r.inputs)) t.dispose();
    }
    this.#schedule.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
