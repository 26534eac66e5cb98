import {
  type AnyKernelSpec,
  type AttrValues,
  type CallRecorder,
  type PreparedCall,
  RecordingBatch,
} from '@rayo/core';
import type { CommandRecorder, Recording } from './encoder.js';
import type { AnyWgpuKernel } from './kernel.js';
import type { WgpuQueue } from './queue.js';

/** A validated kernel call, with the work that encodes it. */
export type WgpuRecordedCall<A extends AttrValues = AttrValues> = PreparedCall<AnyWgpuKernel, A> & {
  readonly encode: (recorder: CommandRecorder) => void;
};

/**
 * Everything a batch needs of its backend, in one seam: validating and
 * recording calls, and the command machinery that encodes and submits them.
 */
export interface BatchCommands extends CallRecorder<WgpuRecordedCall> {
  /** Resolves every dispatch `encodeAll` records to a pipeline and a bind group. */
  encode(encodeAll: (recorder: CommandRecorder) => void): Recording;
  submit(recording: Recording): Promise<void>;
  /** Runs `work` in error scopes whose errors are reported as the call `call()` names. */
  scoped<T>(call: () => string, work: () => T): T;
  /** Reports what went wrong with work submitted so far (pipelines still compiling included). */
  settle(api: string): Promise<void>;
}

/**
 * One command encoder and one submission for everything recorded. The first
 * submit resolves every dispatch to a pipeline and a bind group; later ones
 * replay that recording, creating no GPU objects and writing no parameters,
 * as long as it gets its parameter chunks and scratch buffers back (they are
 * pooled between submits, so other work may take them: then it is recorded
 * again). Submissions of the same batch may be in flight together: they keep
 * the recording's chunks and buffers, which queue order keeps apart.
 */
export class WgpuCommandBatch extends RecordingBatch<WgpuRecordedCall> {
  readonly #work: ((recorder: CommandRecorder) => void)[] = [];
  readonly #kernelNames: string[] = [];
  #recording: Recording | undefined;

  constructor(private readonly commands: BatchCommands) {
    super(commands);
  }

  protected keep(call: WgpuRecordedCall, spec: AnyKernelSpec): void {
    this.#work.push(call.encode);
    this.#kernelNames.push(spec.name);
    // Recorded again at the next submit.
    this.#recording = undefined;
  }

  /** How errors of this batch's submission name it; made only when one is reported. */
  readonly #describe = (): string => {
    const names = this.#kernelNames;
    const shown =
      names.length <= 4 ? names.join(', ') : `${names.slice(0, 3).join(', ')}, …, ${names.at(-1)}`;
    return `batch submit of ${names.length} kernel(s) (${shown})`;
  };

  async submit(): Promise<void> {
    this.calls.checkSubmittable();
    let recording: Recording | undefined;
    try {
      // Recording (bind groups) and submission in one error scope: the batch is one call.
      const submitted = this.commands.scoped(this.#describe, () => {
        recording = this.#reclaimOrRecord();
        return this.commands.submit(recording);
      });
      // Enqueued: reads of the outputs are ordered after this work now.
      this.calls.submitted();
      await submitted;
      // Only this submission: later work of other callers may still be running.
      await this.commands.settle('submit');
    } catch (error) {
      // A recording that failed (a kernel that did not compile) is not replayed.
      if (recording !== undefined && this.#recording === recording) this.#recording = undefined;
      throw error;
    }
  }

  #reclaimOrRecord(): Recording {
    if (this.#recording?.reclaim()) return this.#recording;
    this.#recording = this.commands.encode((recorder) => {
      for (const encode of this.#work) {
        recorder.beginCall();
        encode(recorder);
      }
    });
    return this.#recording;
  }

  /** Parameter chunks and scratch buffers go back to their pools after each submit: only the recording is left. */
  dispose(): void {
    this.#work.length = 0;
    this.#kernelNames.length = 0;
    this.calls.clear();
    this.#recording = undefined;
  }
}

/** A batch of `recorder`'s calls, encoded and submitted on `queue`. */
export function batchOnQueue(recorder: CallRecorder<WgpuRecordedCall>, queue: WgpuQueue): WgpuCommandBatch {
  return new WgpuCommandBatch({
    record: (spec, inputs, attrs, options) => recorder.record(spec, inputs, attrs, options),
    encode: (encodeAll) => queue.record(encodeAll),
    submit: (recording) => queue.submit(recording, true),
    scoped: (call, work) => queue.callErrors.scoped(call, work),
    settle: (api) => queue.settle(api),
  });
}
