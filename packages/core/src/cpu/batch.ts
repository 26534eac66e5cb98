import { type CallRecorder, RecordingBatch } from '../batchCalls.js';
import type { AttrValues } from '../kernel.js';
import type { PreparedCall } from '../kernelCall.js';
import type { Impl } from './fastPaths.js';

/** A validated cpu call with the work that computes it. */
export type CpuCall = PreparedCall<Impl, AttrValues> & { readonly execute: () => void };

/** Records validated kernels and runs them in order on submit (and again on each replay). */
export class CpuCommandBatch extends RecordingBatch<CpuCall> {
  readonly #work: (() => void)[] = [];

  constructor(recorder: CallRecorder<CpuCall>) {
    super(recorder);
  }

  protected keep(call: CpuCall): void {
    this.#work.push(call.execute);
  }

  submit(): Promise<void> {
    try {
      this.calls.checkSubmittable();
      for (const work of this.#work) work();
      this.calls.submitted();
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  dispose(): void {
    this.#work.length = 0;
    this.calls.clear();
  }
}
