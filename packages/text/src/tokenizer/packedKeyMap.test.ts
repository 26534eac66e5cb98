import { InvalidArgumentError } from '@rayo/core';
import { PackedStrings } from '@rayo/train';
import { describe, expect, it } from 'vitest';
import { PackedKeyMap, PackedKeyTable } from './packedKeyMap.js';

/** A packed table of `keys` (the first of equal keys keeping its index) and the plain Map it stands for. */
function both(keys: readonly string[]) {
  const items = PackedStrings.of(keys);
  const table = new PackedKeyTable(items, 4); // grown as filled
  const plain = new Map<string, number>();
  keys.forEach((key, i) => {
    table.setItem(i, false);
    if (!plain.has(key)) plain.set(key, i);
  });
  return { packed: new PackedKeyMap(table), plain };
}

const KEYS = Array.from({ length: 3000 }, (_, i) => `k${(i * 7919) % 2500}${i % 3 === 0 ? '😀' : ''}`);

describe('PackedKeyMap', () => {
  it('answers get, has and size as the plain Map of its keys, the first of equal keys kept', () => {
    const { packed, plain } = both(KEYS);
    expect(packed.size).toBe(plain.size);
    for (const key of [...KEYS, 'absent', '', 'k1😀x']) {
      expect(packed.get(key), key).toBe(plain.get(key));
      expect(packed.has(key), key).toBe(plain.has(key));
    }
  });

  it('takes keys set afterwards over its own, and walks, deletes and clears as the plain Map', () => {
    const { packed, plain } = both(KEYS);
    for (const [key, value] of [
      [KEYS[5]!, -1],
      ['added', 7],
      [KEYS[9]!, -2],
      ['added', 8],
    ] as const) {
      packed.set(key, value);
      plain.set(key, value);
    }
    expect(packed.size).toBe(plain.size);
    expect(packed.get(KEYS[5]!)).toBe(-1);
    expect([...packed]).toEqual([...plain]);
    expect([...packed.keys()]).toEqual([...plain.keys()]);
    expect(packed.delete(KEYS[11]!)).toBe(plain.delete(KEYS[11]!));
    expect(packed.delete('absent')).toBe(false);
    expect(packed.size).toBe(plain.size);
    expect([...packed.entries()]).toEqual([...plain.entries()]);
    packed.clear();
    expect(packed.size).toBe(0);
    expect(packed.get(KEYS[0]!)).toBeUndefined();
  });

  it('keeps string keys beside item keys, a later value over an equal key when asked', () => {
    const items = PackedStrings.of(['a b', 'c d', '😀 é']);
    const table = new PackedKeyTable(items, 2);
    table.setItem(0, true);
    table.setString('["x y"]', 1, true);
    table.setString('a b', 2, true);
    table.setItem(1, false);
    table.setString('c d', 4, false);
    table.setString('😀 é', 5, false);
    table.setItem(2, true);
    const map = new PackedKeyMap(table);
    expect(map.get('a b')).toBe(2);
    expect(map.get('😀 é')).toBe(2);
    expect([...map]).toEqual([
      ['a b', 2],
      ['["x y"]', 1],
      ['c d', 1],
      ['😀 é', 2],
    ]);
  });

  it('refuses keys whose hashes all collide (a crafted vocabulary) by name, rather than probing without end', () => {
    const keys = Array.from({ length: 400 }, (_, i) => `t${i}`);
    const honest = PackedStrings.of(keys);
    // The same strings with one hash for all: what a file would need to know this process's hash to make.
    const colliding = new PackedStrings(honest.text, honest.ends, new Uint32Array(keys.length).fill(12345));
    const table = new PackedKeyTable(colliding, keys.length);
    expect(() => {
      for (let i = 0; i < keys.length; i++) table.setItem(i, false);
    }).toThrow(InvalidArgumentError);
    expect(() => new PackedKeyTable(colliding, keys.length).setItem(0, false)).not.toThrow();
  });
});
