import { RayoError } from '@rayo/core';

// A GGUF tokenizer's vocabulary and merges are 100k+ strings each (Llama 3:
// 128k tokens, 280k merges). Made one by one they were most of a cached
// model's load: the strings, their garbage, and the tables built of them.
// Here an array of strings is kept as one decoded text and the UTF-16 offsets
// of its items; an item is a slice made when asked for, and a tokenizer can
// index the items (hash their code units, compare them in place) without
// making them at all: each item's hash (FNV-1a over its UTF-8 bytes) is
// kept, computed as its bytes are copied.

// A string's leading U+FEFF is one of its characters (a token may be just that), not a mark to drop.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The most bytes of one array's strings: they decode into one JS string, whose length V8 bounds. */
export const PACKED_STRINGS_MAX_BYTES = (1 << 29) - 24;

const FNV_PRIME = 0x01000193;
/**
 * FNV-1a's start, mixed with a random word per process: a file cannot be
 * made of strings whose hashes collide (a table of them probing without end)
 * when it cannot know the hash.
 */
const FNV_OFFSET = (0x811c9dc5 ^ globalThis.crypto.getRandomValues(new Uint32Array(1))[0]!) >>> 0;
const encoder = new TextEncoder();
let scratch = new Uint8Array(256);

/** FNV-1a over `value`'s UTF-8 bytes (from this process's random start): the hash `PackedStrings` keeps of each item. */
export function utf8Hash(value: string): number {
  // At most three bytes per UTF-16 unit.
  if (scratch.length < value.length * 3) scratch = new Uint8Array(value.length * 3);
  const { written } = encoder.encodeInto(value, scratch);
  let hash = FNV_OFFSET;
  for (let i = 0; i < written; i++) hash = Math.imul(hash ^ scratch[i]!, FNV_PRIME);
  return hash >>> 0;
}

/** An array of strings held as one text, the offsets of its items in it and their hashes. */
export class PackedStrings {
  /** The items, one after another. */
  readonly text: string;
  /** Item `i` is `text.slice(ends[i - 1] ?? 0, ends[i])` (UTF-16 offsets). */
  readonly ends: Uint32Array;
  /** Item `i`'s `utf8Hash`. */
  readonly hashes: Uint32Array;

  constructor(text: string, ends: Uint32Array, hashes: Uint32Array) {
    this.text = text;
    this.ends = ends;
    this.hashes = hashes;
  }

  /** The packed form of `strings`. */
  static of(strings: readonly string[]): PackedStrings {
    const ends = new Uint32Array(strings.length);
    const hashes = new Uint32Array(strings.length);
    let end = 0;
    for (let i = 0; i < strings.length; i++) {
      end += strings[i]!.length;
      ends[i] = end;
      hashes[i] = utf8Hash(strings[i]!);
    }
    return new PackedStrings(strings.join(''), ends, hashes);
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
 * Collects a GGUF string array's items as their UTF-8 bytes (counting each
 * one's UTF-16 length and hashing it as it is copied), then decodes them
 * together into a `PackedStrings`. Each item must be UTF-8 on its own: the
 * joined bytes must decode and no item may start inside a character (with
 * a continuation byte); otherwise the first item that is not is named.
 */
export class PackedStringsBuilder {
  readonly #fileName: string;
  readonly #what: string;
  /** The file position of the first item's length. */
  readonly #firstAt: number;
  #bytes: Uint8Array;
  #used = 0;
  readonly #byteEnds: Uint32Array;
  readonly #ends: Uint32Array;
  readonly #hashes: Uint32Array;
  #units = 0;
  #count = 0;
  /** Whether an item starts with a continuation byte (inside a character). */
  #startsInside = false;

  /** `count` items, the first at `firstAt` in `fileName`, `what` naming an item for errors. */
  constructor(count: number, firstAt: number, fileName: string, what: string) {
    this.#byteEnds = new Uint32Array(count);
    this.#ends = new Uint32Array(count);
    this.#hashes = new Uint32Array(count);
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

  /** Appends one item: `length` bytes of `source` from `start`, copied, counted and hashed in one pass. */
  pushFrom(source: Uint8Array, start: number, length: number): void {
    const used = this.#used;
    const needed = used + length;
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
      grown.set(this.#bytes.subarray(0, used));
      this.#bytes = grown;
    }
    const bytes = this.#bytes;
    if (length > 0 && (source[start]! & 0xc0) === 0x80) this.#startsInside = true;
    let hash = FNV_OFFSET;
    let units = this.#units;
    for (let i = 0; i < length; i++) {
      const b = source[start + i]!;
      bytes[used + i] = b;
      hash = Math.imul(hash ^ b, FNV_PRIME);
      // A character's first byte is one UTF-16 unit, two for a four-byte character (a surrogate pair).
      if ((b & 0xc0) !== 0x80) units += b >= 0xf0 ? 2 : 1;
    }
    this.#units = units;
    this.#used = needed;
    this.#byteEnds[this.#count] = needed;
    this.#ends[this.#count] = units;
    this.#hashes[this.#count++] = hash >>> 0;
  }

  /** The items, decoded; every item must have been pushed. */
  finish(): PackedStrings {
    const bytes = this.#bytes.subarray(0, this.#used);
    let text: string | undefined;
    try {
      if (!this.#startsInside) text = decoder.decode(bytes);
    } catch {
      // Named below.
    }
    if (text === undefined) this.#refuseFirstInvalid(bytes);
    return new PackedStrings(text!, this.#ends, this.#hashes);
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
