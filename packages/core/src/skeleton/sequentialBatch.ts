import { type CallRecorder, type RecordedKernelCall, RecordingBatch } from '../batchCalls.js';
import type { AnyKernelSpec } from '../kernel.js';

/**
 * The batch of a backend whose work runs when it is submitted (the cpu
 * backend, a minimal backend): it keeps the recorded calls and, at each
 * submit, hands them to `submitCall` in order, as eager `run`s would.
 */
export class SequentialBatch<Call extends RecordedKernelCall> extends RecordingBatch<Call> {
  readonly #calls: { readonly call: Call; readonly spec: AnyKernelSpec }[] = [];

  constructor(
    recorder: CallRecorder<Call>,
    private readonly submitCall: (call: Call, spec: AnyKernelSpec) => void,
  ) {
    super(recorder);
  }

  protected keep(call: Call, spec: AnyKernelSpec): void {
    this.#calls.push({ call, spec });
  }

  submit(): Promise<void> {
    try {
      this.calls.checkSubmittable();
      for (const { call, spec } of this.#calls) this.submitCall(call, spec);
      this.calls.submitted();
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  dispose(): void {
    this.#calls.length = 0;
    this.calls.clear();
  }
}
