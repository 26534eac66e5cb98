import {
  InvalidArgumentError,
  incrementalAttention,
  type KernelRunner,
  kvCacheScatter,
  type Tensor,
} from '@rayo/core';
import type { CudaBackend, RecordedCall } from './backend.js';

/** One decoding step: new keys and values written into the caches, and the query attending to them. */
export interface DecodeStep {
  /** [nHeads, headDim]: the query of the newest token. */
  readonly q: Tensor;
  /** [T, nKvHeads·headDim] or [nKvHeads·headDim]: new keys, heads interleaved as a projection writes them. */
  readonly k: Tensor;
  readonly v: Tensor;
  /** [nKvHeads, maxSeq, headDim], head-first; updated in place. */
  readonly kCache: Tensor;
  readonly vCache: Tensor;
  /** Cache row of the first new token; attention covers rows [0, position + T). */
  readonly position: number;
  /** Score scale; 0 or omitted means 1/sqrt(headDim). */
  readonly scale?: number;
  /** Where the attention output goes ([nHeads, headDim]); a new tensor otherwise. */
  readonly out?: Tensor;
}

/**
 * Scatters `k` and `v` into the caches and runs the attention of `q` over
 * the cache up to and including them, with any runner: a backend (enqueued
 * at once on its stream; read or `sync()` to wait), a batch (replayed as
 * one graph), or the runner `runOnStream` passes (a caller's stream).
 */
export function decodeStep(runner: KernelRunner, step: DecodeStep): Tensor {
  const tokens = step.k.shape.length === 2 ? step.k.shape[0]! : 1;
  runner.run(kvCacheScatter, [step.kCache, step.k], { position: step.position });
  runner.run(kvCacheScatter, [step.vCache, step.v], { position: step.position });
  const attrs = { seqLen: step.position + tokens, scale: step.scale ?? 0 };
  return runner.run(incrementalAttention, [step.q, step.kCache, step.vCache], attrs, { out: [step.out] })[0]!;
}

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
      kernel: 'runOnStream',
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
