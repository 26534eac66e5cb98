import { expectAssemblesCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { Operand } from '../kernel.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { mmaAttentionConfig } from './causalAttention.js';
import { type MmaAttentionConfig, mmaAttentionKey, mmaAttentionModule } from './causalAttentionMma.js';
import { type TiledAttentionConfig, tiledAttentionKey, tiledAttentionModule } from './causalAttentionTiled.js';

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

  it('names modules by their configuration', () => {
    expect(mmaAttentionKey({ headDim: 128, cache: 'bf16', q: 'f32' })).toBe('causalAttention/mma64x64/d128/f32_bf16');
    expect(tiledAttentionKey({ headDim: 7, q: 'f32', cache: 'f32' })).toBe('causalAttention/tiled/d7');
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`causalAttention under ptxas (${gate.reason})`, () => {
  const mma: MmaAttentionConfig[] = [
    { headDim: 128, cache: 'bf16', q: 'bf16' },
    { headDim: 64, cache: 'f16', q: 'f16' },
    { headDim: 128, cache: 'bf16', q: 'f32' },
    { headDim: 64, cache: 'f16', q: 'f32' },
  ];
  const tiled: TiledAttentionConfig[] = [
    { headDim: 128, q: 'f32', cache: 'f32' },
    { headDim: 7, q: 'f32', cache: 'f32' },
    { headDim: 80, q: 'bf16', cache: 'bf16' },
    { headDim: 256, q: 'f32', cache: 'f16' },
  ];

  it('assembles the tensor-core kernel for sm_80 and sm_90 without spills', () => {
    for (const c of mma) {
      for (const arch of ['sm_80', 'sm_90']) {
        expectAssemblesCleanly(mmaAttentionModule(c).emit(), arch, `${mmaAttentionKey(c)} ${arch}`);
      }
    }
  }, 300_000);

  it('assembles the tile kernel for sm_75 and sm_90 without spills', () => {
    for (const c of tiled) {
      for (const arch of ['sm_75', 'sm_90']) {
        expectAssemblesCleanly(tiledAttentionModule(c).emit(), arch, `${tiledAttentionKey(c)} ${arch}`);
      }
    }
  }, 300_000);
});
