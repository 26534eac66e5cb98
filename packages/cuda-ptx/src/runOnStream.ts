import { InvalidArgumentError, type KernelRunner } from '@rayo/core';
import type { CudaBackend } from './backend.js';
import type { RecordedCall } from './batch.js';

/** Two events per backend, reused by every call: a wait takes the event's last record at the time it is made. */
const fences = new WeakMap<CudaBackend, { readonly before: bigint; readonly after: bigint }>();

function fenceOf(backend: CudaBackend): { readonly before: bigint; readonly after: bigint } {
  let fence = fences.get(backend);
  if (!fence) {
    fence = { before: backend.driver.createEvent(), after: backend.driver.createEvent() };
    fences.set(backend, fence);
  }
  return fence;
}

/**
 * Runs the kernels `work` records on `stream`, a CUstream of the backend's
 * context that the caller owns (e.g. one shared with other CUDA code), and
 * returns what `work` returns without waiting. The work starts after
 * everything already enqueued on the backend's stream, and the backend's
 * later work (reads included) waits for it, so tensors flow between the two
 * as they do within the backend. The stream must not be capturing a graph.
 */
export function runOnStream<T>(backend: CudaBackend, stream: bigint, work: (runner: KernelRunner) => T): T {
  backend.checkAlive('runOnStream');
  if (typeof stream !== 'bigint' || stream < 0n) {
    throw new InvalidArgumentError('a CUstream handle is expected', {
      operation: 'runOnStream',
      argument: 'stream',
      expected: 'a bigint CUstream of the backend’s context',
      actual: String(stream),
    });
  }
  const calls: RecordedCall[] = [];
  const release = () => {
    for (const call of calls) backend.releaseScratch(call.scratch);
  };
  let result: T;
  try {
    result = work({
      run: (spec, inputs, attrs, options) => {
        const call = backend.record(spec, inputs, attrs, options);
        calls.push(call);
        return call.outputs;
      },
    });
  } catch (error) {
    release();
    throw error;
  }
  const driver = backend.driver;
  const fence = fenceOf(backend);
  driver.recordEvent(fence.before, backend.stream);
  driver.waitEvent(stream, fence.before);
  try {
    driver.enqueue(
      calls.flatMap((c) => c.commands),
      stream,
    );
  } finally {
    // Scratch memory goes back to the pool, whose next user is ordered on the backend's stream.
    driver.recordEvent(fence.after, stream);
    driver.waitEvent(backend.stream, fence.after);
    release();
  }
  return result;
}
