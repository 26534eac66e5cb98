import { RayoError } from '@rayo/core';

// A GGUF tokenizer's vocabulary and merges are 100k+ strings each (Llama 3:
// 128k tokens, 280k merges). Made one by one they were most of a cached
// model's load: the strings, their garbage, and the tables built of them.
// Here an array of strings is kept as one decoded text and the UTF-16 offsets
// of its items; an item is a slice made when asked for, and a tokenizer can
// index the items (hash their code units, compare them in place) without
// making them at all.

// A string's leading U+FEFF is one of its characters (a token may be just that), not a mark to drop.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The most bytes of one array's strings: they decode into one JS string, whose length V8 bounds. */
export const PACKED_STRINGS_MAX_BYTES = (1 << 29) - 24;

/** An array of strings held as one text and the offsets of its items in it. */
export class PackedStrings {
  /** The items, one after another. */
  readonly text: string;
  /** Item `i` is `text.slice(ends[i - 1] ?? 0, ends[i])` (UTF-16 offsets). */
  readonly ends: Uint32Array;

  constructor(text: string, ends: Uint32Array) {
    this.text = text;
    this.ends = ends;
  }

  /** The packed form of `strings`. */
  static of(strings: readonly string[]): PackedStrings {
    const ends = new Uint32Array(strings.length);
    let end = 0;
    for (let i = 0; i < strings.length; i++) {
      end += strings[i]!.length;
      ends[i] = end;
    }
    return new PackedStrings(strings.join(''), ends);
  }

  get length(): number {
    return this.ends.length;
  }

  /** Where item `i` starts in `text`. */
  start(i: number): number {
    return i === 0 ? 0 : this.ends[i - 1]!;
  }

  /** Item `i` (made by this call). */
  at(i: number): string {
    return this.text.slice(this.start(i), this.ends[i]);
  }

  /** Whether item `i` is `value`, compared in place. */
  equals(i: number, value: string): boolean {
    const start = this.start(i);
    return this.ends[i]! - start === value.length && this.text.startsWith(value, start);
  }

  /** Every item, as an array. */
  toArray(): string[] {
    const items = new Array<string>(this.length);
    for (let i = 0; i < items.length; i++) items[i] = this.at(i);
    return items;
  }
}

/**
 * Collects a GGUF string array's items as their UTF-8 bytes, then decodes
 * them together into a `PackedStrings`. Each item must be UTF-8 on its own:
 * the joined bytes must decode and no item may start inside a character
 * (with a continuation byte); otherwise the first item that is not is named.
 */
export class PackedStringsBuilder {
  readonly #fileName: string;
  readonly #what: string;
  /** The file position of the first item's length. */
  readonly #firstAt: number;
  #bytes: Uint8Array;
  #used = 0;
  readonly #byteEnds: Uint32Array;
  #count = 0;

  /** `count` items, the first at `firstAt` in `fileName`, `what` naming an item for errors. */
  constructor(count: number, firstAt: number, fileName: string, what: string) {
    this.#byteEnds = new Uint32Array(count);
    // Most vocabularies' tokens average a few bytes; grown by doubling past that.
    this.#bytes = new Uint8Array(Math.min(count * 8, 1 << 26));
    this.#firstAt = firstAt;
    this.#fileName = fileName;
    this.#what = what;
  }

  get count(): number {
    return this.#count;
  }

  /** Appends one item's bytes (copied). */
  push(bytes: Uint8Array): void {
    this.pushFrom(bytes, 0, bytes.length);
  }

  /** Appends one item: `length` bytes of `source` from `start` (copied; no view made of a short one). */
  pushFrom(source: Uint8Array, start: number, length: number): void {
    const needed = this.#used + length;
    if (needed > PACKED_STRINGS_MAX_BYTES) {
      throw new RayoError(`GGUF ${this.#what}s are too large`, {
        operation: 'gguf',
        argument: this.#fileName,
        expected: `an array of strings of at most ${PACKED_STRINGS_MAX_BYTES} bytes in all`,
        actual: `more than ${needed} bytes`,
      });
    }
    if (needed > this.#bytes.length) {
      const grown = new Uint8Array(
        Math.min(Math.max(needed, this.#bytes.length * 2), PACKED_STRINGS_MAX_BYTES),
      );
      grown.set(this.#bytes.subarray(0, this.#used));
      this.#bytes = grown;
    }
    const bytes = this.#bytes;
    if (length <= 32) {
      for (let i = 0, o = this.#used; i < length; i++) bytes[o + i] = source[start + i]!;
    } else bytes.set(source.subarray(start, start + length), this.#used);
    this.#used = needed;
    this.#byteEnds[this.#count++] = needed;
  }

  /** The items, decoded; every item must have been pushed. */
  finish(): PackedStrings {
    const bytes = this.#bytes.subarray(0, this.#used);
    const byteEnds = this.#byteEnds;
    let startsInside = false;
    for (let i = 0, start = 0; i < byteEnds.length && !startsInside; start = byteEnds[i++]!) {
      if (byteEnds[i]! > start && (bytes[start]! & 0xc0) === 0x80) startsInside = true;
    }
    let text: string | undefined;
    try {
      if (!startsInside) text = decoder.decode(bytes);
    } catch {
      // Named below.
    }
    if (text === undefined) this.#refuseFirstInvalid(bytes);
    // An item's UTF-16 length from its bytes: a character's first byte is one unit, two for four bytes.
    const ends = new Uint32Array(byteEnds.length);
    let units = 0;
    for (let i = 0, byte = 0; i < byteEnds.length; i++) {
      for (const end = byteEnds[i]!; byte < end; byte++) {
        const b = bytes[byte]!;
        if ((b & 0xc0) !== 0x80) units += b >= 0xf0 ? 2 : 1;
      }
      ends[i] = units;
    }
    return new PackedStrings(text!, ends);
  }

  #refuseFirstInvalid(bytes: Uint8Array): never {
    for (let i = 0, start = 0; i < this.#byteEnds.length; start = this.#byteEnds[i++]!) {
      const end = this.#byteEnds[i]!;
      try {
        decoder.decode(bytes.subarray(start, end));
      } catch {
        throw new RayoError(`GGUF ${this.#what} is not UTF-8`, {
          operation: 'gguf',
          argument: this.#fileName,
          expected: 'a UTF-8 string',
          // Each item is its u64 length, then its bytes.
          actual: `${end - start} bytes at ${this.#firstAt + 8 * (i + 1) + start}`,
        });
      }
    }
    throw new Error('unreachable: the joined items decode, and none starts inside a character');
  }
}
