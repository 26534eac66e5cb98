import type { CommandBatch, KernelCallArgs, RunOptions, Tensor } from './backend.js';
import { DisposedTensorError } from './errors.js';
import { type AnyKernelSpec, type AttrValues, inputName, type KernelIO, type KernelSpec } from './kernel.js';
import { checkWritten, PendingWrites } from './pendingWrites.js';

/** A tensor a recorded kernel reads or writes, and the name it has in that call. */
interface Touched {
  readonly kernel: string;
  readonly tensor: Tensor;
  readonly argument: string;
  /** Inputs must also be written (not a pending output of another batch) at submit. */
  readonly isInput: boolean;
}

/**
 * What every backend's command batch keeps about its recorded calls, apart
 * from how it encodes them: the tensors each call touches (none may be
 * disposed or unwritten when the batch is submitted or replayed) and the
 * fresh outputs that hold no data until the batch is submitted.
 */
export class BatchCalls {
  readonly #pending = new PendingWrites();
  readonly #touched: Touched[] = [];
  // Each tensor of #touched once (an array to loop over): what a replay checks for disposal.
  readonly #seen = new Set<Tensor>();
  readonly #tensors: Tensor[] = [];
  // #touched[0, #written) were found written (or pending in this batch) by a
  // submit: a tensor found so is never pending in another batch again (only
  // fresh outputs are), so a replay checks only the calls recorded since.
  #written = 0;
  #size = 0;

  /** Number of recorded kernel calls. */
  get size(): number {
    return this.#size;
  }

  /** Notes a kernel call the batch recorded; `fresh` are the outputs it allocated. */
  recorded(spec: AnyKernelSpec, inputs: readonly (Tensor | undefined)[], call: RecordedKernelCall): void {
    const kernel = spec.name;
    inputs.forEach((tensor, i) => {
      if (tensor) this.#touch({ kernel, tensor, argument: inputName(spec, i), isInput: true });
    });
    call.outputs.forEach((tensor, i) => {
      const meta = call.io.outputs[i]!;
      // An in-place output is one of the inputs, already noted.
      if (meta.aliasOf === undefined) this.#touch({ kernel, tensor, argument: meta.name, isInput: false });
    });
    this.#pending.recorded(kernel, call.fresh);
    this.#size++;
  }

  /**
   * Throws before a submit (or a replay) when a recorded call would touch a
   * disposed tensor, or read an output of another batch that was not
   * submitted yet.
   */
  checkSubmittable(): void {
    // Plain loops: this runs on every replay. Nothing disposed and nothing
    // recorded since the last check is the common case, answered here.
    let disposed = false;
    const tensors = this.#tensors;
    for (let i = 0; i < tensors.length; i++) {
      if (tensors[i]!.disposed) {
        disposed = true;
        break;
      }
    }
    if (!disposed && this.#written === this.#touched.length) return;
    // In call order, so that the first offending call is the one named.
    const touched = this.#touched;
    for (let i = 0; i < touched.length; i++) {
      const { kernel, tensor, argument, isInput } = touched[i]!;
      if (tensor.disposed) {
        // A replay uses the memory recorded: memory given back may belong to another tensor now.
        throw new DisposedTensorError('a tensor of a recorded kernel was disposed before submit', {
          operation: kernel,
          argument,
          expected: 'every tensor a batch reads or writes alive until its last submit',
          actual: `disposed ${tensor.describe()}`,
        });
      }
      if (isInput && i >= this.#written) checkWritten(kernel, tensor, argument, this.#pending);
    }
    this.#written = touched.length;
  }

  /** The batch's work is enqueued: reads of its outputs are ordered after it now. */
  submitted(): void {
    this.#pending.submitted();
  }

  /** Forgets every recorded call. */
  clear(): void {
    this.#touched.length = 0;
    this.#seen.clear();
    this.#tensors.length = 0;
    this.#written = 0;
    this.#size = 0;
  }

  #touch(touched: Touched): void {
    this.#touched.push(touched);
    if (this.#seen.has(touched.tensor)) return;
    this.#seen.add(touched.tensor);
    this.#tensors.push(touched.tensor);
  }
}

/** What a backend keeps of one recorded kernel call: at least its outputs and which of them it allocated. */
export interface RecordedKernelCall {
  readonly outputs: Tensor[];
  readonly fresh: readonly Tensor[];
  readonly io: KernelIO;
}

/** A backend's `record`: validates a kernel call and allocates its outputs, without running it. */
export interface CallRecorder<Call> {
  record<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs: Partial<A> | undefined,
    options: RunOptions | undefined,
  ): Call;
}

/**
 * The recording half of every backend's command batch: `run` validates and
 * records a call through the backend, notes it in `calls`, and lets the batch
 * keep what it encodes. A backend's batch adds only how it keeps, submits and
 * disposes of its work.
 */
export abstract class RecordingBatch<Call extends RecordedKernelCall> implements CommandBatch {
  protected readonly calls = new BatchCalls();

  /** `backend.record` validates a call and allocates its outputs (throwing for bad input). */
  constructor(private readonly recorder: CallRecorder<Call>) {}

  get size(): number {
    return this.calls.size;
  }

  run<A extends AttrValues>(...[spec, inputs, attrs, options]: KernelCallArgs<A>): Tensor[] {
    const call = this.recorder.record(spec, inputs, attrs, options);
    this.calls.recorded(spec as AnyKernelSpec, inputs, call);
    this.keep(call, spec as AnyKernelSpec);
    return call.outputs;
  }

  /** Keeps a recorded call's work for submits. */
  protected abstract keep(call: Call, spec: AnyKernelSpec): void;

  abstract submit(): Promise<void>;
  abstract dispose(): void;
}
