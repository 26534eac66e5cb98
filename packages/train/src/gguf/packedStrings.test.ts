import { RayoError } from '@rayo/core';
import { memoryFile } from '@rayo/train-testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Rng } from '../random.js';
import { GgufFile } from './ggufFile.js';
import { metadataArrayLength } from './metadata.js';
import { PackedStrings, PackedStringsBuilder, utf8Hash } from './packedStrings.js';
import { encodeGguf } from './writer.js';

const PIECES = ['a', 'Ġthe', '', '\uFEFF', 'ñandú', '€', '😀', '\u0000', ' ', 'Ċ', '한국어', '\\"'];

/** `count` strings of 0–3 random pieces each. */
function randomStrings(count: number, seed: number): string[] {
  const rng = new Rng(seed);
  return Array.from({ length: count }, () => {
    let s = '';
    for (let n = Math.floor(rng.next() * 4); n > 0; n--) s += PIECES[Math.floor(rng.next() * PIECES.length)];
    return s;
  });
}

const encoder = new TextEncoder();

describe('PackedStrings', () => {
  afterEach(() => vi.restoreAllMocks());

  it('keeps every item of many scripts, empty ones and a leading U+FEFF, and its hash, from bytes or from strings', () => {
    const strings = randomStrings(500, 3);
    const builder = new PackedStringsBuilder(strings.length, 0, 'test.gguf', 'item');
    for (const s of strings) builder.push(encoder.encode(s));
    for (const packed of [builder.finish(), PackedStrings.of(strings)]) {
      expect(packed.length).toBe(strings.length);
      expect(packed.toArray()).toEqual(strings);
      strings.forEach((s, i) => {
        expect(packed.at(i)).toBe(s);
        expect(packed.equals(i, s)).toBe(true);
        expect(packed.equals(i, `${s}x`)).toBe(false);
        expect(packed.ends[i]! - packed.start(i)).toBe(s.length);
        expect(packed.hashes[i]).toBe(utf8Hash(s));
      });
    }
  });

  it('names the first item that is not UTF-8 by its length and file position', () => {
    const builder = new PackedStringsBuilder(3, 100, 'test.gguf', "metadata 'tokens' item");
    builder.push(encoder.encode('ok'));
    builder.push(new Uint8Array([0x61, 0xff, 0x62]));
    builder.push(encoder.encode('ok'));
    const error = (() => {
      try {
        builder.finish();
      } catch (e) {
        return e;
      }
    })() as RayoError;
    expect(error).toBeInstanceOf(RayoError);
    expect(error.message).toMatch(/GGUF metadata 'tokens' item is not UTF-8/);
    // The second item's bytes follow the first's u64 length and 2 bytes, then its own u64 length.
    expect(error.actual).toBe(`3 bytes at ${100 + 8 + 2 + 8}`);
  });

  it('refuses an item that starts inside a character, though the joined bytes decode', () => {
    const builder = new PackedStringsBuilder(2, 0, 'test.gguf', 'item');
    builder.push(new Uint8Array([0xe2, 0x82]));
    builder.push(new Uint8Array([0xac]));
    expect(() => builder.finish()).toThrow(/item is not UTF-8/);
  });

  it('is how a file’s string array is read: its items are made only when its value is read', async () => {
    const tokens = randomStrings(3000, 5);
    const bytes = encodeGguf({
      metadata: [['tokens', { type: 'array', itemType: 'string', value: tokens }]],
      tensors: [],
    });
    const toArray = vi.spyOn(PackedStrings.prototype, 'toArray');
    for (const headerChunkBytes of [8, 100, 2 ** 20]) {
      toArray.mockClear();
      const gguf = await GgufFile.open(memoryFile(bytes), { headerChunkBytes });
      const entry = gguf.metadata.get('tokens');
      expect(entry?.type === 'array' && entry.itemType === 'string' && entry.packed?.toArray()).toEqual(
        tokens,
      );
      toArray.mockClear();
      expect(metadataArrayLength(gguf.metadata, 'tokens')).toBe(tokens.length);
      expect(toArray).not.toHaveBeenCalled();
      const value = entry?.value;
      expect(value).toEqual(tokens);
      expect(entry?.value).toBe(value);
      expect(toArray).toHaveBeenCalledTimes(1);
    }
  });
});
