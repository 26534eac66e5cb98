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
  // GGUF's Q6_K as q6k: an odd count of f16 d, its int8 sub-block scales in zeros.
  d: {
    format: 'q6k',
    n: 3,
    k: 256,
    scaleDType: 'f16',
    packed: counting(3 * 48, 11),
    scales: Uint16Array.from([300, 301, 302]),
    zeros: counting(3 * 4, 13),
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
    expect(store.reused).toBe(4);
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
      [
        'a.packed',
        'a.scales',
        'a.zeros',
        'b.offsets',
        'b.packed',
        'b.scales',
        'c.packed',
        'c.scales',
        'd.packed',
        'd.scales',
        'd.zeros',
      ].map((part) => `${PREPARED_DATA} (${part})`),
    );
  });

  describe('read ahead', () => {
    /** `folder` with the slices read of its data file counted. */
    function counted(folder: OpfsDirectory) {
      const slices: number[] = [];
      const wrapped: OpfsDirectory = {
        ...folder,
        async getFileHandle(name, options) {
          const handle = await folder.getFileHandle(name, options);
          if (name !== PREPARED_DATA) return handle;
          return {
            ...handle,
            async getFile() {
              const blob = await handle.getFile();
              const slice = (start?: number, end?: number) => {
                slices.push(start ?? 0);
                return blob.slice(start, end);
              };
              return { size: blob.size, slice, text: () => blob.text() } as unknown as Blob;
            },
          };
        },
      };
      return { folder: wrapped, slices };
    }
    it('reads the first tensors before any is asked for, and each once', async () => {
      const { folder, slices } = counted(await preparedFolder());
      const store = new OpfsPreparedWeights(folder, FILE, URL);
      await store.readAhead();
      // The first and the two read ahead of it.
      expect(slices).toHaveLength(3);
      for (const [name, weight] of Object.entries(WEIGHTS)) {
        expect(partsOf((await store.read(name))!)).toEqual(partsOf(weight));
      }
      expect(slices).toHaveLength(4);
      expect(store.reused).toBe(4);
    });

    it('leaves a store with nothing kept to write its tensors', async () => {
      const folder = memoryDirectory();
      await writeFile(folder, FILE, new Uint8Array(64).fill(7));
      const store = new OpfsPreparedWeights(folder, FILE, URL);
      await store.readAhead();
      for (const [name, weight] of Object.entries(WEIGHTS)) {
        expect(await store.read(name)).toBeUndefined();
        await store.write(name, weight);
      }
      await store.end(true);
      const again = new OpfsPreparedWeights(folder, FILE, URL);
      expect(partsOf((await again.read('b'))!)).toEqual(partsOf(WEIGHTS.b!));
    });

    it('refuses a changed byte when the tensor is asked for', async () => {
      const folder = await preparedFolder();
      const data = new Uint8Array(
        await (await (await folder.getFileHandle(PREPARED_DATA)).getFile()).arrayBuffer(),
      );
      data[data.length >> 1]! ^= 0x10;
      await writeFile(folder, PREPARED_DATA, data);
      const store = new OpfsPreparedWeights(folder, FILE, URL);
      await store.readAhead();
      const error = await (async () => {
        for (const name of Object.keys(WEIGHTS)) await store.read(name);
      })().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PreparedDataError);
    });
  });
});
