import { gateUpSwiglu, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { expectAllAssembleCleanly, seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { FUSED_ENTRY } from './fused.js';
import { WG_ENTRY, type WgmmaVariant, wgmmaKey, wgmmaModule } from './matmulWgmma.js';
import { GATED_TILE_MIN_ROWS } from './matmulWgmmaGated.js';

const GATED: WgmmaVariant[] = (['bf16', 'f16'] as const).flatMap((dtype) =>
  ([256, 128] as const).map((bn) => ({ dtype, transA: false, transB: true, withC: false, gated: true, bn })),
);

describe('the gated wgmma product', () => {
  it('names the gating in its key and refuses layouts it does not read', () => {
    expect(wgmmaKey(GATED[0]!)).toBe('matmul/wgmma128x256x64s4/bf16/nt/swiglu');
    expect(() => wgmmaModule({ ...GATED[0]!, transB: false })).toThrow(/gated/);
    expect(() => wgmmaModule({ ...GATED[0]!, withC: true })).toThrow(/gated/);
  });
});

// gateUpSwiglu of many half rows on the fake sm_90 device: the gated wgmma
// kernel in the interpreter against the reference, y poisoned first.
for (const sms of [1, 132]) {
  describe(`gateUpSwiglu on tensor cores, ${sms} emulated SMs`, () => {
    const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: sms });
    const uniform = seededUniform(23 + sms, -1, 1);
    const random = (n: number) => Float32Array.from({ length: n }, uniform);
    // [M, K, N, dtype]: partial row and column tiles, K past one stage, an odd N (single stores);
    // one SM loops over every tile (wide tiles), 132 take one each (narrow tiles).
    const cases = [
      [130, 72, 200, 'bf16'],
      [40, 136, 71, 'f16'],
      [GATED_TILE_MIN_ROWS - 1, 64, 24, 'bf16'],
    ] as const;
    for (const [m, k, n, dtype] of cases) {
      it(`${m}×${k}→${n} ${dtype}`, async () => {
        const data = [random(m * k), random(n * k), random(n * k)];
        const shapes = [
          [m, k],
          [n, k],
          [n, k],
        ];
        const first = fake.launches.length;
        const y = gpu.upload(new Array<number>(m * n).fill(Number.NaN), [m, n], dtype);
        const [got] = gpu.run(
          gateUpSwiglu,
          data.map((d, i) => gpu.upload([...d], shapes[i]!, dtype)),
          {},
          { out: [y] },
        ) as Tensor[];
        const [want] = cpu.run(
          gateUpSwiglu,
          data.map((d, i) => cpu.upload([...d], shapes[i]!, dtype)),
        );
        const entries = fake.launches.slice(first).map((l) => l.entry);
        expect(entries).toEqual([m >= GATED_TILE_MIN_ROWS ? WG_ENTRY : FUSED_ENTRY]);
        // Products of half operands summed in f32, then silu · up rounded to the half dtype.
        const tolerance = { rtol: 1e-2, atol: 2e-3 * Math.sqrt(k) };
        expect(compareOutputs('f32', await got!.read(), await want!.read(), tolerance)).toBeUndefined();
      }, 300_000);
    }
  });
}

describe('gateUpSwiglu into a y that is not word-aligned (a view)', () => {
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 4 });
  const uniform = seededUniform(5, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);
  it('stores its halves one by one', async () => {
    const [m, k, n] = [40, 64, 24];
    const data = [random(m * k), random(n * k), random(n * k)];
    const shapes = [
      [m, k],
      [n, k],
      [n, k],
    ];
    // y one bf16 into a larger tensor: its base 2 bytes past a word.
    const base = gpu.upload(new Array<number>(m * n + 1).fill(Number.NaN), [m * n + 1], 'bf16');
    const y = base.slice(1, m * n).reshape([m, n]);
    const first = fake.launches.length;
    gpu.run(
      gateUpSwiglu,
      data.map((d, i) => gpu.upload(d, shapes[i]!, 'bf16')),
      {},
      { out: [y] },
    );
    expect(fake.launches.slice(first).map((l) => l.entry)).toEqual([WG_ENTRY]);
    const [want] = cpu.run(
      gateUpSwiglu,
      data.map((d, i) => cpu.upload(d, shapes[i]!, 'bf16')),
    );
    const tolerance = { rtol: 1e-2, atol: 2e-3 * Math.sqrt(k) };
    expect(compareOutputs('f32', await y.read(), await want!.read(), tolerance)).toBeUndefined();
  }, 300_000);
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`the gated wgmma product under ptxas (${gate.reason})`, () => {
  it('assembles for sm_90a without spills', () => {
    expectAllAssembleCleanly(
      GATED.map((v) => ({
        ptx: wgmmaModule(v).emit(),
        arch: 'sm_90a',
        what: wgmmaKey(v),
        maxRegisters: 168,
      })),
    );
  }, 300_000);
});
