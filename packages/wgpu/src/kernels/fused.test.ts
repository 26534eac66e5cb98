import {
  type AnyKernelSpec,
  createCpuBackend,
  gateUpSwiglu,
  type HostArray,
  rmsNormMatmul,
  rmsNormMatmul3,
  type Tensor,
} from '@rayo/core';
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

  /** Random operands of `shapes` on the device, and the cpu backend's outputs of `spec` for the same values. */
  function operands(spec: AnyKernelSpec, shapes: readonly (readonly number[])[], rng: Rng) {
    const data = shapes.map((s) =>
      Float32Array.from({ length: s[0]! * (s[1] ?? 1) }, () => rng.uniform(-1, 1)),
    );
    const expected = cpu.run(
      spec,
      data.map((d, i) => cpu.upload(d, shapes[i]!)),
    );
    return { inputs: data.map((d, i) => gpu.upload(d, shapes[i]!)), expected };
  }

  async function expectClose(actual: Tensor, expected: Tensor, atol: number): Promise<void> {
    const mismatch = compareOutputs('f32', (await actual.read()) as HostArray, await expected.read(), {
      rtol: 1e-4,
      atol,
    });
    expect(mismatch).toBeUndefined();
  }

  for (const [m, k, n, norm] of [
    [1, 64, 67, false],
    [3, 128, 41, true],
  ] as const) {
    it(`${m}×${k}→${n}${norm ? ' rmsNorm' : ''} matches the cpu backend`, async () => {
      const shapes = [[m, k], [n, k], [n, k], ...(norm ? [[k]] : [])];
      const { inputs, expected } = operands(gateUpSwiglu, shapes, new Rng(m * 1000 + k + n));
      expect(inputs[1]!.byteLength).toBeGreaterThan(gpu.maxBindingBytes);
      await expectClose(gpu.run(gateUpSwiglu, inputs)[0]!, expected[0]!, 4e-5 * k);
    });
  }

  it('rmsNormMatmul 2×64→131 matches the cpu backend', async () => {
    const { inputs, expected } = operands(rmsNormMatmul, [[2, 64], [64], [131, 64]], new Rng(5));
    expect(inputs[2]!.byteLength).toBeGreaterThan(gpu.maxBindingBytes);
    await expectClose(gpu.run(rmsNormMatmul, inputs)[0]!, expected[0]!, 5e-4);
  });

  // Weights in pieces go one weight at a time; weights that each fit one
  // binding share one dispatch, here summed in workgroup memory.
  for (const [m, k, ns] of [
    [2, 64, [131, 5, 3]],
    [5, 129, [7, 3, 1]],
    [1, 28, [9, 2]],
  ] as const) {
    it(`rmsNormMatmul3 ${m}×${k}→${ns.join('+')} matches the cpu backend`, async () => {
      const shapes = [[m, k], [k], ...ns.map((n) => [n, k])];
      const { inputs, expected } = operands(rmsNormMatmul3, shapes, new Rng(m * 100 + k));
      const out = ns.map((n) =>
        gpu.upload(
          Float32Array.from({ length: m * n }, () => Number.NaN),
          [m, n],
        ),
      );
      gpu.run(rmsNormMatmul3, inputs, {}, { out });
      for (let i = 0; i < ns.length; i++) await expectClose(out[i]!, expected[i]!, 5e-4);
    });
  }
});
