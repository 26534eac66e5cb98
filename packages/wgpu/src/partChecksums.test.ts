import { type DType, PART_CHECKSUM_BLOCK_BYTES, partChecksumReference, RayoError } from '@rayo/core';
import { Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

const BLOCK_WORDS = PART_CHECKSUM_BLOCK_BYTES / 4;

/** Random words as a host array of `dtype` with `count` elements (u32 words, or f16/u8-sized halves). */
function randomPart(rng: Rng, dtype: DType, count: number): Uint32Array | Uint16Array {
  const words = new Uint32Array(Math.ceil((count * (dtype === 'f16' ? 2 : 4)) / 4));
  for (let i = 0; i < words.length; i++) words[i] = Math.floor(rng.next() * 2 ** 32);
  return dtype === 'f16' ? new Uint16Array(words.buffer, 0, count) : words;
}

needsAdapter(`wgpu part checksums${unavailable ? ` (no adapter: ${unavailable})` : ''}`, () => {
  let backend: WgpuBackend;
  let windowed: WgpuBackend;
  beforeAll(async () => {
    backend = await WgpuBackend.create();
    // Bindings of two blocks: a part of several is hashed window by window.
    windowed = await WgpuBackend.create({ maxBindingBytes: 2 * PART_CHECKSUM_BLOCK_BYTES });
  });
  afterAll(() => {
    backend.dispose();
    windowed.dispose();
  });

  // Words and halves: tails of whole words and of two bytes, one block, block edges, several windows.
  const parts: [DType, number][] = [
    ['f16', 1],
    ['u32', 3],
    ['f16', 63],
    ['u32', 32],
    ['u32', 33],
    ['u32', BLOCK_WORDS - 1],
    ['u32', BLOCK_WORDS],
    ['f16', 2 * BLOCK_WORDS + 1],
    ['u32', 5 * BLOCK_WORDS + 37],
    ['f16', 9 * BLOCK_WORDS + 3],
  ];

  it.each([
    ['one binding', () => backend],
    ['windows of two blocks', () => windowed],
  ])('are core’s reference checksums of every part, computed on the device (%s)', async (_name, of) => {
    const gpu = of();
    const rng = new Rng(17);
    const hosts = parts.map(([dtype, count]) => randomPart(rng, dtype, count));
    const tensors = hosts.map((host, i) => gpu.upload(host, [host.length], parts[i]![0]));
    try {
      const sums = await gpu.partChecksums(tensors);
      expect([...sums]).toEqual(hosts.map((host) => partChecksumReference(host)));
    } finally {
      for (const t of tensors) t.dispose();
    }
  });

  it('sees one changed word of a large part', async () => {
    const rng = new Rng(5);
    const host = randomPart(rng, 'u32', 3 * BLOCK_WORDS + 7) as Uint32Array;
    const changed = host.slice();
    changed[2 * BLOCK_WORDS + 100]! ^= 1 << 9;
    const a = backend.upload(host, [host.length], 'u32');
    const b = backend.upload(changed, [changed.length], 'u32');
    try {
      const [x, y] = await backend.partChecksums([a, b]);
      expect(x).toBe(partChecksumReference(host));
      expect(y).toBe(partChecksumReference(changed));
      expect(x).not.toBe(y);
    } finally {
      a.dispose();
      b.dispose();
    }
  });

  it('refuses bindings smaller than one block by name', async () => {
    const small = await WgpuBackend.create({ maxBindingBytes: PART_CHECKSUM_BLOCK_BYTES / 2 });
    try {
      using t = small.upload(new Uint32Array(8), [8], 'u32');
      await expect(small.partChecksums([t])).rejects.toThrow(RayoError);
      await expect(small.partChecksums([t])).rejects.toThrow(/smaller than one checksum block/);
    } finally {
      small.dispose();
    }
  });
});
