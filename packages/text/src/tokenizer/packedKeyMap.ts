import type { PackedStrings } from '@rayo/train';

// A Map from strings to numbers whose keys are, for the most part, items of
// a PackedStrings: hashed and compared in place in its text, so that a
// vocabulary's 128k tokens or 280k merges are indexed without a string made
// for each. Keys of its own (a derived key, an added token) are kept as
// strings. It is the Map the tokenizer library expects; anything that walks
// or deletes entries first makes it a plain Map of strings.

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** FNV-1a over the UTF-16 units of `text` from `start` to `end`. */
export function hashUnits(text: string, start: number, end: number): number {
  let hash = FNV_OFFSET;
  for (let i = start; i < end; i++) hash = Math.imul(hash ^ text.charCodeAt(i), FNV_PRIME);
  return hash >>> 0;
}

/** The entries of an open-addressing table: item keys (an index into the items) or string keys. */
class PackedKeyTable {
  readonly items: PackedStrings;
  /** Entry + 1 at each slot, 0 where empty. */
  #slots: Int32Array;
  /** The hash of each slot's key, beside it: a probe reads no entry's data but a match's. */
  #slotHashes: Uint32Array;
  #mask: number;
  /** Per entry, in insertion order: the item that is its key, or -1 for a string key. */
  #itemOf: Int32Array;
  #values: Int32Array;
  #hashes: Uint32Array;
  readonly #strings = new Map<number, string>();
  count = 0;

  constructor(items: PackedStrings, expected: number) {
    this.items = items;
    let slots = 16;
    while (slots < expected * 2) slots *= 2;
    this.#slots = new Int32Array(slots);
    this.#slotHashes = new Uint32Array(slots);
    this.#mask = slots - 1;
    const entries = Math.max(expected, 8);
    this.#itemOf = new Int32Array(entries);
    this.#values = new Int32Array(entries);
    this.#hashes = new Uint32Array(entries);
  }

  /** The entry whose key is `text[start, end)`, or -1. */
  #find(hash: number, text: string, start: number, end: number): number {
    for (let slot = hash & this.#mask; ; slot = (slot + 1) & this.#mask) {
      const entry = this.#slots[slot]! - 1;
      if (entry < 0) return -1;
      if (this.#slotHashes[slot] === hash && this.#keyIs(entry, text, start, end)) return entry;
    }
  }

  #keyIs(entry: number, text: string, start: number, end: number): boolean {
    const item = this.#itemOf[entry]!;
    if (item < 0) {
      const key = this.#strings.get(entry)!;
      return key.length === end - start && rangesEqual(key, 0, text, start, key.length);
    }
    const keyStart = this.items.start(item);
    const length = this.items.ends[item]! - keyStart;
    return length === end - start && rangesEqual(this.items.text, keyStart, text, start, length);
  }

  /** The value of `key`, or undefined. */
  get(key: string): number | undefined {
    const entry = this.#find(hashUnits(key, 0, key.length), key, 0, key.length);
    return entry < 0 ? undefined : this.#values[entry];
  }

  /**
   * Sets the key `item` (its text's hash given), or the string `key` where
   * given instead; an existing key keeps its value unless `overwrite`.
   * Returns whether the key was new.
   */
  set(hash: number, item: number, key: string | undefined, value: number, overwrite: boolean): boolean {
    const text = key ?? this.items.text;
    const start = key === undefined ? this.items.start(item) : 0;
    const end = key === undefined ? this.items.ends[item]! : key.length;
    const found = this.#find(hash, text, start, end);
    if (found >= 0) {
      if (overwrite) this.#values[found] = value;
      return false;
    }
    if (this.count === this.#values.length) this.#growEntries();
    const entry = this.count++;
    this.#itemOf[entry] = key === undefined ? item : -1;
    if (key !== undefined) this.#strings.set(entry, key);
    this.#values[entry] = value;
    this.#hashes[entry] = hash;
    if (this.count * 2 > this.#slots.length) this.#rehash();
    else this.#place(entry);
    return true;
  }

  #place(entry: number): void {
    const hash = this.#hashes[entry]!;
    let slot = hash & this.#mask;
    while (this.#slots[slot] !== 0) slot = (slot + 1) & this.#mask;
    this.#slots[slot] = entry + 1;
    this.#slotHashes[slot] = hash;
  }

  #growEntries(): void {
    const grow = <T extends Int32Array | Uint32Array>(from: T, to: T) => {
      to.set(from);
      return to;
    };
    const n = this.#values.length * 2;
    this.#itemOf = grow(this.#itemOf, new Int32Array(n));
    this.#values = grow(this.#values, new Int32Array(n));
    this.#hashes = grow(this.#hashes, new Uint32Array(n));
  }

  #rehash(): void {
    this.#slots = new Int32Array(this.#slots.length * 2);
    this.#slotHashes = new Uint32Array(this.#slots.length);
    this.#mask = this.#slots.length - 1;
    for (let entry = 0; entry < this.count; entry++) this.#place(entry);
  }

  /** Every entry's key and value, in insertion order. */
  *entries(): Generator<[string, number]> {
    for (let entry = 0; entry < this.count; entry++) {
      const item = this.#itemOf[entry]!;
      yield [item >= 0 ? this.items.at(item) : this.#strings.get(entry)!, this.#values[entry]!];
    }
  }
}

