import {
  causalAttention,
  type DType,
  f32ToBf16Bits,
  f32ToF16Bits,
  type HostArray,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { archJobs, expectAllAssembleCleanly, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { Operand } from '../kernel.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { mmaAttentionConfig, recordCausalAttention } from './causalAttention.js';
import {
  MMA_ENTRY,
  type MmaAttentionConfig,
  mmaAttentionKey,
  mmaAttentionModule,
} from './causalAttentionMma.js';
import {
  TILED_ENTRY,
  type TiledAttentionConfig,
  tiledAttentionKey,
  tiledAttentionModule,
} from './causalAttentionTiled.js';

// The kernels' results are checked by the conformance suite (emulated.test.ts
// and the GPU runs); here: which kernel a call gets, and ptxas on every variant.

const operand = (shape: number[], dtype: Operand['dtype'], ptr = 0x1000n): Operand => ({
  ptr,
  size: shape.reduce((a, b) => a * b, 1),
  shape,
  dtype,
  byteLength: 0,
});

describe('causalAttention kernel choice', () => {
  const sm90 = { computeCapability: [9, 0] as const };
  const call = (headDim: number, cache: Operand['dtype'], q: Operand['dtype'] = cache, ptr = 0x1000n) =>
    mmaAttentionConfig(
      sm90,
      operand([5, 8, headDim], q),
      operand([2, 64, headDim], cache, ptr),
      operand([2, 64, headDim], cache),
      operand([5, 8, headDim], q),
    );

  it('takes half caches with head dims 64 and 128 on tensor cores, q in f32 or the caches’ dtype', () => {
    expect(call(128, 'bf16')).toEqual({ headDim: 128, cache: 'bf16', q: 'bf16' });
    expect(call(64, 'f16')).toEqual({ headDim: 64, cache: 'f16', q: 'f16' });
    expect(call(128, 'bf16', 'f32')).toEqual({ headDim: 128, cache: 'bf16', q: 'f32' });
  });

  it('leaves f32 caches, other head dims, unaligned operands and pre-sm_80 devices to the tile kernel', () => {
    expect(call(128, 'f32')).toBeUndefined();
    expect(call(80, 'bf16')).toBeUndefined();
    expect(call(128, 'bf16', 'bf16', 0x1008n)).toBeUndefined();
    const q = operand([5, 8, 64], 'f16');
    const kv = operand([2, 64, 64], 'f16');
    expect(mmaAttentionConfig({ computeCapability: [7, 5] }, q, kv, kv, q)).toBeUndefined();
  });

  it('refuses a chunk whose row tiles exceed the grid, naming the kernel', () => {
    const launches: unknown[] = [];
    const encoder = {
      device: { computeCapability: [9, 0], maxGridDim: [2 ** 31 - 1, 4, 65535] },
      launch: (l: unknown) => launches.push(l),
    } as unknown as Parameters<typeof recordCausalAttention>[0];
    const kv = operand([2, 600, 64], 'bf16');
    const record = (tokens: number) =>
      recordCausalAttention(
        encoder,
        [operand([tokens, 8, 64], 'bf16'), kv, kv],
        operand([tokens, 8, 64], 'bf16'),
        0,
        0,
      );
    // 4 tiles of 64 rows: 64 tokens of 4 heads a kv head fit, 65 do not.
    record(64);
    expect(launches).toHaveLength(1);
    expect(() => record(65)).toThrow(UnsupportedOnBackendError);
    expect(() => record(65)).toThrow(/causalAttention/);
  });

  it('names modules by their configuration', () => {
    expect(mmaAttentionKey({ headDim: 128, cache: 'bf16', q: 'f32' })).toBe(
      'causalAttention/mma64x64/d128/f32_bf16',
    );
    expect(tiledAttentionKey({ headDim: 7, q: 'f32', cache: 'f32' })).toBe('causalAttention/tiled/d7');
  });
});

// The emulated device is an sm_90 part: half caches of head dim 64 take the tensor cores.
describe('causalAttention on an emulated device', () => {
  const { gpu, cpu, fake } = useEmulatedGpu({ multiprocessors: 2 });

  // [T, heads, kvHeads, headDim, position, maxSeq, q dtype, cache dtype, kernel]
  const CASES = [
    [70, 8, 2, 64, 30, 101, 'bf16', 'bf16', MMA_ENTRY],
    [9, 4, 1, 64, 120, 130, 'f32', 'f16', MMA_ENTRY],
    [21, 6, 3, 24, 5, 26, 'f32', 'f32', TILED_ENTRY],
    [6, 2, 2, 80, 0, 6, 'bf16', 'bf16', TILED_ENTRY],
  ] as const;
  for (const [tokens, heads, kvHeads, headDim, position, maxSeq, qType, cacheType, entry] of CASES) {
    it(`${tokens} tokens at ${position}, ${heads}/${kvHeads} heads of ${headDim}, q ${qType}, caches ${cacheType}: ${entry}`, async () => {
      const rng = new Rng(tokens * 31 + headDim);
      const shapes: number[][] = [
        [tokens, heads, headDim],
        [kvHeads, maxSeq, headDim],
        [kvHeads, maxSeq, headDim],
      ];
      const dtypes: DType[] = [qType, cacheType, cacheType];
      const data = shapes.map((shape, i): HostArray => {
        const values = Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng.uniform(-1, 1));
        if (dtypes[i] === 'f32') return Float32Array.from(values);
        return Uint16Array.from(values, dtypes[i] === 'bf16' ? f32ToBf16Bits : f32ToF16Bits);
      });
      const first = fake.launches.length;
      const [got] = gpu.run(
        causalAttention,
        data.map((d, i) => gpu.upload(d, shapes[i]!, dtypes[i])),
        { position },
      ) as Tensor[];
      const [want] = cpu.run(
        causalAttention,
        data.map((d, i) => cpu.upload(d, shapes[i]!, dtypes[i])),
        { position },
      );
      const tolerance = cacheType === 'f32' ? { rtol: 1e-4, atol: 2e-5 } : { rtol: 2e-2, atol: 2e-2 };
      expect(compareOutputs(qType, await got!.read(), await want!.read(), tolerance)).toBeUndefined();
      expect(fake.launches.slice(first).map((l) => l.entry)).toEqual([entry]);
    }, 120_000);
  }
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`causalAttention under ptxas (${gate.reason})`, () => {
  const mma: MmaAttentionConfig[] = [
    { headDim: 128, cache: 'bf16', q: 'bf16' },
    { headDim: 64, cache: 'f16', q: 'f16' },
    { headDim: 128, cache: 'bf16', q: 'f32' },
    { headDim: 64, cache: 'f16', q: 'f32' },
    // attrs.out: f32 q, a bf16 out (the o product's operand).
    { headDim: 64, cache: 'bf16', q: 'f32', out: 'bf16' },
  ];
  const tiled: TiledAttentionConfig[] = [
    { headDim: 128, q: 'f32', cache: 'f32' },
    { headDim: 7, q: 'f32', cache: 'f32' },
    { headDim: 80, q: 'bf16', cache: 'bf16' },
    { headDim: 256, q: 'f32', cache: 'f16' },
    { headDim: 64, q: 'f32', cache: 'bf16', out: 'bf16' },
  ];

  it('assembles the tensor-core kernel for sm_80 and sm_90 without spills', () => {
    expectAllAssembleCleanly(
      mma.flatMap((c) => archJobs(mmaAttentionModule(c).emit(), mmaAttentionKey(c), ['sm_80', 'sm_90'])),
    );
  }, 300_000);

  it('assembles the tile kernel for sm_75 and sm_90 without spills', () => {
    expectAllAssembleCleanly(
      tiled.flatMap((c) =>
        archJobs(tiledAttentionModule(c).emit(), tiledAttentionKey(c), ['sm_75', 'sm_90']),
      ),
    );
  }, 300_000);
});
