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
 * Bytes of one staging buffer: a large write goes through them in pieces of
 * this size. All of one size, every buffer serves every write; measured on
 * an H200 uploading a 1B model's 876 MB of tensors on a fresh device, pieces
 * of 32 MiB through 4–8 buffers ran at 4–5 GB/s, against 2.2–2.6 GB/s for
 * a buffer per size of write (most made anew, the largest writes beyond the
 * budget) and for `queue.writeBuffer`, whole or in pieces of 1–16 MiB.
 */
export const STAGING_PIECE_BYTES = 32 * 2 ** 20;

/**
 * Large host-to-device writes through pooled MAP_WRITE staging buffers of
 * one size. A write is cut into pieces; each piece fills a mapped staging
 * buffer, which is unmapped, copied on the queue, and mapped again in the
 * background (`mapAsync` waits for the copy), ready for a later piece.
 * Writes go in queue order with everything else submitted. Small writes,
 * and pieces while every staging buffer the byte budget allows is in
 * flight, take `queue.writeBuffer`.
 */
export class UploadStaging {
  readonly #ready: GPUBuffer[] = [];
  readonly #pending = new Set<Promise<void>>();
  /** Bytes of staging buffers that exist: ready or in flight. */
  #bytes = 0;
  #created = 0;
  #disposed = false;
  readonly #pieceBytes: number;

  private readonly device: GPUDevice;

  constructor(
    private readonly memory: DeviceMemory,
    private readonly budgetBytes: number,
  ) {
    this.device = memory.device;
    // A budget below one piece makes its pieces smaller (whole words), down to none below a staged write.
    this.#pieceBytes = Math.min(STAGING_PIECE_BYTES, Math.floor(budgetBytes / 4) * 4);
    memory.onShortage(() => this.#dropReady());
  }

  /** Staging buffers created so far. */
  get created(): number {
    return this.#created;
  }

  /** Writes `data` (a multiple of 4 bytes) into `dst` at `dstOffset`. */
  write(dst: GPUBuffer, dstOffset: number, data: ArrayBufferView): void {
    const bytes = data.byteLength;
    if (bytes < STAGED_WRITE_BYTES || this.#pieceBytes < STAGED_WRITE_BYTES) {
      this.device.queue.writeBuffer(dst, dstOffset, data.buffer, data.byteOffset, bytes);
      return;
    }
    const source = new Uint8Array(data.buffer, data.byteOffset, bytes);
    for (let at = 0; at < bytes; at += this.#pieceBytes) {
      const piece = source.subarray(at, Math.min(bytes, at + this.#pieceBytes));
      const staging = this.#take();
      if (!staging) {
        this.device.queue.writeBuffer(dst, dstOffset + at, piece.buffer, piece.byteOffset, piece.length);
        continue;
      }
      new Uint8Array(staging.getMappedRange(0, piece.length)).set(piece);
      staging.unmap();
      const encoder = this.device.createCommandEncoder();
      encoder.copyBufferToBuffer(staging, 0, dst, dstOffset + at, piece.length);
      this.device.queue.submit([encoder.finish()]);
      const remapped = staging.mapAsync(GPUMapMode.WRITE).then(
        () => this.#giveBack(staging),
        // A lost or destroyed device: the buffer is gone with it.
        () => this.#drop(staging),
      );
      this.#pending.add(remapped);
      void remapped.finally(() => this.#pending.delete(remapped));
    }
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
    for (const b of this.#ready) this.#drop(b);
    this.#ready.length = 0;
  }

  /** A mapped staging buffer, or undefined when every one the budget allows is in flight. */
  #take(): GPUBuffer | undefined {
    if (this.#disposed) return undefined;
    const reused = this.#ready.pop();
    if (reused) return reused;
    if (this.#bytes + this.#pieceBytes > this.budgetBytes) return undefined;
    let buffer: GPUBuffer;
    try {
      buffer = this.memory.create(
        {
          label: 'rayo upload staging',
          size: this.#pieceBytes,
          usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC,
          mappedAtCreation: true,
        },
        'upload',
      );
    } catch {
      // Over the memory budget: the write still goes through writeBuffer.
      return undefined;
    }
    this.#bytes += this.#pieceBytes;
    this.#created++;
    return buffer;
  }

  #giveBack(buffer: GPUBuffer): void {
    if (this.#disposed || this.memory.short) {
      this.#drop(buffer);
      return;
    }
    this.#ready.push(buffer);
  }

  #drop(buffer: GPUBuffer): void {
    this.#bytes -= buffer.size;
    this.memory.destroy(buffer);
  }
}
