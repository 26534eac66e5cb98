import { RayoError } from '@rayo/core';
import type { RandomAccessFile } from '../checkpoint/randomAccessFile.js';
import type { PackedStringsBuilder } from './packedStrings.js';

// A string's leading U+FEFF is one of its characters (a token may be just that), not a mark to drop.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * Reads a GGUF header front to back from a file, one chunk at a time: the
 * header is parsed as it streams in, so a large tokenizer vocabulary never
 * asks for the file (or the header) to be read whole. Every method takes its
 * bytes after `ensure` made them present.
 */
export class HeaderCursor {
  readonly #file: RandomAccessFile;
  readonly #chunkBytes: number;
  #buffer = new Uint8Array(0);
  #view = new DataView(this.#buffer.buffer);
  /** The file position of `#buffer[0]`. */
  #bufferStart = 0;
  #position = 0;

  constructor(file: RandomAccessFile, chunkBytes: number) {
    this.#file = file;
    this.#chunkBytes = chunkBytes;
  }

  /** The file position of the next byte to read. */
  get position(): number {
    return this.#position;
  }

  /** Makes the next `n` bytes present, reading a chunk (or `n` bytes, if more) where they are not. */
  ensure(n: number, what: string): Promise<void> | undefined {
    if (this.#position + n <= this.#bufferStart + this.#buffer.length) return undefined;
    return this.#refill(n, what);
  }

  async #refill(n: number, what: string): Promise<void> {
    if (this.#position + n > this.#file.size) {
      throw new RayoError(`the file ends inside the GGUF header (${what})`, {
        operation: 'gguf',
        argument: this.#file.name,
        expected: `${n} more bytes at ${this.#position}`,
        actual: `${this.#file.size - this.#position}`,
      });
    }
    const length = Math.min(Math.max(n, this.#chunkBytes), this.#file.size - this.#position);
    const kept = this.#buffer.subarray(this.#position - this.#bufferStart);
    const next = new Uint8Array(length);
    next.set(kept.subarray(0, Math.min(kept.length, length)));
    if (kept.length < length) await this.#file.read(next.subarray(kept.length), this.#position + kept.length);
    this.#buffer = next;
    this.#view = new DataView(next.buffer);
    this.#bufferStart = this.#position;
  }

  #take(n: number): number {
    const at = this.#position - this.#bufferStart;
    this.#position += n;
    return at;
  }

  u8(): number {
    return this.#view.getUint8(this.#take(1));
  }
  i8(): number {
    return this.#view.getInt8(this.#take(1));
  }
  u16(): number {
    return this.#view.getUint16(this.#take(2), true);
  }
  i16(): number {
    return this.#view.getInt16(this.#take(2), true);
  }
  u32(): number {
    return this.#view.getUint32(this.#take(4), true);
  }
  i32(): number {
    return this.#view.getInt32(this.#take(4), true);
  }
  f32(): number {
    return this.#view.getFloat32(this.#take(4), true);
  }
  f64(): number {
    return this.#view.getFloat64(this.#take(8), true);
  }
  u64(): bigint {
    return this.#view.getBigUint64(this.#take(8), true);
  }
  i64(): bigint {
    return this.#view.getBigInt64(this.#take(8), true);
  }

  /** A u64 count or size that must fit a number and `limit`. */
  async size(what: string, limit: number): Promise<number> {
    await this.ensure(8, what);
    const value = this.u64();
    if (value > BigInt(limit)) {
      throw new RayoError(`GGUF ${what} is out of range`, {
        operation: 'gguf',
        argument: this.#file.name,
        expected: `at most ${limit}`,
        actual: String(value),
      });
    }
    return Number(value);
  }

  /** Whether the next `n` bytes are present (read them without an await). */
  buffered(n: number): boolean {
    return this.#position + n <= this.#bufferStart + this.#buffer.length;
  }

  /**
   * The next string where its length and bytes are present, else undefined
   * with nothing taken: a vocabulary is 100k+ strings, and an await each
   * is most of a header's parse.
   */
  bufferedString(what: string): string | undefined {
    const at = this.#position - this.#bufferStart;
    if (at + 8 > this.#buffer.length) return undefined;
    // The u64 length as two words: a BigInt per string is a measurable part of a vocabulary's parse.
    const length = this.#view.getUint32(at, true);
    if (this.#view.getUint32(at + 4, true) !== 0 || length > this.#buffer.length - at - 8) return undefined;
    this.#position += 8;
    return this.#decode(length, what);
  }

  /**
   * Appends up to `count` next strings' bytes to `sink`, as many as are
   * buffered whole (none where the first is not), and returns how many: a
   * vocabulary is 100k+ strings, and an await each is most of a header's
   * parse. The sink checks and decodes them together.
   */
  bufferedStringsInto(count: number, sink: PackedStringsBuilder): number {
    const buffer = this.#buffer;
    const view = this.#view;
    let at = this.#position - this.#bufferStart;
    let taken = 0;
    while (taken < count && at + 8 <= buffer.length) {
      const length = view.getUint32(at, true);
      if (view.getUint32(at + 4, true) !== 0 || length > buffer.length - at - 8) break;
      sink.pushFrom(buffer, at + 8, length);
      at += 8 + length;
      taken++;
    }
    this.#position = this.#bufferStart + at;
    return taken;
  }

  /** Appends the next string's bytes to `sink`, reading them where they are not buffered. */
  async stringInto(sink: PackedStringsBuilder, what: string): Promise<void> {
    const length = await this.size(`${what} length`, this.#file.size - this.#position);
    await this.ensure(length, what);
    const at = this.#take(length);
    sink.pushFrom(this.#buffer, at, length);
  }

  /** A string: a u64 byte length, then UTF-8 bytes. */
  async string(what: string): Promise<string> {
    const length = await this.size(`${what} length`, this.#file.size - this.#position);
    await this.ensure(length, what);
    return this.#decode(length, what);
  }

  #decode(length: number, what: string): string {
    const at = this.#take(length);
    try {
      return decoder.decode(this.#buffer.subarray(at, at + length));
    } catch {
      throw new RayoError(`GGUF ${what} is not UTF-8`, {
        operation: 'gguf',
        argument: this.#file.name,
        expected: 'a UTF-8 string',
        actual: `${length} bytes at ${this.#position - length}`,
      });
    }
  }
}
