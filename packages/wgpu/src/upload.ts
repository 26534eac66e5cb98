import { poolBucketBytes } from '@rayo/core';
import type { DeviceMemory } from './memory.js';
import type { GPUBuffer, GPUDevice } from './webgpuTypes.js';

/**
 * Host writes of at least this many bytes go through a staging buffer of our
 * own. Below it `queue.writeBuffer` is as fast or faster; above it Dawn's
 * writeBuffer allocates a fresh staging buffer per call, which on an NVIDIA
 * GPU costs far more than the copy (a 64 MiB write: about 48 ms, against
 * about 11 ms through a reused staging buffer).
 */
export const STAGED_WRITE_BYTES = 1 << 20;

/**
 * Large host-to-device writes through pooled MAP_WRITE staging buffers. A
 * staging buffer is filled while mapped, unmapped, copied on the queue, and
 * mapped again in the background (`mapAsync` waits for the copy), ready for
 * the next write of its size. Writes go in queue order with everything else
 * submitted. Small writes, and large ones while the staging buffers in use
 * and in flight fill the byte budget, take `queue.writeBuffer`.
 */
export class UploadStaging {
  readonly #ready = new Map<number, GPUBuffer[]>();
  readonly #pending = new Set<Promise<void>>();
  /** Bytes of staging buffers that exist: ready or in flight. */
  #bytes = 0;
  #created = 0;
  #disposed = false;

  private readonly device: GPUDevice;

  constructor(
    private readonly memory: DeviceMemory,
    private readonly budgetBytes: number,
  ) {
    this.device = memory.device;
    memory.onShortage(() => this.#dropReady());
  }

  /** Staging buffers created so far. */
  get created(): number {
    return this.#created;
  }

  /** Writes `data` (a multiple of 4 bytes) into `dst` at `dstOffset`. */
  write(dst: GPUBuffer, dstOffset: number, data: ArrayBufferView): void {
    const bytes = data.byteLength;
    const staging = bytes >= STAGED_WRITE_BYTES ? this.#take(bytes) : undefined;
    if (!staging) {
      this.device.queue.writeBuffer(dst, dstOffset, data.buffer, data.byteOffset, bytes);
      return;
    }
    new Uint8Array(staging.getMappedRange(0, bytes)).set(new Uint8Array(data.buffer, data.byteOffset, bytes));
    staging.unmap();
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(staging, 0, dst, dstOffset, bytes);
    this.device.queue.submit([encoder.finish()]);
    const remapped = staging.mapAsync(GPUMapMode.WRITE).then(
      () => this.#giveBack(staging),
      // A lost or destroyed device: the buffer is gone with it.
      () => this.#drop(staging),
    );
    this.#pending.add(remapped);
    void remapped.finally(() => this.#pending.delete(remapped));
  }

  /** Resolves when every staging buffer in flight is mapped again (or dropped). */
  async settle(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all(this.#pending);
  }

  /** Destroys the ready buffers now and the ones in flight when they come back. */
  dispose(): void {
    this.#disposed = true;
    this.#dropReady();
  }

  #dropReady(): void {
    for (const list of this.#ready.values()) for (const b of list) this.#drop(b);
    this.#ready.clear();
  }

  /** A mapped staging buffer of `bytes`' size bucket, or undefined when the budget is spent. */
  #take(bytes: number): GPUBuffer | undefined {
    if (this.#disposed) return undefined;
    const size = poolBucketBytes(bytes);
    const reused = this.#ready.get(size)?.pop();
    if (reused) return reused;
    // Make room by dropping ready buffers of other sizes before refusing.
    for (const [readySize, list] of this.#ready) {
      while (this.#bytes + size > this.budgetBytes && list.length > 0) this.#drop(list.pop()!);
      if (list.length === 0) this.#ready.delete(readySize);
    }
    if (this.#bytes + size > this.budgetBytes) return undefined;
    let buffer: GPUBuffer;
    try {
      buffer = this.memory.create(
        {
          label: 'rayo upload staging',
          size,
          usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC,
          mappedAtCreation: true,
        },
        'upload',
      );
    } catch {
      // Over the memory budget: the write still goes through writeBuffer.
      return undefined;
    }
    this.#bytes += size;
    this.#created++;
    return buffer;
  }

  #giveBack(buffer: GPUBuffer): void {
    if (this.#disposed || this.memory.short) {
      this.#drop(buffer);
      return;
    }
    let list = this.#ready.get(buffer.size);
    if (!list) {
      list = [];
      this.#ready.set(buffer.size, list);
    }
    list.push(buffer);
  }

  #drop(buffer: GPUBuffer): void {
    this.#bytes -= buffer.size;
    this.memory.destroy(buffer);
  }
}