/** Whether `a` from `aStart` and `b` from `bStart` have the same `length` units. */
function rangesEqual(a: string, aStart: number, b: string, bStart: number, length: number): boolean {
  if (a === b && aStart === bStart) return true;
  if (bStart === 0 && b.length === length) return a.startsWith(b, aStart);
  if (aStart === 0 && a.length === length) return b.startsWith(a, bStart);
  for (let i = 0; i < length; i++) if (a.charCodeAt(aStart + i) !== b.charCodeAt(bStart + i)) return false;
  return true;
}

/**
 * A Map<string, number> over a PackedKeyTable: lookups go to the table, keys
 * set afterwards (added tokens) to the Map itself, over the table's. Walking
 * the entries, deleting or clearing first copies the table's entries in, in
 * their order, and from then on it is a plain Map.
 */
export class PackedKeyMap extends Map<string, number> {
  #table: PackedKeyTable | undefined;
  /** Keys set here that the table does not hold. */
  #added = 0;

  constructor(table: PackedKeyTable) {
    super();
    this.#table = table;
  }

  override get(key: string): number | undefined {
    const own = super.get(key);
    return own !== undefined || this.#table === undefined ? own : this.#table.get(key);
  }

  override has(key: string): boolean {
    return super.has(key) || (this.#table !== undefined && this.#table.get(key) !== undefined);
  }

  override set(key: string, value: number): this {
    if (this.#table && !super.has(key) && this.#table.get(key) === undefined) this.#added++;
    return super.set(key, value);
  }

  override get size(): number {
    return this.#table ? this.#table.count + this.#added : super.size;
  }

  override delete(key: string): boolean {
    this.#plain();
    return super.delete(key);
  }

  override clear(): void {
    this.#table = undefined;
    super.clear();
  }

  override entries(): MapIterator<[string, number]> {
    this.#plain();
    return super.entries();
  }

  override keys(): MapIterator<string> {
    this.#plain();
    return super.keys();
  }

  override values(): MapIterator<number> {
    this.#plain();
    return super.values();
  }

  override forEach(
    callback: (value: number, key: string, map: Map<string, number>) => void,
    thisArg?: unknown,
  ): void {
    this.#plain();
    super.forEach(callback, thisArg);
  }

  override [Symbol.iterator](): MapIterator<[string, number]> {
    return this.entries();
  }

  /** Copies the table's entries in (a value set here over one of them wins), then drops the table. */
  #plain(): void {
    const table = this.#table;
    if (!table) return;
    this.#table = undefined;
    const own = [...super.entries()];
    super.clear();
    const overrides = new Map(own);
    for (const [key, value] of table.entries()) {
      super.set(key, overrides.get(key) ?? value);
    }
    for (const [key, value] of own) if (!super.has(key)) super.set(key, value);
  }
}

export { PackedKeyTable };
