import { OutOfMemoryError, poolBucketBytes, SizeBuckets } from '@rayo/core';
import type { DeviceMemory } from './memory.js';
import type { GPUBuffer, GPUBufferUsageFlags, GPUBufferUsageName } from './webgpuTypes.js';

// GPUBufferUsage is a global only once Dawn (or a browser) is loaded, so the
// flags are computed when a pool is made.
export function usageFlags(...names: GPUBufferUsageName[]): number {
  return names.reduce((flags, n) => flags | (GPUBufferUsage[n] as number), 0);
}

/** The usage of tensors' and scratch buffers (see DeviceBuffers). */
export const STORAGE_USAGE = (): number => usageFlags('STORAGE', 'COPY_SRC', 'COPY_DST');

/**
 * Reuses buffers of one usage by size bucket (the staging buffers of reads),
 * so steady-state work allocates nothing. `created` counts real allocations.
 */
export class BufferPool {
  readonly #free = new SizeBuckets<GPUBuffer>();
  #created = 0;

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
    return this.#free.pooledBytes;
  }

  /** A buffer of at least `bytes`; `api` is the call named if it cannot be had. */
  acquire(bytes: number, api = 'allocate'): GPUBuffer {
    const size = poolBucketBytes(bytes);
    const reused = this.#free.take(size);
    if (reused) return reused;
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
    this.#free.put(buffer, buffer.size);
  }

  /** Destroys every pooled buffer. */
  trim(): void {
    for (const b of this.#free.drain()) this.memory.destroy(b);
  }
}
