import { createCpuBackend, gateUpSwiglu, type HostArray, rmsNormMatmul, rmsNormMatmul3 } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from '../backend.js';
import { backendProvider } from '../index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

// A 4 KiB binding limit makes the weights go in pieces of whole rows, each
// piece its own dispatch writing its columns of y. Without the subgroups
// feature the shaders sum each group in workgroup memory only.
needsAdapter('fused kernels with weights larger than one storage binding', () => {
  let gpu: WgpuBackend;
  const cpu = createCpuBackend();
  beforeAll(async () => {
    gpu = await WgpuBackend.create({ maxBindingBytes: 4096, withoutFeatures: ['subgroups'] });
  });
  afterAll(() => gpu.dispose());

  for (const [m, k, n, norm] of [
    [1, 64, 67, false],
    [3, 128, 41, true],
  ] as const) {
    it(`${m}×${k}→${n}${norm ? ' rmsNorm' : ''} matches the cpu backend`, async () => {
      const rng = new Rng(m * 1000 + k + n);
      const shapes: number[][] = [[m, k], [n, k], [n, k], ...(norm ? [[k]] : [])];
      const data = shapes.map((s) =>
        Float32Array.from({ length: s[0]! * (s[1] ?? 1) }, () => rng.uniform(-1, 1)),
      );
      const expected = cpu.run(
        gateUpSwiglu,
        data.map((d, i) => cpu.upload(d, shapes[i]!)),
      )[0]!;
      const inputs = data.map((d, i) => gpu.upload(d, shapes[i]!));
      expect(inputs[1]!.byteLength).toBeGreaterThan(gpu.maxBindingBytes);
      const actual = gpu.run(gateUpSwiglu, inputs)[0]!;
      const mismatch = compareOutputs('f32', (await actual.read()) as HostArray, await expected.read(), {
        rtol: 1e-4,
        atol: 4e-5 * k,
      });
      expect(mismatch).toBeUndefined();
    });
  }

  it('rmsNormMatmul 2×64→131 matches the cpu backend', async () => {
    const rng = new Rng(5);
    const shapes = [[2, 64], [64], [131, 64]];
    const data = shapes.map((s) =>
      Float32Array.from({ length: s[0]! * (s[1] ?? 1) }, () => rng.uniform(-1, 1)),
    );
    const expected = cpu.run(
      rmsNormMatmul,
      data.map((d, i) => cpu.upload(d, shapes[i]!)),
    )[0]!;
    const inputs = data.map((d, i) => gpu.upload(d, shapes[i]!));
    expect(inputs[2]!.byteLength).toBeGreaterThan(gpu.maxBindingBytes);
    const actual = gpu.run(rmsNormMatmul, inputs)[0]!;
    const mismatch = compareOutputs('f32', (await actual.read()) as HostArray, await expected.read(), {
      rtol: 1e-4,
      atol: 5e-4,
    });
    expect(mismatch).toBeUndefined();
  });

  // Weights in pieces go one weight at a time; weights that each fit one
  // binding share one dispatch, here summed in workgroup memory.
  for (const [m, k, ns] of [
    [2, 64, [131, 5, 3]],
    [5, 129, [7, 3, 1]],
    [1, 28, [9, 2]],
  ] as const) {
    it(`rmsNormMatmul3 ${m}×${k}→${ns.join('+')} matches the cpu backend`, async () => {
      const rng = new Rng(m * 100 + k);
      const shapes = [[m, k], [k], ...ns.map((n) => [n, k])];
      const data = shapes.map((s) =>
        Float32Array.from({ length: s[0]! * (s[1] ?? 1) }, () => rng.uniform(-1, 1)),
      );
      const expected = cpu.run(
        rmsNormMatmul3,
        data.map((d, i) => cpu.upload(d, shapes[i]!)),
      );
      const out = ns.map((n) =>
        gpu.upload(
          Float32Array.from({ length: m * n }, () => Number.NaN),
          [m, n],
        ),
      );
      gpu.run(
        rmsNormMatmul3,
        data.map((d, i) => gpu.upload(d, shapes[i]!)),
        {},
        { out },
      );
      for (let i = 0; i < ns.length; i++) {
        const mismatch = compareOutputs(
          'f32',
          (await out[i]!.read()) as HostArray,
          await expected[i]!.read(),
          {
            rtol: 1e-4,
            atol: 5e-4,
          },
        );
        expect(mismatch).toBeUndefined();
      }
    });
  }
});
