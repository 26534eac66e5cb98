import { DTypeError, InvalidArgumentError, sizeOf } from '@rayo/core';
import type { RandomAccessFile } from './randomAccessFile.js';
import {
  headerLengthOf,
  parseSafetensorsHeader,
  type SafetensorsEntry,
  type SafetensorsHeader,
} from './safetensorsHeader.js';

/** Largest single read (default 64 MiB): a tensor larger than this is read in pieces. */
const DEFAULT_MAX_READ_BYTES = 64 * 2 ** 20;

const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

/** Formats `readF32` accepts, and how. */
export const F32_READABLE = 'F32, or BF16 (widened to f32 on the host while reading: exact)';

/** Whether `readF32` can read a tensor of this entry. */
export function readableAsF32(entry: SafetensorsEntry): boolean {
  return entry.format === 'F32' || entry.format === 'BF16';
}

export interface SafetensorsFileOptions {
  /** Largest single read in bytes (default 64 MiB). */
  readonly maxReadBytes?: number;
}

/**
 * A safetensors file read tensor by tensor: opening reads only the header;
 * each tensor's bytes are read at their offset when asked for, in pieces of
 * at most `maxReadBytes`, so that neither the file nor (beyond one tensor)
 * its data is ever held in memory.
 */
export class SafetensorsFile {
  readonly file: RandomAccessFile;
  readonly header: SafetensorsHeader;
  readonly #maxReadBytes: number;

  private constructor(file: RandomAccessFile, header: SafetensorsHeader, maxReadBytes: number) {
    this.file = file;
    this.header = header;
    this.#maxReadBytes = maxReadBytes;
  }

  static async open(file: RandomAccessFile, options: SafetensorsFileOptions = {}): Promise<SafetensorsFile> {
    const maxReadBytes = options.maxReadBytes ?? DEFAULT_MAX_READ_BYTES;
    if (!Number.isInteger(maxReadBytes) || maxReadBytes < 4) {
      throw new InvalidArgumentError('maxReadBytes must be an integer of at least 4', {
        kernel: 'SafetensorsFile.open',
        argument: 'maxReadBytes',
        expected: 'an integer >= 4',
        actual: String(maxReadBytes),
      });
    }
    const first = new Uint8Array(8);
    if (file.size >= 8) await file.read(first, 0);
    const headerLength = headerLengthOf(first, file.size);
    const json = new Uint8Array(headerLength);
    await file.read(json, 8);
    const header = parseSafetensorsHeader(json, file.size - 8 - headerLength);
    return new SafetensorsFile(file, header, maxReadBytes);
  }

  get entries(): ReadonlyMap<string, SafetensorsEntry> {
    return this.header.entries;
  }

  /** Reads `entry`'s bytes into `into`, one piece of at most `maxReadBytes` at a time. */
  async #readInto(entry: SafetensorsEntry, into: Uint8Array): Promise<void> {
    // Whole 4-byte words per piece, so that a piece never splits an element.
    const piece = this.#maxReadBytes - (this.#maxReadBytes % 4);
    const start = this.header.dataStart + entry.begin;
    for (let at = 0; at < into.length; at += piece) {
      await this.file.read(into.subarray(at, Math.min(at + piece, into.length)), start + at);
    }
  }

  /**
   * The elements of tensor `name` as f32 on the host. F32 is read as it is;
   * BF16 is widened (exactly: a bf16 is the top half of an f32). Any other
   * format is a DTypeError naming the tensor.
   */
  async readF32(name: string): Promise<Float32Array> {
    const entry = this.header.entries.get(name);
    if (!entry) {
      throw new InvalidArgumentError('no such tensor in the file', {
        kernel: 'SafetensorsFile.readF32',
        argument: name,
        expected: `one of the ${this.header.entries.size} tensors of ${this.file.name}`,
        actual: 'absent',
      });
    }
    const n = sizeOf(entry.shape);
    if (entry.format === 'F32') {
      const out = new Float32Array(n);
      const bytes = new Uint8Array(out.buffer);
      await this.#readInto(entry, bytes);
      if (!LITTLE_ENDIAN) for (let i = 0; i < bytes.length; i += 4) bytes.subarray(i, i + 4).reverse();
      return out;
    }
    if (entry.format === 'BF16') {
      const raw = new Uint8Array(2 * n);
      await this.#readInto(entry, raw);
      const bits = new Uint32Array(n);
      for (let i = 0; i < n; i++) bits[i] = ((raw[2 * i + 1]! << 8) | raw[2 * i]!) << 16;
      return new Float32Array(bits.buffer);
    }
    throw new DTypeError(`tensor '${name}' has a dtype that cannot be loaded as f32 yet`, {
      kernel: 'SafetensorsFile.readF32',
      argument: name,
      expected: F32_READABLE,
      actual: entry.format,
    });
  }
}
