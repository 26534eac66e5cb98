/** A field of a kernel's uniform parameter struct: 4-byte scalars only, so the layout is sequential. */
import type { GPUBuffer, GPUBufferBinding, GPUDevice, GPUQueue } from './webgpuTypes.js';
export type ParamType = 'u32' | 'i32' | 'f32';

export interface ParamLayout<K extends string> {
  /** `struct Params { … }` for the shader. */
  readonly wgsl: string;
  /** Size of the struct in bytes (a multiple of 16, as uniform buffers need). */
  readonly byteLength: number;
  /** Writes the values into `view` at `byteOffset` in declaration order. */
  write(
    view: DataView,
    byteOffset: number,
    values: Readonly<Record<K, number>> | Readonly<Record<string, number>>,
  ): void;
}

/**
 * Declares a kernel's parameters once: the WGSL struct and the packing agree
 * by construction.
 */
export function paramLayout<const F extends readonly (readonly [string, ParamType])[]>(
  fields: F,
): ParamLayout<F[number][0]> {
  const byteLength = Math.max(16, Math.ceil((fields.length * 4) / 16) * 16);
  const wgsl = `struct Params {\n${fields.map(([name, type]) => `  ${name}: ${type},`).join('\n')}\n}`;
  return {
    wgsl,
    byteLength,
    write(view, byteOffset, values) {
      fields.forEach(([name, type], i) => {
        const v = (values as Record<string, number>)[name]!;
        const at = byteOffset + 4 * i;
        if (type === 'f32') view.setFloat32(at, v, true);
        else if (type === 'i32') view.setInt32(at, v, true);
        else view.setUint32(at, v, true);
      });
    },
  };
}

const CHUNK_BYTES = 64 * 1024;

/** One 64 KiB uniform buffer of the arena. */
export interface ParamChunk {
  readonly buffer: GPUBuffer;
  /** The slots whose bytes were last written into it: a replay whose bytes are still there skips the write. */
  heldBy: ParamSlots | undefined;
}

/**
 * Uniform parameters for many dispatches from a few reused buffers: each
 * dispatch takes an aligned slot in a 64 KiB chunk, the slots are written with
 * one `writeBuffer` per chunk before submission, and chunks go back to the
 * pool when the GPU has finished the submission that used them.
 */
export class ParamArena {
  readonly #device: GPUDevice;
  readonly #alignment: number;
  readonly #free = new Set<ParamChunk>();
  #created = 0;

  constructor(device: GPUDevice) {
    this.#device = device;
    this.#alignment = device.limits.minUniformBufferOffsetAlignment;
  }

  /** Uniform buffers created so far (stays flat once warm). */
  get buffersCreated(): number {
    return this.#created;
  }

  /** A fresh set of slots for one recording. */
  begin(): ParamSlots {
    return new ParamSlots(this, this.#alignment);
  }

  acquire(): ParamChunk {
    for (const chunk of this.#free) {
      this.#free.delete(chunk);
      return chunk;
    }
    this.#created++;
    const buffer = this.#device.createBuffer({
      label: 'rayo params',
      size: CHUNK_BYTES,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    return { buffer, heldBy: undefined };
  }

  /** Takes these chunks back out of the pool, all or none: false if one is in use. */
  reclaim(chunks: readonly ParamChunk[]): boolean {
    for (const c of chunks) if (!this.#free.has(c)) return false;
    for (const c of chunks) this.#free.delete(c);
    return true;
  }

  release(chunks: readonly ParamChunk[]): void {
    for (const c of chunks) this.#free.add(c);
  }

  destroy(): void {
    for (const c of this.#free) c.buffer.destroy();
    this.#free.clear();
  }
}

/**
 * The parameters of one recording, kept on the host so that a replay can
 * write them again into the same chunks (its bind groups point there).
 */
export class ParamSlots {
  readonly #pages: { chunk: ParamChunk; view: DataView; used: number }[] = [];
  readonly #chunks: ParamChunk[] = [];
  constructor(
    private readonly arena: ParamArena,
    private readonly alignment: number,
  ) {}

  /** Reserves a slot and writes the parameters into it; returns the binding. */
  put<K extends string>(
    layout: ParamLayout<K>,
    values: Readonly<Record<K, number>> | Readonly<Record<string, number>>,
  ): GPUBufferBinding {
    let page = this.#pages[this.#pages.length - 1];
    if (!page || page.used + layout.byteLength > CHUNK_BYTES) {
      page = { chunk: this.arena.acquire(), view: new DataView(new ArrayBuffer(CHUNK_BYTES)), used: 0 };
      this.#pages.push(page);
      this.#chunks.push(page.chunk);
    }
    const offset = page.used;
    layout.write(page.view, offset, values);
    page.used = Math.ceil((offset + layout.byteLength) / this.alignment) * this.alignment;
    return { buffer: page.chunk.buffer, offset, size: layout.byteLength };
  }

  /** Uploads the slots into chunks that may hold other bytes; call before submitting. */
  flush(queue: GPUQueue): void {
    for (const { chunk, view, used } of this.#pages) {
      if (chunk.heldBy === this || used === 0) continue;
      queue.writeBuffer(chunk.buffer, 0, view.buffer, 0, used);
      chunk.heldBy = this;
    }
  }

  /** Returns the chunks to the arena (after the submission completed). */
  release(): void {
    this.arena.release(this.#chunks);
  }

  /** Takes the same chunks again for a replay; false if one is in use elsewhere. */
  reclaim(): boolean {
    return this.arena.reclaim(this.#chunks);
  }
}
