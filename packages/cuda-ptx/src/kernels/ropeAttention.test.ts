import { ropeAttention, type Tensor, toHostArray } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';

// ropeAttention on the emulated sm_90 device: one tensor-core kernel over
// half caches, the rope and attention passes over f32 caches; the
// output and both caches against the reference, the new row included.

describe('ropeAttention on an emulated device', () => {
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 4 });
  const uniform = seededUniform(53, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);

  async function check(cache: 'bf16' | 'f16' | 'f32', layout: 'half' | 'interleaved', headDim: number) {
    const [heads, kvHeads, maxSeq, position] = [8, 2, 300, 237];
    const inputs = [
      [[heads + 2 * kvHeads, headDim], 'f32'],
      [[kvHeads, maxSeq, headDim], cache],
      [[kvHeads, maxSeq, headDim], cache],
      [[1], 'i32'],
    ] as const;
    const data = inputs.map(([shape, dtype], i) =>
      i === 3
        ? Int32Array.of(position)
        : toHostArray(dtype, random(shape.reduce((a: number, b: number) => a * b, 1))),
    );
    const first = fake.launches.length;
    const attrs = { layout, theta: 500000 };
    const got = gpu.run(
      ropeAttention,
      inputs.map(([shape, dtype], i) => gpu.upload(data[i]!, [...shape], dtype)),
      attrs,
    ) as Tensor[];
    const want = cpu.run(
      ropeAttention,
      inputs.map(([shape, dtype], i) => cpu.upload(data[i]!, [...shape], dtype)),
      attrs,
    ) as Tensor[];
    for (const [i, w] of want.entries()) {
      const tolerance = i === 0 ? { rtol: 1e-3, atol: 1e-4 } : { rtol: 1e-5, atol: 1e-6 };
      expect(compareOutputs(w.dtype, await got[i]!.read(), await w.read(), tolerance)).toBeUndefined();
    }
    return fake.launches.slice(first).map((l) => l.entry);
  }

  for (const cache of ['bf16', 'f16'] as const) {
    for (const [layout, headDim] of [
      ['half', 64],
      ['interleaved', 128],
    ] as const) {
      it(`${cache} caches, ${layout}, headDim ${headDim}: one tensor-core kernel, its last blocks merging the splits`, async () => {
        expect(await check(cache, layout, headDim)).toEqual(['attention_mma_split']);
      }, 120_000);
    }
  }

  it('f32 caches: the rope pass, then the attention', async () => {
    const entries = await check('f32', 'half', 64);
    expect(entries[0]).toBe('rope_kv_scatter');
    expect(entries.slice(1).some((e) => e.startsWith('attention'))).toBe(true);
  }, 120_000);
});
