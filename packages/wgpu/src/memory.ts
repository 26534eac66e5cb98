import { OutOfMemoryError } from '@rayo/core';

interface Failure {
  readonly api: string;
  readonly label: string;
  readonly bytes: number;
  readonly message: string;
}

/**
 * Creates every large GPU buffer of a backend: against an optional byte
 * budget, so that an allocation beyond it fails at the allocating call, and
 * inside an out-of-memory error scope, so that what the device refuses is
 * reported by the next `read`, `sync` or `submit` as an OutOfMemoryError
 * naming the allocation. WebGPU reports allocation failures only
 * asynchronously; without a budget they cannot be thrown at the call.
 */
export class DeviceMemory {
  readonly #pending = new Set<Promise<void>>();
  readonly #failures: Failure[] = [];
  readonly #failed = new WeakSet<GPUBuffer>();
  readonly #reclaimers: (() => void)[] = [];
  #used = 0;
  // Set by a refused allocation, until an allocation after it is known to
  // have succeeded: meanwhile idle buffers are destroyed instead of pooled,
  // so that memory the caller frees reaches the device again.
  #short = false;
  #allocatedWhileShort = 0;

  constructor(
    readonly device: GPUDevice,
    readonly budgetBytes: number,
  ) {}

  /** Bytes of live buffers created here (in use or pooled). */
  get usedBytes(): number {
    return this.#used;
  }

  /** Whether the device refused an allocation recently: pools should not keep idle buffers. */
  get short(): boolean {
    return this.#short;
  }

  /** Registers a way to destroy buffers kept for reuse, run when memory is short. */
  onShortage(reclaim: () => void): void {
    this.#reclaimers.push(reclaim);
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
          kernel: api,
          expected: `<= ${Math.max(0, this.budgetBytes - this.#used)} bytes (${this.#used} of the ${this.budgetBytes}-byte budget in use)`,
          actual: `${bytes} bytes`,
        },
      );
    }
    this.device.pushErrorScope('out-of-memory');
    const buffer = this.device.createBuffer(descriptor);
    const scope = this.device.popErrorScope().then(
      (error) => {
        if (!error) return;
        this.#failed.add(buffer);
        this.#short = true;
        this.#allocatedWhileShort = 0;
        this.#failures.push({ api, label: descriptor.label ?? 'buffer', bytes, message: error.message });
      },
      // A lost device rejects the scope; the loss is reported on its own.
      () => {},
    );
    this.#pending.add(scope);
    void scope.finally(() => this.#pending.delete(scope));
    this.#used += bytes;
    return buffer;
  }

  destroy(buffer: GPUBuffer): void {
    this.#used -= buffer.size;
    buffer.destroy();
  }

  /** Whether the device refused this buffer (known once its scope resolved). */
  failed(buffer: GPUBuffer): boolean {
    return this.#failed.has(buffer);
  }

  /**
   * Waits for the allocations' error scopes and returns an OutOfMemoryError
   * for those the device refused since the last call, if any.
   */
  async takeFailure(reportedBy: string): Promise<OutOfMemoryError | undefined> {
    while (this.#pending.size > 0) await Promise.all(this.#pending);
    const failures = this.#failures.splice(0);
    if (failures.length === 0) {
      if (this.#allocatedWhileShort > 0) this.#short = false;
      return undefined;
    }
    const first = failures[0]!;
    const total = failures.reduce((sum, f) => sum + f.bytes, 0);
    const more =
      failures.length > 1 ? ` and ${failures.length - 1} later allocation(s), ${total} bytes in all` : '';
    return new OutOfMemoryError(
      `the device could not allocate ${first.label} of ${first.bytes} bytes${more} (reported by ${reportedBy}: ${first.message}); dispose tensors and allocate again`,
      {
        kernel: first.api,
        expected: `${first.bytes} bytes free on the device`,
        actual: 'out of memory',
      },
    );
  }
}
