import { type Backend, InvalidArgumentError } from '@rayo/core';
import type { Tape, Variable } from '../autograd/tape.js';
import {
  type HasParameters,
  loadCheckpoint,
  readCheckpointFile,
  saveCheckpoint,
  writeCheckpointFile,
} from '../checkpoint/checkpoint.js';
import { namingFile } from '../io/fileError.js';
import type { LossScaler } from '../optim/lossScaler.js';
import type { Optimizer } from '../optim/optimizer.js';
import type { LrSchedule } from '../optim/schedule.js';
import { ProgressBar, type ProgressStream } from './progress.js';
import { trainStep } from './step.js';

export type Metrics = Readonly<Record<string, number>>;

export interface EvaluationHook {
  /** Evaluate after every `every` completed steps, and after the last. */
  readonly every: number;
  readonly run: (step: number) => Metrics | Promise<Metrics>;
}

export interface CheckpointHook {
  /** Save after every `every` completed steps, and after the last. */
  readonly every: number;
  /** A file to (over)write (Node). */
  readonly path?: string;
  /** Or a function that stores the bytes. */
  readonly save?: (bytes: Uint8Array, step: number) => void | Promise<void>;
  readonly metadata?: Readonly<Record<string, string>>;
}

export interface TrainOptions<B> {
  readonly backend: Backend;
  readonly model: HasParameters;
  readonly optimizer: Optimizer;
  /** Total steps of the run (a resumed run continues up to it). */
  readonly steps: number;
  /**
   * The batch of the step with 0-based index `step`. It must depend on the
   * step only (seed any shuffling with it) for a resumed run to repeat an
   * uninterrupted one exactly.
   */
  readonly data: (step: number) => B | Promise<B>;
  /** The loss of a batch, built on the tape. */
  readonly loss: (tape: Tape, batch: B) => Variable;
  /** Frees a batch's tensors once its step has run. */
  readonly release?: (batch: B) => void;
  /** A schedule of the 0-based step, or a constant (default: the optimizer's lr). */
  readonly lr?: LrSchedule | number;
  readonly clipNorm?: number;
  /** Dynamic loss scaling, for 'f16' training (see `trainStep`): a step with non-finite gradients is skipped and not counted. */
  readonly lossScaler?: LossScaler;
  /** Read the loss back every this many steps (default 1); the others run without readbacks. */
  readonly logEvery?: number;
  /** Read the gradient norm back every this many steps (default: never). */
  readonly gradNormEvery?: number;
  /** Progress on stderr (default true), or where to write it. */
  readonly progress?: boolean | { readonly stream?: ProgressStream; readonly label?: string };
  readonly evaluate?: EvaluationHook;
  readonly checkpoint?: CheckpointHook;
  /** A checkpoint (bytes or a file path) to continue from: parameters, optimizer state and step. */
  readonly resume?: Uint8Array | string;
  /** One command batch per step (default true). */
  readonly batch?: boolean;
  readonly onStep?: (record: StepRecord) => void;
}

export interface StepRecord {
  /** Steps completed, this one included. */
  readonly step: number;
  readonly lr: number;
  readonly loss: number | undefined;
  readonly gradNorm: number | undefined;
  /** Under loss scaling: whether the update was skipped (gradients not finite). */
  readonly skipped?: boolean;
}

export interface TrainResult {
  /** Steps completed. */
  readonly step: number;
  /** Where this run started (0, or the resumed checkpoint's step). */
  readonly startStep: number;
  readonly history: readonly StepRecord[];
  readonly evaluations: readonly { readonly step: number; readonly metrics: Metrics }[];
  readonly seconds: number;
  readonly stepsPerSecond: number;
}

function checkEvery(name: string, every: number | undefined): void {
  if (every !== undefined && !(Number.isInteger(every) && every >= 1)) {
    throw new InvalidArgumentError('an interval must be a positive integer of steps', {
      operation: 'train',
      argument: name,
      expected: 'an integer >= 1',
      actual: String(every),
    });
  }
}

