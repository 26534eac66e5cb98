import { OutOfMemoryError, poolBucketBytes } from '@rayo/core';
import type { DeviceMemory } from './memory.js';

/**
 * Reuses buffers of one usage by size bucket, so steady-state work allocates
 * nothing. `created` counts real allocations.
 */
export class BufferPool {
  readonly #free = new Map<number, GPUBuffer[]>();
  #created = 0;
  #pooledBytes = 0;

  constructor(
    private readonly memory: DeviceMemory,
    private readonly usage: GPUBufferUsageFlags,
    private readonly label: string,
  ) {
    memory.onShortage(() => this.trim());
  }

  get created(): number {
    return this.#created;
  }

  get pooledBytes(): number {
    return this.#pooledBytes;
  }

  /** A buffer of at least `bytes`; `api` is the call named if it cannot be had. */
  acquire(bytes: number, api = 'allocate'): GPUBuffer {
    const size = poolBucketBytes(bytes);
    const list = this.#free.get(size);
    const reused = list?.pop();
    if (reused) {
      this.#pooledBytes -= size;
      return reused;
    }
    const max = this.memory.device.limits.maxBufferSize;
    if (size > max) {
      throw new OutOfMemoryError(`${this.label} larger than the device allows`, {
        operation: api,
        expected: `<= ${max} bytes (maxBufferSize)`,
        actual: `${bytes} bytes`,
      });
    }
    const buffer = this.memory.create({ label: this.label, size, usage: this.usage }, api);
    this.#created++;
    return buffer;
  }

  release(buffer: GPUBuffer): void {
    // A buffer the device refused is invalid: never hand it out again. While
    // memory is short, freed memory goes back to the device.
    if (this.memory.failed(buffer) || this.memory.short) {
      this.memory.destroy(buffer);
      return;
    }
    const size = buffer.size;
    let list = this.#free.get(size);
    if (!list) {
      list = [];
      this.#free.set(size, list);
    }
    list.push(buffer);
    this.#pooledBytes += size;
  }

  /** Takes these buffers back out of the pool, all or none: false if one is in use. */
  reclaim(buffers: readonly GPUBuffer[]): boolean {
    for (const b of buffers) if (!this.#free.get(b.size)?.includes(b)) return false;
    for (const b of buffers) {
      const list = this.#free.get(b.size)!;
      list.splice(list.indexOf(b), 1);
      this.#pooledBytes -= b.size;
    }
    return true;
  }

  /** Destroys every pooled buffer. */
  trim(): void {
    for (const list of this.#free.values()) for (const b of list) this.memory.destroy(b);
    this.#free.clear();
    this.#pooledBytes = 0;
  }
}

/** Temporary buffers for multi-pass kernels; the same pool type, another usage. */
export type ScratchPool = BufferPool;
