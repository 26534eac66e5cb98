import {
  type CallRecorder,
  InvalidArgumentError,
  type KernelIO,
  RecordingBatch,
  ScratchArena,
  type Tensor,
} from '@rayo/core';
import type { CudaDriver, DeviceCommand } from './driver/driver.js';
import type { DeviceBuffer } from './driver/pool.js';

/** One validated kernel call, recorded as device commands. */
export interface RecordedCall {
  readonly outputs: Tensor[];
  /** Outputs allocated for this call (not given, not in place). */
  readonly fresh: readonly Tensor[];
  readonly io: KernelIO;
  readonly commands: readonly DeviceCommand[];
  readonly scratch: readonly DeviceBuffer[];
}

/** What a batch needs of its backend, in one seam: recording calls, and CUDA graphs on its stream. */
export interface GraphCommands extends CallRecorder<RecordedCall> {
  checkAlive(api: string): void;
  /** Captures commands into a CUDA graph on the backend's stream and instantiates it. */
  captureGraph(commands: readonly DeviceCommand[]): bigint;
  launchGraph(exec: bigint): void;
  destroyGraph(exec: bigint): void;
  /** Returns scratch memory to the pool (stream-ordered reuse). */
  releaseScratch(buffers: readonly DeviceBuffer[]): void;
  /** The driver whose allocator the batch's scratch arena draws on. */
  readonly driver: CudaDriver;
  /** Runs `record` with its kernels' scratch taken from `arena`. */
  recordWithScratch<T>(arena: ScratchArena<DeviceBuffer>, record: () => T): T;
  sync(): Promise<void>;
}

/** A scratch arena and how many live batches record with it (`BatchOptions.scratchFrom`). */
interface SharedScratch {
  readonly arena: ScratchArena<DeviceBuffer>;
  users: number;
}

/** What a batch holds on the device, shared with its finalizer (which must not see the batch). */
interface BatchResources {
  exec: bigint | undefined;
  readonly scratch: SharedScratch;
  released: boolean;
}

function releaseBatch(graphs: GraphCommands, resources: BatchResources): void {
  const exec = resources.exec;
  resources.exec = undefined;
  if (exec !== undefined) graphs.destroyGraph(exec);
  if (resources.released) return;
  resources.released = true;
  // The last batch recording with the arena gives its memory back.
  if (--resources.scratch.users === 0) resources.scratch.arena.clear();
}

// Batches that are dropped without dispose() give their graph and scratch
// memory back when collected.
const batches = new FinalizationRegistry<{ graphs: GraphCommands; resources: BatchResources }>(
  ({ graphs, resources }) => {
    try {
      releaseBatch(graphs, resources);
    } catch {
      // A finalizer has no caller to report to; the context release frees it all.
    }
  },
);

/**
 * Records kernels; the first submit captures all of them into a CUDA graph on
 * the backend's stream, and every submit launches that graph and waits for it
 * (so a second submit replays the work). Recording more after a submit makes
 * the next submit capture again.
 */
export class CudaCommandBatch extends RecordingBatch<RecordedCall> {
  readonly #commands: DeviceCommand[] = [];
  readonly #resources: BatchResources;

  // The calls' scratch comes from one arena, reused by each call in turn
  // (the graph runs them in order) and kept for replays until dispose; with
  // `scratchFrom`, the other batch's arena (they run one after another on
  // the backend's stream, never together).
  constructor(
    private readonly graphs: GraphCommands,
    scratchFrom?: CudaCommandBatch,
  ) {
    if (scratchFrom && scratchFrom.graphs !== graphs) {
      throw new InvalidArgumentError('a batch shares scratch only with a batch of its backend', {
        operation: 'batch',
        argument: 'scratchFrom',
        expected: 'a batch of this backend',
        actual: 'a batch of another backend',
      });
    }
    const scratch = (scratchFrom ? scratchFrom.#resources.scratch : undefined) ?? {
      arena: new ScratchArena<DeviceBuffer>({
        acquire: (bytes) => graphs.driver.alloc(bytes),
        release: (b) => graphs.releaseScratch([b]),
        bytesOf: (b) => b.bytes,
      }),
      users: 0,
    };
    scratch.users++;
    super({ record: (...args) => graphs.recordWithScratch(scratch.arena, () => graphs.record(...args)) });
    this.#resources = { exec: undefined, scratch, released: false };
    batches.register(this, { graphs, resources: this.#resources }, this);
  }

  /** Bytes of scratch memory the batch holds for its calls (with the batches it shares them with). */
  get scratchBytes(): number {
    return this.#resources.scratch.arena.bytes;
  }

  protected keep(call: RecordedCall): void {
    this.#commands.push(...call.commands);
    const stale = this.#resources.exec;
    this.#resources.exec = undefined;
    if (stale !== undefined) this.graphs.destroyGraph(stale);
  }

  async submit(): Promise<void> {
    this.graphs.checkAlive('submit');
    this.calls.checkSubmittable();
    // Kernels of empty tensors record nothing; there is no graph to make of nothing.
    const launched = this.#commands.length > 0;
    if (launched) {
      this.#resources.exec ??= this.graphs.captureGraph(this.#commands);
      this.graphs.launchGraph(this.#resources.exec);
    }
    // Enqueued: reads of the outputs are ordered after this work now.
    this.calls.submitted();
    // A graph just launched is not done yet: the first poll waits for the
    // next turn, and the caller gets its promise a driver call sooner.
    if (launched) await new Promise<void>((resolve) => setImmediate(resolve));
    await this.graphs.sync();
  }

  /** Destroys the graph and returns the batch's scratch memory; the batch is empty afterwards. */
  dispose(): void {
    batches.unregister(this);
    this.#commands.length = 0;
    this.calls.clear();
    releaseBatch(this.graphs, this.#resources);
  }
}
