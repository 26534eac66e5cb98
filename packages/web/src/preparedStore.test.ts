import type { QuantizedHostWeight, RayoError } from '@rayo/core';
import { memoryDirectory } from '@rayo/web-testkit';
import { describe, expect, it } from 'vitest';
import type { OpfsDirectory } from './opfs.js';
import { OpfsPreparedWeights, PREPARED_DATA, PreparedDataError } from './preparedStore.js';

// The prepared store's reads: each tensor read with one slice, its parts as
// views where they lie aligned and copies where they do not, each part
// checked; any changed byte is refused by the name of its tensor and part.

const FILE = 'model-file';
const URL = 'https://example.test/model.gguf';

async function writeFile(folder: OpfsDirectory, name: string, bytes: Uint8Array): Promise<void> {
  const writable = await (await folder.getFileHandle(name, { create: true })).createWritable();
  await writable.write({ type: 'write', position: 0, data: bytes });
  await writable.close();
}

const counting = (n: number, from: number) => Uint32Array.from({ length: n }, (_, i) => from + i * 7919);

/**
 * Tensors whose parts fall at every alignment: odd counts of f16 scales
 * put the u32 zeros after them at 2 bytes past a word, and the tensors
 * after them there too.
 */
const WEIGHTS: Record<string, QuantizedHostWeight> = {
  a: {
    format: 'q4g32',
    n: 3,
    k: 32,
    scaleDType: 'f16',
    packed: counting(12, 1),
    scales: Uint16Array.from([1, 2, 3]),
    zeros: counting(3, 5),
  },
  b: {
    format: 'q4g32a',
    n: 1,
    k: 256,
    scaleDType: 'f16',
    packed: counting(32, 9),
    scales: Uint16Array.from({ length: 8 }, (_, i) => 100 + i),
    offsets: Uint16Array.from({ length: 8 }, (_, i) => 200 + i),
  },
  c: {
    format: 'q8',
    n: 2,
    k: 32,
    scaleDType: 'f32',
    packed: counting(16, 3),
    scales: Float32Array.from([0.5, 0.25]),
  },
};

/** A model folder with a source file and the prepared data of `WEIGHTS`, written as a first load does. */
async function preparedFolder(): Promise<OpfsDirectory> {
  const folder = memoryDirectory();
  await writeFile(folder, FILE, new Uint8Array(64).fill(7));
  const store = new OpfsPreparedWeights(folder, FILE, URL);
  for (const [name, weight] of Object.entries(WEIGHTS)) {
    expect(await store.read(name)).toBeUndefined();
    await store.write(name, weight);
  }
  await store.end(true);
  return folder;
}

const partsOf = (w: QuantizedHostWeight) =>
  Object.fromEntries(
    (['packed', 'scales', 'zeros', 'offsets'] as const).flatMap((p) => (w[p] ? [[p, [...w[p]!]]] : [])),
  );

describe('OpfsPreparedWeights', () => {
  it('reads back every part of every tensor as written, whatever its alignment', async () => {
    const store = new OpfsPreparedWeights(await preparedFolder(), FILE, URL);
    for (const [name, weight] of Object.entries(WEIGHTS)) {
      const read = (await store.read(name))!;
      expect(read).toMatchObject({ format: weight.format, n: weight.n, k: weight.k });
      expect(partsOf(read)).toEqual(partsOf(weight));
      expect(read.packed).toBeInstanceOf(Uint32Array);
      expect(read.scales).toBeInstanceOf(weight.scaleDType === 'f32' ? Float32Array : Uint16Array);
    }
    expect(store.reused).toBe(3);
    await store.end(true);
  });

  it('refuses any changed byte, naming the tensor and part, whichever tensor is read first', async () => {
    const folder = await preparedFolder();
    const data = new Uint8Array(
      await (await (await folder.getFileHandle(PREPARED_DATA)).getFile()).arrayBuffer(),
    );
    const refusals = new Set<string>();
    for (let at = 0; at < data.length; at++) {
      const damaged = data.slice();
      damaged[at]! ^= 0x01;
      await writeFile(folder, PREPARED_DATA, damaged);
      const store = new OpfsPreparedWeights(folder, FILE, URL);
      const error = await (async () => {
        for (const name of Object.keys(WEIGHTS)) await store.read(name);
      })().catch((e: unknown) => e);
      expect(error, `byte ${at}`).toBeInstanceOf(PreparedDataError);
      refusals.add((error as RayoError).argument!);
    }
    expect([...refusals].sort()).toEqual(
      ['a.packed', 'a.scales', 'a.zeros', 'b.offsets', 'b.packed', 'b.scales', 'c.packed', 'c.scales'].map(
        (part) => `${PREPARED_DATA} (${part})`,
      ),
    );
  });
});
