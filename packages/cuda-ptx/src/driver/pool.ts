import { type AllocatorStats, CachingAllocator, type DeviceBlock, InvalidArgumentError } from '@rayo/core';

/**
 * A device allocation handed out by the pool: `bytes` at `ptr` (at least
 * what was asked), a block of core's caching allocator inside a larger
 * cuMemAlloc segment.
 */
export interface DeviceBuffer {
  readonly ptr: bigint;
  readonly bytes: number;
  /** The allocator's block, absent for memory the pool does not own (an imported pointer). */
  readonly block?: DeviceBlock<bigint>;
}

/**
 * Device memory through core's caching allocator, with splitting: a CUDA
 * device pointer can be offset, so blocks are carved from larger segments
 * and merged back when freed. Everything rayo enqueues runs on one stream,
 * in order, so memory released here may be handed out again at once: work
 * that uses it next is enqueued after the work that used it before.
 */
export class DevicePool {
  readonly #allocator: CachingAllocator<bigint>;
  #requests = 0;

  constructor(
    allocate: (bytes: number) => bigint,
    /** Frees idle segments; the caller orders this after the work that used them. */
    release: (ptrs: readonly bigint[]) => void,
    maxCachedBytes = Number.POSITIVE_INFINITY,
  ) {
    this.#allocator = new CachingAllocator<bigint>(
      { allocate: (bytes) => allocate(bytes), release },
      { splitting: true, maxCachedBytes },
    );
  }

  /** Real allocations made (cuMemAlloc segments). */
  get created(): number {
    return this.#allocator.stats().segmentsAllocated;
  }

  /** Requests served from memory already held. */
  get reused(): number {
    return this.#requests - this.created;
  }

  /** Bytes held but idle: what emptyCache would try to give back. */
  get pooledBytes(): number {
    const s = this.#allocator.stats();
    return s.reservedBytes - s.allocatedBytes;
  }

  stats(): AllocatorStats {
    return this.#allocator.stats();
  }

  /** The allocator's peaks start again from what is in use and held now. */
  resetPeaks(): void {
    this.#allocator.resetPeaks();
  }

  acquire(bytes: number, api = 'alloc'): DeviceBuffer {
    const block = this.#allocator.allocate(bytes, api);
    this.#requests++;
    return { ptr: block.handle + BigInt(block.offset), bytes: block.size, block };
  }

  release(buffer: DeviceBuffer): void {
    if (buffer.block) this.#allocator.free(buffer.block);
  }

  /** Frees every wholly idle segment; the caller makes sure no pending work still uses them. */
  trim(): void {
    this.#allocator.emptyCache();
  }
}

/** Throws unless `ptr` can be a device address (a non-zero bigint), naming the call. */
export function checkDevicePointer(api: string, ptr: bigint): void {
  if (typeof ptr === 'bigint' && ptr > 0n) return;
  throw new InvalidArgumentError('a device address is expected', {
    operation: api,
    argument: 'ptr',
    expected: 'a non-zero bigint device address',
    actual: String(ptr),
  });
}
