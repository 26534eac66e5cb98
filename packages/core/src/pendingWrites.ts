import type { Tensor } from './backend.js';
import { UnsubmittedWriteError } from './errors.js';
import { type AnyKernelSpec, inputName } from './kernel.js';

interface Writer {
  /** The batch that recorded the kernel. */
  readonly batch: object;
  readonly kernel: string;
}

// Outputs a batch allocated while recording, until that batch is submitted.
// Before then their memory holds nothing meaningful (on a GPU, possibly the
// bytes of a freed tensor), so no read may return it.
const writers = new WeakMap<Tensor, Writer>();

/**
 * The bookkeeping every backend's batch does for the contract that a fresh
 * output of a recorded kernel cannot be read before its batch is submitted.
 */
export class PendingWrites {
  readonly #tensors: Tensor[] = [];

  /** Marks `outputs`, just allocated by `kernel` in this batch, as not yet written. */
  recorded(kernel: string, outputs: readonly Tensor[]): void {
    const writer: Writer = { batch: this, kernel };
    for (const t of outputs) {
      writers.set(t, writer);
      this.#tensors.push(t);
    }
  }

  /** Throws unless `tensor` is written or pending in this batch itself. */
  checkInput(api: string, tensor: Tensor, argument: string): void {
    checkWritten(api, tensor, argument, this);
  }

  /** The batch's work is enqueued: reads are now ordered after it. */
  submitted(): void {
    for (const t of this.#tensors) if (writers.get(t)?.batch === this) writers.delete(t);
    this.#tensors.length = 0;
  }
}

/**
 * Throws UnsubmittedWriteError when `tensor` is the fresh output of a kernel
 * recorded in a batch (other than `within`) that was not submitted yet.
 */
export function checkWritten(api: string, tensor: Tensor, argument: string, within?: object): void {
  const writer = writers.get(tensor);
  if (!writer || writer.batch === within) return;
  throw new UnsubmittedWriteError(
    `the tensor is an output of '${writer.kernel}' in a batch that was not submitted, so it holds no data yet`,
    {
      operation: api,
      argument,
      expected: `submit() of the batch that records '${writer.kernel}' first`,
      actual: `${tensor.describe()} not written yet`,
    },
  );
}

/** checkWritten for every input of a kernel call. */
export function checkInputsWritten(
  spec: AnyKernelSpec,
  inputs: readonly (Tensor | undefined)[],
  within?: object,
): void {
  inputs.forEach((t, i) => {
    if (t) checkWritten(spec.name, t, inputName(spec, i), within);
  });
}
