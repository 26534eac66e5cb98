import { OutOfMemoryError } from '@rayo/core';
import type { GPUBuffer, GPUBufferDescriptor, GPUDevice } from './webgpuTypes.js';

interface Failure {
  readonly api: string;
  readonly label: string;
  readonly bytes: number;
  readonly message: string;
  readonly buffer: GPUBuffer;
  readonly descriptor: GPUBufferDescriptor;
  /** Whether freed memory was still on its way back to the driver when the buffer was created. */
  readonly freesPending: boolean;
}

/** How a backend got memory back after the device refused an allocation. */
export interface MemoryRecovery {
  /** Times freed memory was pushed back to the driver (queue rounds awaited). */
  readonly releases: number;
  /** Submit-and-wait rounds those releases took. */
  readonly waits: number;
  /** Refused allocations created again once the frees had reached the driver. */
  readonly retried: number;
  /** Retried allocations the device then granted. */
  readonly recovered: number;
}

/** Bytes of GPU buffers a backend holds, its budget, and how memory was got back after refusals. */
export interface MemoryUsage {
  readonly usedBytes: number;
  readonly budgetBytes: number;
  readonly recovery: MemoryRecovery;
}

/**
 * Submits a trivial command buffer and resolves when the GPU finished it.
 * Dawn frees a destroyed buffer's memory only once a submission made after
 * the destroy has completed and the device has been ticked.
 */
export type QueueRound = () => Promise<void>;

// Two rounds: the first completes the serial the frees wait for; the second
// makes sure the device was ticked past it before the callback ran.
const RELEASE_ROUNDS = 2;
// Attempts at a refused allocation after releasing frees: bounded, so that a
// device that is really full reports its OutOfMemoryError promptly.
const MAX_RETRIES = 3;

/**
 * Creates every large GPU buffer of a backend: against an optional byte
 * budget, so that an allocation beyond it fails at the allocating call, and
 * inside an out-of-memory error scope, so that what the device refuses is
 * reported by the next `read`, `sync` or `submit` as an OutOfMemoryError
 * naming the allocation. WebGPU reports allocation failures only
 * asynchronously; without a budget they cannot be thrown at the call.
 *
 * `GPUBuffer.destroy()` does not give memory back at once: Dawn frees it when
 * a submission made after the destroy has completed and the device ticks. So
 * after a refusal, frees are pushed through the queue (`release`) before the
 * next report, and a refused allocation that nothing has used yet is created
 * again once they have reached the driver (`takeFailure`).
 */
export class DeviceMemory {
  readonly #pending = new Set<Promise<void>>();
  readonly #failures: Failure[] = [];
  readonly #failed = new WeakSet<GPUBuffer>();
  readonly #unsettled = new WeakSet<GPUBuffer>();
  readonly #retriable = new Map<GPUBuffer, (replacement: GPUBuffer) => void>();
  readonly #reclaimers: (() => void)[] = [];
  #round: QueueRound | undefined;
  #used = 0;
  // Bytes destroyed since frees were last pushed through the queue.
  #unreleased = 0;
  // Set by a refused allocation, until an allocation after it is known to
  // have succeeded: meanwhile idle buffers are destroyed instead of pooled,
  // so that memory the caller frees reaches the device again.
  #short = false;
  #allocatedWhileShort = 0;
  #recovery = { releases: 0, waits: 0, retried: 0, recovered: 0 };

  constructor(
    readonly device: GPUDevice,
    readonly budgetBytes: number,
  ) {}

  /** Bytes of live buffers created here (in use or pooled). */
  get usedBytes(): number {
    return this.#used;
  }

  /** Bytes destroyed that may not have been returned to the driver yet. */
  get unreleasedBytes(): number {
    return this.#unreleased;
  }

  /** Whether the device refused an allocation recently: pools should not keep idle buffers. */
  get short(): boolean {
    return this.#short;
  }

