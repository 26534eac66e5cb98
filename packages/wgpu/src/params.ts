/** A field of a kernel's uniform parameter struct: 4-byte scalars only, so the layout is sequential. */
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

/**
 * Uniform parameters for many dispatches from a few reused buffers: each
 * dispatch takes an aligned slot in a 64 KiB chunk, the slots are written with
 * one `writeBuffer` per chunk before submission, and chunks go back to the
 * pool when the GPU has finished the submission that used them.
 */
export class ParamArena {
  readonly #device: GPUDevice;
  readonly #alignment: number;
  readonly #free: GPUBuffer[] = [];
  #created = 0;

  constructor(device: GPUDevice) {
    this.#device = device;
    this.#alignment = device.limits.minUniformBufferOffsetAlignment;
  }

  /** Uniform buffers created so far (stays flat once warm). */
  get buffersCreated(): number {
    return this.#created;
  }

  /** A fresh set of slots for one submission. */
  begin(): ParamSlots {
    return new ParamSlots(this, this.#alignment);
  }

  acquire(): GPUBuffer {
    const reused = this.#free.pop();
    if (reused) return reused;
    this.#created++;
    return this.#device.createBuffer({
      label: 'rayo params',
      size: CHUNK_BYTES,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
  }

  release(buffers: readonly GPUBuffer[]): void {
    this.#free.push(...buffers);
  }

  destroy(): void {
    for (const b of this.#free) b.destroy();
    this.#free.length = 0;
  }
}

export class ParamSlots {
  readonly #chunks: { buffer: GPUBuffer; bytes: ArrayBuffer; used: number }[] = [];
  constructor(
    private readonly arena: ParamArena,
    private readonly alignment: number,
  ) {}

  /** Reserves a slot and writes the parameters into it; returns the binding. */
  put<K extends string>(
    layout: ParamLayout<K>,
    values: Readonly<Record<K, number>> | Readonly<Record<string, number>>,
  ): GPUBufferBinding {
    let chunk = this.#chunks[this.#chunks.length - 1];
    if (!chunk || chunk.used + layout.byteLength > CHUNK_BYTES) {
      chunk = { buffer: this.arena.acquire(), bytes: new ArrayBuffer(CHUNK_BYTES), used: 0 };
      this.#chunks.push(chunk);
    }
    const offset = chunk.used;
    layout.write(new DataView(chunk.bytes), offset, values);
    chunk.used = Math.ceil((offset + layout.byteLength) / this.alignment) * this.alignment;
    return { buffer: chunk.buffer, offset, size: layout.byteLength };
  }

  /** Uploads every written slot; call before submitting the commands that read them. */
  flush(queue: GPUQueue): void {
    for (const c of this.#chunks) if (c.used > 0) queue.writeBuffer(c.buffer, 0, c.bytes, 0, c.used);
  }

  /** Returns the chunks to the arena (after the submission completed). */
  release(): void {
    this.arena.release(this.#chunks.map((c) => c.buffer));
    this.#chunks.length = 0;
  }
}
