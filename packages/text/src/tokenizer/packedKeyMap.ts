import { InvalidArgumentError } from '@rayo/core';
import { type PackedStrings, utf8Hash } from '@rayo/train';

// A Map from strings to numbers whose keys are, for the most part, items of
// a PackedStrings: found by the hash the items carry (FNV-1a over their
// UTF-8 bytes) and compared in place in its text, so that a vocabulary's
// 128k tokens or 280k merges are indexed without a string made for each.
// An item key's value is its index; keys of its own (a derived key) are
// kept as strings with their values. It is the Map the tokenizer library
// expects; anything that walks or deletes entries first makes it a plain
// Map of strings.

/** Slots one lookup may pass: far beyond chance at a load of at most one half. */
const MAX_PROBES = 256;

/** Whether `a` from `aStart` and `b` from `bStart` have the same `length` units. */
function rangesEqual(a: string, aStart: number, b: string, bStart: number, length: number): boolean {
  if (a === b && aStart === bStart) return true;
  if (bStart === 0 && b.length === length) return a.startsWith(b, aStart);
  if (aStart === 0 && a.length === length) return b.startsWith(a, bStart);
  for (let i = 0; i < length; i++) if (a.charCodeAt(aStart + i) !== b.charCodeAt(bStart + i)) return false;
  return true;
}

/**
 * An open-addressing table of keys: items of `items` (the value of an item
 * key is the item's index) and strings of its own with their values. Each
 * slot holds a key's hash beside its reference (item + 1, or −(string + 1);
 * 0 where empty), so a probe reads one place.
 */
export class PackedKeyTable {
  readonly items: PackedStrings;
  #slots: Int32Array;
  #mask: number;
  readonly #strings: string[] = [];
  readonly #stringValues: number[] = [];
  /** Each key's reference when it was first set, in order: the entries' order. */
  #order: Int32Array;
  count = 0;

  constructor(items: PackedStrings, expected: number) {
    this.items = items;
    let slots = 16;
    while (slots < expected * 2) slots *= 2;
    this.#slots = new Int32Array(slots * 2);
    this.#mask = slots - 1;
    this.#order = new Int32Array(Math.max(expected, 8));
  }

  /** Whether the key of reference `ref` is `text[start, start + length)`. */
  #keyIs(ref: number, text: string, start: number, length: number): boolean {
    if (ref < 0) {
      const key = this.#strings[-ref - 1]!;
      return key.length === length && rangesEqual(key, 0, text, start, length);
    }
    const keyStart = this.items.start(ref - 1);
    return (
      this.items.ends[ref - 1]! - keyStart === length &&
      rangesEqual(this.items.text, keyStart, text, start, length)
    );
  }

  /**
   * The slot of the key `text[start, start + length)` of `hash`: where it
   * is, or the empty one it would take. The hashes start from a random word
   * per process, so a run longer than `MAX_PROBES` is not chance but a
   * table that cannot work: refused, never a search without end.
   */
  #slotOf(hash: number, text: string, start: number, length: number): number {
    const slots = this.#slots;
    for (let slot = hash & this.#mask, probes = 0; ; slot = (slot + 1) & this.#mask, probes++) {
      const ref = slots[2 * slot + 1]!;
      if (ref === 0 || (slots[2 * slot] === (hash | 0) && this.#keyIs(ref, text, start, length))) return slot;
      if (probes === MAX_PROBES) {
        throw new InvalidArgumentError('the vocabulary’s strings hash into one run of the table', {
          operation: 'Tokenizer',
          argument: 'vocabulary',
          expected: `runs of at most ${MAX_PROBES} slots`,
          actual: `a run of more than ${MAX_PROBES} at ${this.count} entries`,
        });
      }
    }
  }

  /** The value of `key`, or undefined. */
  get(key: string): number | undefined {
    const ref = this.#slots[2 * this.#slotOf(utf8Hash(key), key, 0, key.length) + 1]!;
    if (ref === 0) return undefined;
    return ref > 0 ? ref - 1 : this.#stringValues[-ref - 1];
  }

  /** Sets item `item` as a key (its value its index); an existing equal key changes only if `overwrite`. Whether it was new. */
  setItem(item: number, overwrite: boolean): boolean {
    const items = this.items;
    const start = items.start(item);
    return this.#set(items.hashes[item]!, items.text, start, items.ends[item]! - start, item + 1, overwrite);
  }

  /** Sets the string `key` to `value`; an existing equal key changes only if `overwrite`. Whether it was new. */
  setString(key: string, value: number, overwrite: boolean): boolean {
    this.#strings.push(key);
    this.#stringValues.push(value);
    return this.#set(utf8Hash(key), key, 0, key.length, -this.#strings.length, overwrite);
  }

  #set(hash: number, text: string, start: number, length: number, ref: number, overwrite: boolean): boolean {
    const slot = this.#slotOf(hash, text, start, length);
    const slots = this.#slots;
    if (slots[2 * slot + 1] !== 0) {
      if (overwrite) slots[2 * slot + 1] = ref;
      return false;
    }
    slots[2 * slot] = hash;
    slots[2 * slot + 1] = ref;
    if (this.count === this.#order.length) {
      const grown = new Int32Array(this.#order.length * 2);
      grown.set(this.#order);
      this.#order = grown;
    }
    this.#order[this.count++] = ref;
    if (this.count * 2 > this.#mask + 1) this.#rehash();
    return true;
  }

  #rehash(): void {
    const old = this.#slots;
    this.#slots = new Int32Array(old.length * 2);
    this.#mask = old.length - 1;
    for (let slot = 0; slot < old.length / 2; slot++) {
      const ref = old[2 * slot + 1]!;
      if (ref === 0) continue;
      let to = old[2 * slot]! & this.#mask;
      while (this.#slots[2 * to + 1] !== 0) to = (to + 1) & this.#mask;
      this.#slots[2 * to] = old[2 * slot]!;
      this.#slots[2 * to + 1] = ref;
    }
  }

  /** Every key and its value, in the order keys were first set. */
  *entries(): Generator<[string, number]> {
    for (let i = 0; i < this.count; i++) {
      const ref = this.#order[i]!;
      const key = ref > 0 ? this.items.at(ref - 1) : this.#strings[-ref - 1]!;
      yield [key, this.get(key)!];
    }
  }
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