  get recovery(): MemoryRecovery {
    return { ...this.#recovery };
  }

  /** Bytes held now, the budget, and how memory was got back after refusals. */
  usage(): MemoryUsage {
    return { usedBytes: this.#used, budgetBytes: this.budgetBytes, recovery: this.recovery };
  }

  /** One line on how memory was got back after refusals, for reports. */
  describeRecovery(): string {
    const r = this.#recovery;
    return `${r.releases} release(s) of freed memory in ${r.waits} queue wait(s); ${r.retried} refused allocation(s) retried, ${r.recovered} granted`;
  }

  /** Throws for a tensor's buffer that the device refused: it holds no memory. */
  checkGranted(buffer: GPUBuffer, describe: () => string): void {
    if (!this.#failed.has(buffer)) return;
    throw new OutOfMemoryError('the device could not allocate this tensor; it holds no memory', {
      expected: 'a tensor whose allocation succeeded',
      actual: `${describe()} (allocation refused)`,
    });
  }

  /** Registers a way to destroy buffers kept for reuse, run when memory is short. */
  onShortage(reclaim: () => void): void {
    this.#reclaimers.push(reclaim);
  }

  /** How to push a round of work through the queue; without one, frees are left to Dawn. */
  setQueueRound(round: QueueRound): void {
    this.#round = round;
  }

  create(descriptor: GPUBufferDescriptor, api: string): GPUBuffer {
    const bytes = descriptor.size;
    if (this.#short || this.#used + bytes > this.budgetBytes) {
      for (const reclaim of this.#reclaimers) reclaim();
    }
    if (this.#short) this.#allocatedWhileShort++;
    if (this.#used + bytes > this.budgetBytes) {
      throw new OutOfMemoryError(
        `allocating ${descriptor.label ?? 'a buffer'} would exceed the memory budget`,
        {
          operation: api,
          expected: `<= ${Math.max(0, this.budgetBytes - this.#used)} bytes (${this.#used} of the ${this.budgetBytes}-byte budget in use)`,
          actual: `${bytes} bytes`,
        },
      );
    }
    const freesPending = this.#unreleased > 0;
    this.device.pushErrorScope('out-of-memory');
    const buffer = this.device.createBuffer(descriptor);
    this.#unsettled.add(buffer);
    const scope = this.device.popErrorScope().then(
      (error) => {
        this.#unsettled.delete(buffer);
        if (!error) {
          this.#retriable.delete(buffer);
          return;
        }
        this.#failed.add(buffer);
        this.#short = true;
        this.#allocatedWhileShort = 0;
        const label = descriptor.label ?? 'buffer';
        this.#failures.push({ api, label, bytes, message: error.message, buffer, descriptor, freesPending });
      },
      // A lost device rejects the scope; the loss is reported on its own.
      () => {
        this.#unsettled.delete(buffer);
        this.#retriable.delete(buffer);
      },
    );
    this.#pending.add(scope);
    void scope.finally(() => this.#pending.delete(scope));
    this.#used += bytes;
    return buffer;
  }

  /**
   * Marks a just-created buffer whose contents do not matter yet (a fresh
   * `empty` or `zeros` tensor: a new WebGPU buffer is zeroed): if the device
   * refuses it, it may be created again and handed over through `replace`,
   * until `touch` says something used it.
   */
  retriable(buffer: GPUBuffer, replace: (replacement: GPUBuffer) => void): void {
    if (this.#unsettled.has(buffer) || this.#failed.has(buffer)) this.#retriable.set(buffer, replace);
  }

  /** The buffer was bound, written or handed out: recreating it would lose that work. */
  touch(buffer: GPUBuffer): void {
    if (this.#retriable.size > 0) this.#retriable.delete(buffer);
  }

  destroy(buffer: GPUBuffer): void {
    this.#used -= buffer.size;
    this.#retriable.delete(buffer);
    if (!this.#failed.has(buffer)) this.#unreleased += buffer.size;
    buffer.destroy();
  }

  /** Whether the device refused this buffer (known once its scope resolved). */
  failed(buffer: GPUBuffer): boolean {
    return this.#failed.has(buffer);
  }

  /**
   * After a refusal, pushes destroyed buffers' memory back to the driver:
   * pooled buffers are destroyed, then a few queue rounds are awaited so
   * that Dawn's deferred frees run. Returns the rounds awaited (0 when
   * memory is not short or nothing was freed).
   */
  async release(): Promise<number> {
    if (!this.#short) return 0;
    for (const reclaim of this.#reclaimers) reclaim();
    return this.#release();
  }

  async #release(): Promise<number> {
    if (this.#unreleased === 0 || !this.#round) return 0;
    this.#recovery.releases++;
    // Frees made while the rounds run are covered by a later release.
    this.#unreleased = 0;
    for (let i = 0; i < RELEASE_ROUNDS; i++) {
      await this.#round();
      this.#recovery.waits++;
    }
    return RELEASE_ROUNDS;
  }

  /**
   * Waits for the allocations' error scopes and returns an OutOfMemoryError
   * for those the device refused since the last call, if any. A refused
   * buffer marked retriable, refused while frees were still on their way to
   * the driver (or with frees made since), is created again after releasing
   * them, up to a bounded number of times; `retried` counts those that the
   * device then granted, whose consequences (errors of work that used the
   * refused buffer) are theirs to discard.
   */
  async takeFailure(reportedBy: string): Promise<OutOfMemoryError | undefined> {
    return (await this.takeReport(reportedBy)).refused;
  }

  /** `takeFailure`, with how many refused allocations were granted on a retry. */
  async takeReport(reportedBy: string): Promise<{ refused?: OutOfMemoryError; retried: number }> {
    while (this.#pending.size > 0) await Promise.all(this.#pending);
    let failures = this.#failures.splice(0);
    const retried: Failure[] = [];
    for (let attempt = 0; attempt < MAX_RETRIES; attempt++) {
      const candidates = failures.filter(
        (f) => this.#retriable.has(f.buffer) && (f.freesPending || this.#unreleased > 0 || attempt > 0),
      );
      if (candidates.length === 0) break;
      if (attempt === 0) for (const reclaim of this.#reclaimers) reclaim();
      // Nothing freed since the last attempt: another one would be refused too.
      if ((await this.#release()) === 0 && attempt > 0) break;
      const granted = await Promise.all(candidates.map((f) => this.#recreate(f)));
      failures = failures.filter((f) => !granted[candidates.indexOf(f)]);
      candidates.forEach((f, i) => {
        if (granted[i]) retried.push(f);
      });
    }
    if (failures.length === 0) {
      if (this.#allocatedWhileShort > 0 || retried.length > 0) this.#short = false;
      return { retried: retried.length };
    }
    // Whatever was freed reaches the driver before the caller allocates again.
    await this.#release();
    const first = failures[0]!;
    const total = failures.reduce((sum, f) => sum + f.bytes, 0);
    const more =
      failures.length > 1 ? ` and ${failures.length - 1} later allocation(s), ${total} bytes in all` : '';
    const rec = this.#recovery;
    const tried =
      rec.waits > 0
        ? `; ${rec.releases} release(s) of freed memory (${rec.waits} queue waits) and ${rec.retried} retried allocation(s) so far`
        : '';
    const refused = new OutOfMemoryError(
      `the device could not allocate ${first.label} of ${first.bytes} bytes${more} (reported by ${reportedBy}: ${first.message}${tried}); dispose tensors and allocate again`,
      {
        operation: first.api,
        expected: `${first.bytes} bytes free on the device`,
        actual: 'out of memory',
      },
    );
    return { refused, retried: retried.length };
  }

  /** Creates a refused buffer again; true (and the old one destroyed) if the device granted it. */
  async #recreate(failure: Failure): Promise<boolean> {
    if (!this.#retriable.has(failure.buffer)) return false;
    this.#recovery.retried++;
    this.device.pushErrorScope('out-of-memory');
    const buffer = this.device.createBuffer(failure.descriptor);
    // A lost device rejects the scope; the loss is reported on its own.
    const error = await this.device.popErrorScope().catch(() => 'lost');
    // Disposed, bound or written while the scope was pending: too late to swap.
    const replace = this.#retriable.get(failure.buffer);
    if (error || !replace) {
      if (!error) this.#unreleased += buffer.size;
      buffer.destroy();
      return false;
    }
    this.#used += buffer.size;
    this.destroy(failure.buffer);
    replace(buffer);
    this.#recovery.recovered++;
    return true;
  }
}
