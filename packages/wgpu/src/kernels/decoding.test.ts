import { incrementalAttention, kvCacheScatter, rope, ropeAttention, ropeKvScatter } from '@rayo/core';
import { Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from '../backend.js';
import { backendProvider } from '../index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

function random(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform(-1, 1) || 0.375);
}

needsAdapter('wgpu decoding with positions and lengths on the device', () => {
  let backend: WgpuBackend;
  beforeAll(async () => {
    backend = await WgpuBackend.create();
  });
  afterAll(() => backend.dispose());

  it('a warm decode step replays with new positions and lengths and creates no GPU objects', async () => {
    const rng = new Rng(3);
    const [nHeads, nKvHeads, headDim, maxSeq] = [8, 2, 64, 300];
    using kCache = backend.upload(random(rng, nKvHeads * maxSeq * headDim), [nKvHeads, maxSeq, headDim]);
    using vCache = backend.upload(random(rng, nKvHeads * maxSeq * headDim), [nKvHeads, maxSeq, headDim]);
    using q = backend.upload(random(rng, nHeads * headDim), [1, nHeads, headDim]);
    using kRow = backend.upload(random(rng, nKvHeads * headDim), [nKvHeads * headDim]);
    using qAttn = backend.upload(random(rng, nHeads * headDim), [nHeads, headDim]);
    using position = backend.upload(Int32Array.of(10), [1], 'i32');
    using seqLen = backend.upload(Int32Array.of(11), [1], 'i32');
    const batch = backend.batch();
    using qRot = batch.run(rope, [q, position])[0]!;
    batch.run(kvCacheScatter, [kCache, kRow, position]);
    using out = batch.run(incrementalAttention, [qAttn, kCache, vCache, seqLen])[0]!;
    await batch.submit();
    // Reads take staging buffers from a pool: warm it too.
    await out.read();
    await qRot.read();
    const warm = backend.objectCounts();
    const seen = new Set<string>();
    for (const p of [11, 200, 299, 0]) {
      backend.write(position, [p]);
      backend.write(seqLen, [p + 1]);
      await batch.submit();
      seen.add(Array.from(await out.read()).join());
      seen.add(Array.from(await qRot.read()).join());
    }
    // Every replay computed something new: the values were read on the device.
    expect(seen.size).toBe(8);
    expect(backend.objectCounts()).toEqual(warm);
  });

  it('a device position past the cache writes nothing, and a length outside it reads nothing', async () => {
    const rng = new Rng(4);
    const [nKvHeads, maxSeq, headDim] = [2, 9, 8];
    const cacheData = random(rng, nKvHeads * maxSeq * headDim);
    using cache = backend.upload(cacheData, [nKvHeads, maxSeq, headDim]);
    using rows = backend.upload(random(rng, 3 * nKvHeads * headDim), [3, nKvHeads * headDim]);
    using at = backend.upload(Int32Array.of(0), [1], 'i32');
    using q = backend.upload(random(rng, 4 * headDim), [4, headDim]);
    using length = backend.upload(Int32Array.of(1), [1], 'i32');
    for (const position of [7, 9, -1, 2 ** 31 - 1]) {
      backend.write(at, [position]);
      backend.run(kvCacheScatter, [cache, rows, at]);
      expect(await cache.read()).toEqual(cacheData);
    }
    for (const seqLen of [0, -5, maxSeq + 1]) {
      backend.write(length, [seqLen]);
      using out = backend.run(incrementalAttention, [q, cache, cache, length])[0]!;
      expect(Array.from(await out.read()).every(Number.isNaN)).toBe(true);
    }
  });
  it('ropeKvScatter rotates a half q over half caches in place: one shader, no casts around it', async () => {
    const fresh = await WgpuBackend.create();
    const rng = new Rng(6);
    const [tokens, heads, kvHeads, headDim, maxSeq] = [2, 4, 2, 8, 5];
    const half = (values: Float32Array, shape: number[]) => fresh.upload(Array.from(values), shape, 'bf16');
    using kCache = half(random(rng, kvHeads * maxSeq * headDim), [kvHeads, maxSeq, headDim]);
    using vCache = half(random(rng, kvHeads * maxSeq * headDim), [kvHeads, maxSeq, headDim]);
    using qkv = half(random(rng, tokens * (heads + 2 * kvHeads) * headDim), [
      tokens,
      heads + 2 * kvHeads,
      headDim,
    ]);
    for (const layout of ['half', 'interleaved'] as const) {
      using y = fresh.run(ropeKvScatter, [qkv, undefined, undefined, kCache, vCache], {
        position: 1,
        layout,
      })[0]!;
      expect(y.dtype).toBe('bf16');
      await y.read();
    }
    const keys = fresh.pipelines.compiledShaders().map((s) => s.key);
    expect(keys.filter((key) => key.startsWith('decoding/ropeKvScatter/'))).toEqual([
      `decoding/ropeKvScatter/fused/bf16/values-bf16/q-half/half/wg256`,
      `decoding/ropeKvScatter/fused/bf16/values-bf16/q-half/interleaved/wg256`,
    ]);
    expect(keys.some((key) => key.startsWith('cast/'))).toBe(false);
    fresh.dispose();
  });

  it('ropeAttention over an f32 fused row is one split shader that rotates and writes the row itself', async () => {
    const fresh = await WgpuBackend.create();
    const rng = new Rng(8);
    const [heads, kvHeads, headDim, maxSeq] = [8, 2, 64, 300];
    const cache = () => Array.from(random(rng, kvHeads * maxSeq * headDim));
    using kCache = fresh.upload(cache(), [kvHeads, maxSeq, headDim], 'bf16');
    using vCache = fresh.upload(cache(), [kvHeads, maxSeq, headDim], 'bf16');
    using qkv = fresh.upload(random(rng, (heads + 2 * kvHeads) * headDim), [heads + 2 * kvHeads, headDim]);
    using at = fresh.upload(Int32Array.of(200), [1], 'i32');
    using out = fresh.run(ropeAttention, [qkv, kCache, vCache, at], { layout: 'half' })[0]!;
    await out.read();
    const keys = fresh.pipelines.compiledShaders().map((s) => s.key);
    expect(keys.filter((key) => key.startsWith('decoding/ropeKvScatter/'))).toEqual([]);
    // 2 kv heads fill few workgroups: one query head each, 4 K rows a lane group, 8 V rows a step.
    expect(keys.filter((key) => key.includes('/rope-half'))).toEqual([
      'decoding/incrementalAttention/split/d64/h1/k4/r4/u8/c256/partial/device-position/rope-half/cache-bf16/wg256',
    ]);
    // A device position past the cache writes nothing.
    const [kData, vData] = [await kCache.read(), await vCache.read()];
    for (const position of [maxSeq, -1, 2 ** 31 - 1]) {
      fresh.write(at, [position]);
      using past = fresh.run(ropeAttention, [qkv, kCache, vCache, at], { layout: 'half' })[0]!;
      await past.read();
      expect(await kCache.read()).toEqual(kData);
      expect(await vCache.read()).toEqual(vData);
    }
    fresh.dispose();
  });

  it('ropeKvScatter at a device position past the cache writes nothing to the caches', async () => {
    const rng = new Rng(5);
    const [tokens, heads, kvHeads, headDim, maxSeq] = [3, 4, 2, 8, 9];
    const kData = random(rng, kvHeads * maxSeq * headDim);
    const vData = random(rng, kvHeads * maxSeq * headDim);
    using kCache = backend.upload(kData, [kvHeads, maxSeq, headDim]);
    using vCache = backend.upload(vData, [kvHeads, maxSeq, headDim]);
    using q = backend.upload(random(rng, tokens * heads * headDim), [tokens, heads, headDim]);
    using rows = backend.upload(random(rng, tokens * kvHeads * headDim), [tokens, kvHeads * headDim]);
    using at = backend.upload(Int32Array.of(0), [1], 'i32');
    for (const position of [7, 9, -1, 2 ** 31 - 1]) {
      backend.write(at, [position]);
      using y = backend.run(ropeKvScatter, [q, rows, rows, kCache, vCache, at])[0]!;
      await y.read();
      expect(await kCache.read()).toEqual(kData);
      expect(await vCache.read()).toEqual(vData);
    }
  });
});
