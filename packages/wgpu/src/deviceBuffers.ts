import { type AllocatorStats, CachingAllocator, type DeviceBlock, OutOfMemoryError } from '@rayo/core';
import { STORAGE_USAGE } from './buffers.js';
import type { DeviceMemory } from './memory.js';
import type { GPUBuffer } from './webgpuTypes.js';

/**
 * The storage buffers of tensors and kernels' scratch, through core's caching
 * allocator without splitting: a block is a whole GPUBuffer of its size
 * class. Sub-allocating inside a buffer would work for bindings (they take
 * offsets, and tensors already carry one), but WebGPU refuses an allocation
 * asynchronously, per buffer, and a refused tensor is recovered by creating
 * its own buffer again (DeviceMemory): a buffer shared by many tensors would
 * spoil them all with one refusal.
 */
export class DeviceBuffers {
  readonly #allocator: CachingAllocator<GPUBuffer>;
  readonly #blocks = new WeakMap<GPUBuffer, DeviceBlock<GPUBuffer>>();
  readonly #usage = STORAGE_USAGE();
  #tensorBuffers = 0;
  #scratchBuffers = 0;

  constructor(
    private readonly memory: DeviceMemory,
    maxCachedBytes: number,
  ) {
    this.#allocator = new CachingAllocator<GPUBuffer>(
      {
        allocate: (bytes, api) => this.#create(bytes, api),
        release: (buffers) => {
          for (const b of buffers) memory.destroy(b);
        },
        // A refused buffer is invalid; while memory is short, freed memory goes back to the device.
        cacheable: (buffer) => !memory.failed(buffer) && !memory.short,
      },
      { splitting: false, maxCachedBytes },
    );
    memory.onShortage(() => this.#allocator.emptyCache());
  }

  /** GPU buffers created for tensors, and for scratch. */
  get created(): { readonly tensors: number; readonly scratch: number } {
    return { tensors: this.#tensorBuffers, scratch: this.#scratchBuffers };
  }

  stats(): AllocatorStats {
    return this.#allocator.stats();
  }

  /** A buffer of at least `bytes`; `api` is the call named if it cannot be had ('scratch' for kernels' scratch). */
  acquire(bytes: number, api = 'allocate'): GPUBuffer {
    const max = this.memory.device.limits.maxBufferSize;
    if (bytes > max) {
      throw new OutOfMemoryError(
        `${api === 'scratch' ? 'scratch' : 'a tensor'} larger than the device allows`,
        {
          operation: api,
          expected: `<= ${max} bytes (maxBufferSize)`,
          actual: `${bytes} bytes`,
        },
      );
    }
    const block = this.#allocator.allocate(bytes, api);
    this.#blocks.set(block.handle, block);
    return block.handle;
  }

  release(buffer: GPUBuffer): void {
    const block = this.#blocks.get(buffer);
    if (block) this.#allocator.free(block);
  }

  /** Takes these idle buffers back, all or none (a replay of a recording): false if one is in use. */
  reclaim(buffers: readonly GPUBuffer[]): boolean {
    const blocks = buffers.map((b) => this.#blocks.get(b));
    if (blocks.some((b) => b === undefined)) return false;
    return this.#allocator.reclaim(blocks as DeviceBlock<GPUBuffer>[]);
  }

  /**
   * A new tensor's buffer holds nothing yet: if the device refuses it, it
   * may be created again (see DeviceMemory.retriable), and the tensor's
   * storage and the allocator's block move to the replacement.
   */
  retriable(storage: { buffer: GPUBuffer }): void {
    this.memory.retriable(storage.buffer, (replacement) => {
      const block = this.#blocks.get(storage.buffer);
      if (block) {
        this.#allocator.replaceSegment(block, replacement);
        this.#blocks.set(replacement, block);
      }
      storage.buffer = replacement;
    });
  }

  /** Destroys every idle buffer. */
  emptyCache(): void {
    this.#allocator.emptyCache();
  }

  /** The allocator's peaks start again from what is in use and held now. */
  resetPeaks(): void {
    this.#allocator.resetPeaks();
  }

  #create(bytes: number, api: string): GPUBuffer {
    const scratch = api === 'scratch';
    const label = scratch ? 'rayo scratch' : 'rayo tensor';
    const buffer = this.memory.create({ label, size: bytes, usage: this.#usage }, api);
    if (scratch) this.#scratchBuffers++;
    else this.#tensorBuffers++;
    return buffer;
  }
}
