import { poolBucketBytes, SizeBuckets } from '@rayo/core';

/** A device allocation handed out by the pool: `bytes` is its bucket size (core's poolBucketBytes), at least what was asked. */
export interface DeviceBuffer {
  readonly ptr: bigint;
  readonly bytes: number;
}

/**
 * Reuses device allocations by size bucket, so steady-state work allocates
 * nothing. Everything rayo enqueues runs on one stream, in order, so memory
 * released here may be handed out again at once: work that uses it next is
 * enqueued after the work that used it before.
 */
export class DevicePool {
  readonly #free = new SizeBuckets<bigint>();
  #created = 0;
  #reused = 0;

  constructor(
    private readonly allocate: (bytes: number) => bigint,
    private readonly release_: (ptr: bigint) => void,
  ) {}

  /** Real allocations made. */
  get created(): number {
    return this.#created;
  }

  /** Requests served from the pool. */
  get reused(): number {
    return this.#reused;
  }

  get pooledBytes(): number {
    return this.#free.pooledBytes;
  }

  acquire(bytes: number): DeviceBuffer {
    const size = poolBucketBytes(bytes);
    const ptr = this.#free.take(size);
    if (ptr !== undefined) {
      this.#reused++;
      return { ptr, bytes: size };
    }
    const fresh = this.allocate(size);
    this.#created++;
    return { ptr: fresh, bytes: size };
  }

  release(buffer: DeviceBuffer): void {
    this.#free.put(buffer.ptr, buffer.bytes);
  }

  /** Frees every pooled allocation; the caller makes sure no pending work still uses them. */
  trim(): void {
    for (const ptr of this.#free.drain()) this.release_(ptr);
  }
}