function formatMetrics(metrics: Metrics): string {
  return Object.entries(metrics)
    .map(([k, v]) => `${k} ${Number.isInteger(v) ? v : v.toFixed(4)}`)
    .join('  ');
}

/**
 * Trains for `steps` steps: each step's batch, forward, backward, clipping and
 * update run on the device (one submission per step); the loss is read back to
 * log it; evaluations and checkpoints run at their intervals.
 */
export async function train<B>(options: TrainOptions<B>): Promise<TrainResult> {
  const { backend, model, optimizer, steps } = options;
  checkEvery('logEvery', options.logEvery);
  checkEvery('gradNormEvery', options.gradNormEvery);
  checkEvery('evaluate.every', options.evaluate?.every);
  checkEvery('checkpoint.every', options.checkpoint?.every);
  const logEvery = options.logEvery ?? 1;
  const schedule = options.lr;
  const lrAt = (step: number): number =>
    typeof schedule === 'function' ? schedule(step) : (schedule ?? optimizer.lr);

  // The loss scaler's state travels with the checkpoints of a run that scales its loss.
  const scaler = options.lossScaler ? { lossScaler: options.lossScaler } : {};
  let startStep = 0;
  const resume = options.resume;
  if (resume !== undefined) {
    const bytes = typeof resume === 'string' ? await readCheckpointFile(resume) : resume;
    try {
      startStep = loadCheckpoint(bytes, { model, optimizer, ...scaler }).step;
    } catch (error) {
      throw typeof resume === 'string' ? namingFile(error, resume) : error;
    }
  }

  const progressOption = options.progress ?? true;
  const progress =
    progressOption === false
      ? undefined
      : new ProgressBar({ total: steps, ...(progressOption === true ? {} : progressOption) });
  progress?.start(startStep);

  const history: StepRecord[] = [];
  const evaluations: { step: number; metrics: Metrics }[] = [];
  const started = performance.now();

  const checkpoint = async (step: number): Promise<void> => {
    const hook = options.checkpoint;
    if (!hook) return;
    const bytes = await saveCheckpoint({ model, optimizer, ...scaler, step, metadata: hook.metadata });
    if (hook.path) await writeCheckpointFile(hook.path, bytes);
    await hook.save?.(bytes, step);
    progress?.log(`checkpoint at step ${step}${hook.path ? `: ${hook.path}` : ''}`);
  };

  for (let i = startStep; i < steps; i++) {
    const done = i + 1;
    const batch = await options.data(i);
    const lr = lrAt(i);
    let result: Awaited<ReturnType<typeof trainStep>>;
    try {
      result = await trainStep({
        backend,
        optimizer,
        lr,
        loss: (tape) => options.loss(tape, batch),
        clipNorm: options.clipNorm,
        ...(options.lossScaler ? { lossScaler: options.lossScaler } : {}),
        readLoss: done % logEvery === 0 || done === steps,
        readGradNorm: options.gradNormEvery !== undefined && done % options.gradNormEvery === 0,
        batch: options.batch,
      });
    } finally {
      options.release?.(batch);
    }
    const record: StepRecord = {
      step: done,
      lr,
      loss: result.loss,
      gradNorm: result.gradNorm,
      ...(result.skipped === undefined ? {} : { skipped: result.skipped }),
    };
    history.push(record);
    options.onStep?.(record);
    progress?.update(done, {
      loss: result.loss,
      lr,
      ...(result.gradNorm !== undefined ? { norm: result.gradNorm } : {}),
    });
    const last = done === steps;
    if (options.evaluate && (done % options.evaluate.every === 0 || last)) {
      const metrics = await options.evaluate.run(done);
      evaluations.push({ step: done, metrics });
      progress?.log(`eval at step ${done}: ${formatMetrics(metrics)}`);
    }
    if (options.checkpoint && (done % options.checkpoint.every === 0 || last)) await checkpoint(done);
  }
  progress?.finish();
  const seconds = (performance.now() - started) / 1000;
  const ran = Math.max(0, steps - startStep);
  return {
    step: Math.max(steps, startStep),
    startStep,
    history,
    evaluations,
    seconds,
    stepsPerSecond: seconds > 0 ? ran / seconds : 0,
  };
}
