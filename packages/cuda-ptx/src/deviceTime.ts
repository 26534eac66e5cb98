import type { KernelRunner } from '@rayo/core';
import type { GraphCommands, RecordedCall } from './batch.js';
import type { CudaDriver } from './driver/driver.js';

interface EventPair {
  readonly start: bigint;
  readonly end: bigint;
}

/**
 * Device time between CUDA events around one launch of a CUDA graph of the
 * work. A pair of events per measurement in flight, reused afterwards.
 */
export class EventTimer {
  readonly #timers: EventPair[] = [];
  readonly #free: EventPair[] = [];

  constructor(
    private readonly driver: CudaDriver,
    private readonly stream: bigint,
  ) {}

  /**
   * Milliseconds of the kernels `work` runs (recorded through `graphs`), back
   * to back as a batch's replay runs them, with no gaps for the host to
   * launch each one. Tensors disposed inside `work` are fine: the graph runs
   * the kernels in the order an eager run would, so memory handed out again
   * is reused in stream order.
   */
  async measure(graphs: GraphCommands, work: (runner: KernelRunner) => void): Promise<number> {
    const { driver, stream } = this;
    const calls: RecordedCall[] = [];
    let exec: bigint | undefined;
    const timer = this.#free.pop() ?? this.#newTimer();
    try {
      work({
        run: (spec, inputs, attrs, options) => {
          const call = graphs.record(spec, inputs, attrs, options);
          calls.push(call);
          return call.outputs;
        },
      });
      const commands = calls.flatMap((c) => c.commands);
      if (commands.length > 0) exec = graphs.captureGraph(commands);
      driver.recordEvent(timer.start, stream);
      if (exec !== undefined) graphs.launchGraph(exec);
      driver.recordEvent(timer.end, stream);
      await driver.waitIdle(stream);
      return driver.elapsedMs(timer.start, timer.end);
    } finally {
      this.#free.push(timer);
      if (exec !== undefined) graphs.destroyGraph(exec);
      for (const call of calls) graphs.releaseScratch(call.scratch);
    }
  }

  #newTimer(): EventPair {
    const timer = { start: this.driver.createEvent(), end: this.driver.createEvent() };
    this.#timers.push(timer);
    return timer;
  }

  /** Destroys the events; the caller has synchronized the stream. */
  destroy(): void {
    for (const timer of this.#timers) {
      this.driver.destroyEvent(timer.start);
      this.driver.destroyEvent(timer.end);
    }
  }

  /** Forgets the events (released with the context). */
  clear(): void {
    this.#timers.length = 0;
    this.#free.length = 0;
  }
}
