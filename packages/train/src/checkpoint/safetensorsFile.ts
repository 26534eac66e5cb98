import { DTypeError, type HostArray, InvalidArgumentError, sizeOf } from '@rayo/core';
import { checkIntegerAtLeast } from '../integerOption.js';
import { type FloatDType, isFloatDType, roundF32To, widenToF32 } from './floatWords.js';
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

/** Formats `readF32` and `readAs` accept. */
export const FLOAT_READABLE = 'F32, F16 or BF16';

/** Whether `readF32` and `readAs` can read a tensor of this entry. */
export function readableAsFloat(entry: SafetensorsEntry): boolean {
  return isFloatDType(entry.dtype);
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
    checkIntegerAtLeast('SafetensorsFile.open', 'maxReadBytes', maxReadBytes, 4);
    const first = new Uint8Array(8);
    if (file.size >= 8) await file.read(first, 0);
    const headerLength = headerLengthOf(first, file.size, file.name);
    const json = new Uint8Array(headerLength);
    await file.read(json, 8);
    const header = parseSafetensorsHeader(json, file.size - 8 - headerLength, file.name);
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
   * The elements of tensor `name` as f32 on the host: F32 as it is, F16 and
   * BF16 widened (exactly). Any other format is a DTypeError naming the tensor.
   */
  async readF32(name: string): Promise<Float32Array> {
    return (await this.readAs(name, 'f32', 'SafetensorsFile.readF32')) as Float32Array;
  }

  /**
   * The elements of tensor `name` as a host array of `dtype` (`Uint16Array`
   * words for f16 and bf16): stored words as they are when the formats
   * match; otherwise widened to f32 (exact) and, for a half `dtype`, rounded
   * once to nearest even. Any other format is a DTypeError naming the tensor.
   */
  async readAs(name: string, dtype: FloatDType, api = 'SafetensorsFile.readAs'): Promise<HostArray> {
    const entry = this.header.entries.get(name);
    if (!entry) {
      throw new InvalidArgumentError('no such tensor in the file', {
        operation: api,
        argument: name,
        expected: `one of the ${this.header.entries.size} tensors of ${this.file.name}`,
        actual: 'absent',
      });
    }
    if (!isFloatDType(entry.dtype)) {
      throw new DTypeError(`tensor '${name}' is not a float tensor`, {
        operation: api,
        argument: name,
        expected: FLOAT_READABLE,
        actual: entry.format,
      });
    }
    const stored = await this.#readStored(entry, entry.dtype);
    if (entry.dtype === dtype) return stored;
    const values = entry.dtype === 'f32' ? (stored as Float32Array) : widenToF32(entry.dtype, stored);
    return roundF32To(dtype, values);
  }

  /** The stored elements of `entry` in host byte order: a Float32Array for F32, words for F16 and BF16. */
  async #readStored(entry: SafetensorsEntry, dtype: FloatDType): Promise<HostArray> {
    const n = sizeOf(entry.shape);
    const out = dtype === 'f32' ? new Float32Array(n) : new Uint16Array(n);
    const bytes = new Uint8Array(out.buffer);
    await this.#readInto(entry, bytes);
    const width = out.BYTES_PER_ELEMENT;
    if (!LITTLE_ENDIAN) for (let i = 0; i < bytes.length; i += width) bytes.subarray(i, i + width).reverse();
    return out;
  }
}
