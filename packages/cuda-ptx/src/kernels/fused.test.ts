import { gateUpSwiglu, rmsNormMatmul, rmsNormMatmul3, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { useEmulatedGpu } from '../testing/emulatedGpu.js';
import { expectAssemblesCleanly } from '../testing/expectAssembles.js';
import { FUSED_KERNELS, FUSED_MAX_ROWS, type FusedVariant, fusedKey, fusedModule } from './fused.js';

const variants: FusedVariant[] = [
  ...[1, 2, 3, 4, 8, 9, FUSED_MAX_ROWS].flatMap((rows) =>
    [false, true].flatMap((vec) => [false, true].map((norm) => ({ gated: true, rows, vec, norm }))),
  ),
  ...[1, 2, 4, 8, FUSED_MAX_ROWS].flatMap((rows) =>
    [false, true].map((vec) => ({ gated: false, rows, vec, norm: true })),
  ),
  ...[2, 3].flatMap((weights) =>
    [1, 2, 9, FUSED_MAX_ROWS].flatMap((rows) =>
      [false, true].map((vec) => ({ gated: false, weights, rows, vec, norm: true })),
    ),
  ),
];

describe('fused streaming kernels', () => {
  it('implements gateUpSwiglu and rmsNormMatmul', () => {
    expect(FUSED_KERNELS.map((k) => k.spec.name)).toEqual([
      'gateUpSwiglu',
      'rmsNormMatmul',
      'rmsNormMatmul3',
    ]);
  });

  it('reads both weights with .v4 through the non-coherent cache and writes only y', () => {
    const text = fusedModule({ gated: true, rows: 1, vec: true, norm: true }).emit();
    // Two weights, the norm weight and x, per step, unrolled 4 times.
    expect(text.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(4 * 4 + 4);
    expect(text.match(/st\.global/g)).toHaveLength(1);
    expect(text).not.toContain('bar.sync');
    expect(text).toContain('sqrt.rn.f32');
    expect(fusedModule({ gated: true, rows: 1, vec: true, norm: false }).emit()).not.toContain('sqrt');
    // One weight, the norm weight and x; no silu (no exponential).
    const plain = fusedModule({ gated: false, rows: 1, vec: true, norm: true }).emit();
    expect(plain.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(3 * 4 + 3);
    expect(plain).not.toContain('ex2');
  });

  it('names the variant in the key and refuses more rows than a block takes', () => {
    expect(fusedKey({ gated: true, rows: 3, vec: true, norm: true })).toBe('fused/gateUpSwiglu/m3/v4/norm');
    expect(fusedKey({ gated: false, rows: 1, vec: false, norm: true })).toBe(
      'fused/rmsNormMatmul/m1/scalar/norm',
    );
    expect(() => fusedModule({ gated: true, rows: FUSED_MAX_ROWS + 1, vec: true, norm: false })).toThrow(
      /rows/,
    );
    expect(fusedKey({ gated: false, weights: 3, rows: 1, vec: true, norm: true })).toBe(
      'fused/rmsNormMatmul3/w3/m1/v4/norm',
    );
    expect(() => fusedModule({ gated: false, weights: 4, rows: 1, vec: true, norm: true })).toThrow(
      /weights/,
    );
    expect(() => fusedModule({ gated: true, weights: 2, rows: 1, vec: true, norm: true })).toThrow(/weights/);
  });

  it('streams one weight per warp whichever of the three it is, and stores once', () => {
    const text = fusedModule({ gated: false, weights: 3, rows: 1, vec: true, norm: true }).emit();
    expect(text.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(3 * 4 + 3);
    expect(text.match(/st\.global/g)).toHaveLength(1);
    expect(text.match(/selp\.u64/g)).toHaveLength(2 * 2);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`fused PTX assembles with ptxas, without spills (${gate.reason})`, () => {
  it('every row count, layout and norm', () => {
    for (const v of variants) {
      for (const arch of ['sm_90', DEFAULT_TARGET]) {
        expectAssemblesCleanly(fusedModule(v).emit(), arch, `${fusedKey(v)} ${arch}`);
      }
    }
  }, 120_000);
});

// One SM: a grid of a few blocks, long loops over K, and more rows than one
// block takes (blockIdx.y steps through them).
describe('gateUpSwiglu on a one-SM emulated device', () => {
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 1 });
  let seed = 11;
  const random = (n: number) =>
    Float32Array.from({ length: n }, () => {
      seed = (seed * 16807) % 2147483647;
      return (seed / 2147483647) * 2 - 1;
    });

  for (const [m, k, n, norm] of [
    [1, 4096, 37, true],
    [1, 1027, 29, false],
    [11, 516, 19, true],
  ] as const) {
    it(`${m}×${k}→${n}${norm ? ' rmsNorm' : ''}`, async () => {
      const shapes: number[][] = [[m, k], [n, k], [n, k], ...(norm ? [[k]] : [])];
      const data = shapes.map((s) => random(s.reduce((a, b) => a * b, 1)));
      const first = fake.launches.length;
      const [y] = gpu.run(
        gateUpSwiglu,
        data.map((d, i) => gpu.upload(d, shapes[i]!)),
      ) as Tensor[];
      const [want] = cpu.run(
        gateUpSwiglu,
        data.map((d, i) => cpu.upload(d, shapes[i]!)),
      );
      expect(
        compareOutputs('f32', await y!.read(), await want!.read(), { rtol: 1e-4, atol: 4e-5 * k }),
      ).toBeUndefined();
      // One launch, whatever M.
      expect(fake.launches.length - first).toBe(1);
    });
  }

  for (const [m, k, n] of [
    [1, 4096, 41],
    [13, 260, 17],
  ] as const) {
    it(`rmsNormMatmul ${m}×${k}→${n}`, async () => {
      const shapes: number[][] = [[m, k], [k], [n, k]];
      const data = shapes.map((s) => random(s.reduce((a, b) => a * b, 1)));
      const [y] = gpu.run(
        rmsNormMatmul,
        data.map((d, i) => gpu.upload(d, shapes[i]!)),
      ) as Tensor[];
      const [want] = cpu.run(
        rmsNormMatmul,
        data.map((d, i) => cpu.upload(d, shapes[i]!)),
      );
      expect(
        compareOutputs('f32', await y!.read(), await want!.read(), { rtol: 1e-4, atol: 5e-5 * Math.sqrt(k) }),
      ).toBeUndefined();
    });
  }

  // Column splits inside a block and across blocks (8 columns a block), a
  // weight of one row, K with and without .v4, M past a block's rows.
  for (const [m, k, ns] of [
    [1, 4096, [37, 9, 9]],
    [1, 1027, [5, 1, 3]],
    [13, 260, [17, 8, 1]],
    [3, 131, [11, 6]],
    [2, 64, [7]],
  ] as const) {
    it(`rmsNormMatmul3 ${m}×${k}→${ns.join('+')}`, async () => {
      const shapes: number[][] = [[m, k], [k], ...ns.map((n) => [n, k])];
      const data = shapes.map((s) => random(s.reduce((a, b) => a * b, 1)));
      const first = fake.launches.length;
      const outs = ns.map((n) =>
        gpu.upload(
          Float32Array.from({ length: m * n }, () => Number.NaN),
          [m, n],
        ),
      );
      gpu.run(
        rmsNormMatmul3,
        data.map((d, i) => gpu.upload(d, shapes[i]!)),
        {},
        { out: outs },
      );
      expect(fake.launches.length - first).toBe(1);
      const want = cpu.run(
        rmsNormMatmul3,
        data.map((d, i) => cpu.upload(d, shapes[i]!)),
      );
      expect(want).toHaveLength(ns.length);
      for (let i = 0; i < ns.length; i++) {
        expect(
          compareOutputs('f32', await outs[i]!.read(), await want[i]!.read(), {
            rtol: 1e-4,
            atol: 5e-5 * Math.sqrt(k),
          }),
        ).toBeUndefined();
      }
    });
  }
});
