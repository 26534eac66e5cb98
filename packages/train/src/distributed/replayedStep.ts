import { type Backend, type CommandBatch, InvalidArgumentError, type Tensor } from '@rayo/core';
import { Tape, type Variable } from '../autograd/tape.js';
import type { StepResult } from '../loop/step.js';
import type { Parameter } from '../nn/module.js';
import { AdamW } from '../optim/adamw.js';
import { gradNorm } from '../optim/clip.js';
import type { DataParallel } from './dataParallel.js';

export interface ReplayedDataParallelStepOptions {
  readonly backend: Backend;
  /** AdamW: its step count and learning rate are read on the device, so replays need no re-recording. */
  readonly optimizer: AdamW;
  readonly parallel: DataParallel;
  /**
   * Builds the loss on the tape once, when the step is recorded, from device
   * tensors the caller refills (`write`, `copy`) before every `run`: the
   * replays read whatever they hold then.
   */
  readonly loss: (tape: Tape) => Variable;
  readonly clipNorm?: number;
  readonly readGradNorm?: boolean;
}

interface Recording {
  readonly backward: CommandBatch;
  readonly update: CommandBatch;
  readonly tape: Tape;
  readonly loss: Tensor;
  readonly norm: Tensor | undefined;
  readonly grads: ReadonlyMap<Parameter, Tensor>;
}

/**
 * A data-parallel training step recorded once and replayed, as `ReplayedStep`
 * is on one device: forward and backward in one command batch (one CUDA graph
 * on cuda), the gradient norm and the AdamW update in another, and between
 * them the gradients (and the loss) averaged across the ranks on the
 * backend's queue. Each `run` writes the step number and the learning rate,
 * enqueues the two replays and the collectives back to back and waits for
 * the device once, for the loss. From the first replay on a step allocates
 * nothing. The gradients stay with the recording, not on the parameters.
 */
export class ReplayedDataParallelStep {
  readonly backend: Backend;
  readonly #options: ReplayedDataParallelStepOptions;
  readonly #step: Tensor;
  readonly #lr: Tensor;
  #recording: Recording | undefined;
  #disposed = false;

  constructor(options: ReplayedDataParallelStepOptions) {
    if (!(options.optimizer instanceof AdamW)) {
      throw new InvalidArgumentError(
        'a replayed step needs an optimizer that reads its step and rate on the device',
        {
          kernel: 'ReplayedDataParallelStep',
          argument: 'optimizer',
          expected: 'AdamW',
          actual: (options.optimizer as { kind?: string }).kind ?? typeof options.optimizer,
        },
      );
    }
    this.backend = options.backend;
    this.#options = options;
    this.#step = this.backend.zeros([1], 'i32');
    this.#lr = this.backend.zeros([1]);
  }

  get recorded(): boolean {
    return this.#recording !== undefined;
  }

  /** Trains on what the loss's tensors hold now: records the step the first time, replays it afterwards. */
  async run(options: { readonly lr?: number; readonly readLoss?: boolean } = {}): Promise<StepResult> {
    if (this.#disposed) {
      throw new InvalidArgumentError('the replayed step was disposed', {
        kernel: 'ReplayedDataParallelStep',
        argument: 'this',
        expected: 'a live replayed step',
        actual: 'a disposed one',
      });
    }
    const { optimizer, parallel } = this.#options;
    if (options.lr !== undefined) optimizer.lr = options.lr;
    const r = this.#recording ?? this.#record();
    this.backend.write(this.#step, [optimizer.stepCount + 1]);
    this.backend.write(this.#lr, [optimizer.lr]);
    const readLoss = options.readLoss ?? true;
    const readNorm = this.#options.readGradNorm === true && r.norm !== undefined;
    // Each submit enqueues its batch before its promise settles, so the
    // collectives between the two replays run in queue order between them.
    const backward = r.backward.submit();
    backward.catch(() => undefined);
    parallel.allReduceGradientsOf((p) => r.grads.get(p));
    if (readLoss) parallel.communicator.allReduce([r.loss], 'avg');
    const [done, updated, loss, norm] = await Promise.allSettled([
      backward,
      r.update.submit(),
      readLoss ? r.loss.read() : undefined,
      readNorm ? r.norm!.read() : undefined,
    ]);
    // A failed submit explains a failed (or meaningless) readback: it comes first.
    for (const result of [done, updated, loss, norm]) if (result.status === 'rejected') throw result.reason;
    parallel.throwIfFailed();
    optimizer.stepCount++;
    return {
      loss: loss.status === 'fulfilled' ? loss.value?.[0] : undefined,
      gradNorm: norm.status === 'fulfilled' ? norm.value?.[0] : undefined,
    };
  }

  #record(): Recording {
    const { optimizer, clipNorm, readGradNorm } = this.#options;
    // Gradients left by an eager step would be added to, and read by every replay.
    optimizer.zeroGrad();
    const backward = this.backend.batch();
    const update = this.backend.batch();
    const tape = new Tape(this.backend, { runner: backward });
    let norm: Tensor | undefined;
    try {
      const loss = this.#options.loss(tape);
      tape.backward(loss);
      if (clipNorm !== undefined || readGradNorm) norm = gradNorm(optimizer.params, { runner: update });
      const clip = norm && clipNorm !== undefined ? { norm, maxNorm: clipNorm } : undefined;
      optimizer.stepOnDevice(update, this.#step, this.#lr, clip);
      const grads = new Map(optimizer.params.flatMap((p) => (p.grad ? [[p, p.grad] as const] : [])));
      for (const p of optimizer.params) p.grad = undefined;
      this.#recording = { backward, update, tape, loss: loss.value, norm, grads };
      return this.#recording;
    } catch (error) {
      norm?.dispose();
      tape.dispose();
      backward.dispose();
      update.dispose();
      optimizer.zeroGrad();
      throw error;
    }
  }

  /** Frees the recording, its gradients and the device step and rate. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const r = this.#recording;
    if (r) {
      r.backward.dispose();
      r.update.dispose();
      r.norm?.dispose();
      r.tape.dispose();
      for (const g of r.grads.values()) g.dispose();
    }
    this.#step.dispose();
    this.#lr.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
