import type { CUresult } from '@rayo/cuda-ptx';
import { FakeLibCuda } from '../fakeLibCuda.js';

const NOT_READY = 600;

/**
 * Work on a fake stream that may have to wait: a collective is done only once
 * every rank has reached it. `advance()` runs as much as it can and says
 * whether the item is finished.
 */
export interface StreamItem {
  advance(): boolean;
}

/**
 * A FakeLibCuda whose streams keep their order around collectives: while a
 * collective waits for the other ranks, later work on its stream (launches,
 * copies, fills, event records) is queued and runs when the collective is
 * done, as on a GPU; the stream and those events report NOT_READY meanwhile.
 * Work on an idle stream runs at once, as in FakeLibCuda; a graph launch
 * waits like the rest, but a kernel launched eagerly behind a waiting
 * collective is refused (its parameter block is not the fake's to keep).
 * `cuStreamWaitEvent` holds a stream's later work until the last record of
 * the event (made before the wait) has run on its own stream, so work of two
 * streams (a backend's and a communicator's own) is ordered as on a GPU.
 */
export class CollectiveLibCuda extends FakeLibCuda {
  readonly #queues = new Map<bigint, StreamItem[]>();
  /** Records of events still queued behind a waiting item, oldest first. */
  readonly #unrecordedEvents = new Map<bigint, { done: boolean }[]>();
  readonly #capturing = new Set<bigint>();
  readonly #draining = new Set<bigint>();

  /** Whether `stream` is recording a graph (collectives are not captured by the fake). */
  isCapturing(stream: bigint): boolean {
    return this.#capturing.has(stream);
  }

  /** Puts a collective (or any waiting item) on the stream and runs what can run. */
  enqueue(stream: bigint, item: StreamItem): void {
    const queue = this.#queues.get(stream) ?? [];
    this.#queues.set(stream, queue);
    queue.push(item);
    this.drain(stream);
  }

  /** Runs the stream's queue up to the first item that still waits. */
  drain(stream: bigint): void {
    // A collective completing inside a drain drains its streams again; the running loop already covers this one.
    if (this.#draining.has(stream)) return;
    this.#draining.add(stream);
    try {
      const queue = this.#queues.get(stream);
      while (queue && queue.length > 0 && queue[0]!.advance()) queue.shift();
    } finally {
      this.#draining.delete(stream);
    }
  }

  #busy(stream: bigint): boolean {
    return (this.#queues.get(stream)?.length ?? 0) > 0;
  }

  /** Runs `work` now on an idle (or capturing) stream, else after what the stream is waiting for. */
  #ordered(stream: bigint, work: () => CUresult): CUresult {
    // A capturing stream records work into the graph instead of running it: nothing to wait for.
    if (!this.#busy(stream) || this.#capturing.has(stream)) return work();
    this.#queues.get(stream)!.push({
      advance: () => {
        work();
        return true;
      },
    });
    return 0;
  }

  override cuStreamQuery(stream: bigint): CUresult {
    const status = super.cuStreamQuery(stream);
    return status === 0 && this.#busy(stream) ? NOT_READY : status;
  }

  override cuEventRecord(event: bigint, stream: bigint): CUresult {
    if (!this.#busy(stream) || this.#capturing.has(stream)) return super.cuEventRecord(event, stream);
    const record = { done: false };
    const pending = this.#unrecordedEvents.get(event) ?? [];
    this.#unrecordedEvents.set(event, pending);
    pending.push(record);
    return this.#ordered(stream, () => {
      record.done = true;
      pending.splice(pending.indexOf(record), 1);
      if (pending.length === 0) this.#unrecordedEvents.delete(event);
      const status = super.cuEventRecord(event, stream);
      // Streams waiting for this record may go on.
      for (const other of this.#queues.keys()) if (other !== stream) this.drain(other);
      return status;
    });
  }

  override cuEventQuery(event: bigint): CUresult {
    const status = super.cuEventQuery(event);
    return status === 0 && this.#unrecordedEvents.has(event) ? NOT_READY : status;
  }

  override cuStreamWaitEvent(stream: bigint, event: bigint, flags: number): CUresult {
    const status = super.cuStreamWaitEvent(stream, event, flags);
    // The wait is for the event's last record made before it; one still queued holds the stream.
    const record = this.#unrecordedEvents.get(event)?.at(-1);
    if (status !== 0 || !record || this.#capturing.has(stream)) return status;
    this.enqueue(stream, { advance: () => record.done });
    return 0;
  }

  override cuLaunchKernel(...launch: Parameters<FakeLibCuda['cuLaunchKernel']>): CUresult {
    const stream = launch[8];
    // The driver reuses the parameter block after the call, so a launch cannot wait in a queue.
    if (this.#busy(stream) && !this.#capturing.has(stream)) {
      throw new Error('the fake cannot queue a launch behind a collective that waits for other ranks');
    }
    return super.cuLaunchKernel(...launch);
  }

  override cuMemcpyHtoDAsync_v2(dst: bigint, src: ArrayBufferView, bytes: number, stream: bigint): CUresult {
    // Pageable host data is staged at the call, as the driver does.
    const staged = new Uint8Array(src.buffer, src.byteOffset, bytes).slice();
    return this.#ordered(stream, () => super.cuMemcpyHtoDAsync_v2(dst, staged, bytes, stream));
  }

  override cuMemcpyDtoHAsync_v2(dst: ArrayBufferView, src: bigint, bytes: number, stream: bigint): CUresult {
    return this.#ordered(stream, () => super.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream));
  }

  override cuMemcpyDtoDAsync_v2(dst: bigint, src: bigint, bytes: number, stream: bigint): CUresult {
    return this.#ordered(stream, () => super.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream));
  }

  override cuMemsetD32Async(dst: bigint, value: number, count: number, stream: bigint): CUresult {
    return this.#ordered(stream, () => super.cuMemsetD32Async(dst, value, count, stream));
  }

  override cuGraphLaunch(exec: bigint, stream: bigint): CUresult {
    return this.#ordered(stream, () => super.cuGraphLaunch(exec, stream));
  }

  override cuStreamBeginCapture_v2(stream: bigint, mode: number): CUresult {
    const status = super.cuStreamBeginCapture_v2(stream, mode);
    if (status === 0) this.#capturing.add(stream);
    return status;
  }

  override cuStreamEndCapture(stream: bigint): { status: CUresult; value: bigint } {
    this.#capturing.delete(stream);
    return super.cuStreamEndCapture(stream);
  }
}
