import { DriverContext } from './context.js';
import { CUDA_ERROR_NOT_READY, CUDA_SUCCESS } from './errors.js';
import {
  CU_EVENT_DEFAULT,
  CU_EVENT_DISABLE_TIMING,
  CU_STREAM_CAPTURE_MODE_RELAXED,
  CU_STREAM_NON_BLOCKING,
} from './libcuda.js';

/** How long a wait polls on every turn of the event loop before it falls back to a millisecond timer. */
const WAIT_SPIN_MS = 20;

/**
 * The driver's stream-ordered work that is not a kernel launch: copies and
 * fills, streams and waits on them, events, and graph capture and replay.
 */
export class DriverStreams extends DriverContext {
  readonly #graphKernels = new Map<bigint, readonly string[]>();

  // ------------------------------------------------------------------ copies

  copyHtoD(dst: bigint, src: ArrayBufferView, bytes: number): void {
    this.call('cuMemcpyHtoD_v2', (lib) => lib.cuMemcpyHtoD_v2(dst, src, bytes));
  }

  copyDtoH(dst: ArrayBufferView, src: bigint, bytes: number): void {
    this.call('cuMemcpyDtoH_v2', (lib) => lib.cuMemcpyDtoH_v2(dst, src, bytes));
  }

  copyDtoD(dst: bigint, src: bigint, bytes: number): void {
    this.call('cuMemcpyDtoD_v2', (lib) => lib.cuMemcpyDtoD_v2(dst, src, bytes));
  }

  /**
   * Host to device, ordered on `stream`. From pageable memory (every JS
   * array) the driver stages the data before returning, so the array may be
   * changed as soon as this returns.
   */
  copyHtoDAsync(dst: bigint, src: ArrayBufferView, bytes: number, stream: bigint): void {
    this.call('cuMemcpyHtoDAsync_v2', (lib) => lib.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream));
  }

  /** Device to host, ordered on `stream`; into pageable memory it returns once the copy is done. */
  copyDtoHAsync(dst: ArrayBufferView, src: bigint, bytes: number, stream: bigint): void {
    this.call('cuMemcpyDtoHAsync_v2', (lib) => lib.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream));
  }

  copyDtoDAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.call('cuMemcpyDtoDAsync_v2', (lib) => lib.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream));
  }

  memsetD32(dst: bigint, word: number, count: number): void {
    this.call('cuMemsetD32_v2', (lib) => lib.cuMemsetD32_v2(dst, word, count));
  }

  memsetD32Async(dst: bigint, word: number, count: number, stream: bigint): void {
    this.call('cuMemsetD32Async', (lib) => lib.cuMemsetD32Async(dst, word, count, stream));
  }

  // ------------------------------------------------------------------ streams

  /** A stream that does not synchronise with the legacy NULL stream (so it can be captured). */
  createStream(): bigint {
    this.activate();
    return this.value('cuStreamCreate', this.lib.cuStreamCreate(CU_STREAM_NON_BLOCKING));
  }

  destroyStream(stream: bigint): void {
    this.call('cuStreamDestroy_v2', (lib) => lib.cuStreamDestroy_v2(stream));
  }

  /** Blocks until `stream` finished its work. */
  synchronize(stream: bigint): void {
    this.activate();
    this.check('cuStreamSynchronize', this.lib.cuStreamSynchronize(stream));
    this.idle();
  }

  /** Whether `stream` has finished all its work (errors of that work are thrown here). */
  isIdle(stream: bigint): boolean {
    this.activate();
    const status = this.lib.cuStreamQuery(stream);
    if (status === CUDA_ERROR_NOT_READY) return false;
    this.check('cuStreamQuery', status);
    this.idle();
    return true;
  }

  /**
   * Resolves when `stream` finished its work, polling so that the event loop
   * keeps running meanwhile: on every turn of the loop for the first
   * WAIT_SPIN_MS (a decode step or a kernel finishes within microseconds of
   * its end, not a timer's millisecond later), then once a millisecond.
   */
  async waitIdle(stream: bigint): Promise<void> {
    const start = performance.now();
    while (!this.isIdle(stream)) {
      await new Promise<void>((resolve) => {
        if (performance.now() - start < WAIT_SPIN_MS) setImmediate(resolve);
        else setTimeout(resolve, 1);
      });
      this.live('waitIdle');
    }
  }

  // ------------------------------------------------------------------- events

  /** An event with timestamps (`elapsedMs`), or, with `timing: false`, one only for ordering streams, which costs less. */
  createEvent(options: { readonly timing?: boolean } = {}): bigint {
    this.activate();
    const flags = options.timing === false ? CU_EVENT_DISABLE_TIMING : CU_EVENT_DEFAULT;
    return this.value('cuEventCreate', this.lib.cuEventCreate(flags));
  }

  /** Whether everything before the last record of `event` has finished (errors of that work are thrown here). */
  eventDone(event: bigint): boolean {
    this.activate();
    const status = this.lib.cuEventQuery(event);
    if (status === CUDA_ERROR_NOT_READY) return false;
    this.check('cuEventQuery', status);
    return true;
  }

  recordEvent(event: bigint, stream: bigint): void {
    this.call('cuEventRecord', (lib) => lib.cuEventRecord(event, stream));
  }

  /** Milliseconds between two completed events. */
  elapsedMs(start: bigint, end: bigint): number {
    this.activate();
    return this.value('cuEventElapsedTime', this.lib.cuEventElapsedTime(start, end));
  }

  destroyEvent(event: bigint): void {
    this.call('cuEventDestroy_v2', (lib) => lib.cuEventDestroy_v2(event));
  }

  /** Makes work enqueued on `stream` from now on wait for the last record of `event`. */
  waitEvent(stream: bigint, event: bigint): void {
    this.call('cuStreamWaitEvent', (lib) => lib.cuStreamWaitEvent(stream, event, 0));
  }

  // ------------------------------------------------------------------- graphs

  /**
   * Captures what `enqueue` puts on `stream` into a CUDA graph and returns
   * the instantiated graph. The capture always ends, also when `enqueue`
   * throws, so the stream never stays in capture mode.
   */
  capture(stream: bigint, enqueue: () => void): bigint {
    this.activate();
    this.check(
      'cuStreamBeginCapture_v2',
      this.lib.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED),
    );
    let failure: unknown;
    const kernels: string[] = [];
    this.capturing = kernels;
    try {
      enqueue();
    } catch (error) {
      failure = error;
    } finally {
      this.capturing = undefined;
    }
    const ended = this.lib.cuStreamEndCapture(stream);
    if (failure !== undefined) {
      if (ended.status === CUDA_SUCCESS && ended.value !== 0n) this.lib.cuGraphDestroy(ended.value);
      throw failure;
    }
    const graph = this.value('cuStreamEndCapture', ended);
    try {
      const exec = this.value('cuGraphInstantiateWithFlags', this.lib.cuGraphInstantiateWithFlags(graph, 0));
      // Frozen: every launch of the graph notes this very list as in flight.
      this.#graphKernels.set(exec, Object.freeze(kernels));
      return exec;
    } finally {
      // The executable graph does not need its template any more.
      this.lib.cuGraphDestroy(graph);
    }
  }

  launchGraph(exec: bigint, stream: bigint): void {
    this.activate();
    this.check('cuGraphLaunch', this.lib.cuGraphLaunch(exec, stream));
    this.enqueued(this.#graphKernels.get(exec) ?? []);
  }

  destroyGraph(exec: bigint): void {
    this.#graphKernels.delete(exec);
    this.call('cuGraphExecDestroy', (lib) => lib.cuGraphExecDestroy(exec));
  }
}
