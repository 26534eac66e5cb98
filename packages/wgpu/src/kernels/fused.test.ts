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

// One-row products over one weight may give each group of 32 lanes 2 or 4
// columns (the `fusedColumns` switch forces it here): odd N leaves a last
// group with columns past the end, K not a multiple of 8 takes the scalar
// loads of bf16, and rows of x past one fall back to a column a group.
for (const fusedColumns of [2, 4] as const) {
  for (const features of [[], ['subgroups']] as const) {
    needsAdapter(
      `fused products, ${fusedColumns} columns a group${features.length ? ', no subgroups' : ''}`,
      () => {
        let gpu: WgpuBackend;
        const cpu = createCpuBackend();
        beforeAll(async () => {
          gpu = await WgpuBackend.create({ fusedColumns, withoutFeatures: [...features] });
        });
        afterAll(() => gpu.dispose());

        const cases: readonly {
          spec: typeof gateUpSwiglu | typeof rmsNormMatmul;
          shapes: readonly (readonly number[])[];
          weights: readonly number[];
        }[] = [
          { spec: gateUpSwiglu, shapes: [[1, 64], [67, 64], [67, 64], [64]], weights: [1, 2] },
          {
            spec: gateUpSwiglu,
            shapes: [
              [1, 72],
              [45, 72],
              [45, 72],
            ],
            weights: [1, 2],
          },
          { spec: gateUpSwiglu, shapes: [[3, 64], [37, 64], [37, 64], [64]], weights: [1, 2] },
          { spec: rmsNormMatmul, shapes: [[1, 128], [128], [131, 128]], weights: [2] },
          { spec: rmsNormMatmul, shapes: [[1, 36], [36], [9, 36]], weights: [2] },
        ];
        for (const { spec, shapes, weights } of cases) {
          for (const dtype of ['f32', 'bf16'] as const) {
            const label = `${spec.name} ${shapes.map((s) => s.join('×')).join(', ')}, ${dtype} weights`;
            it(`${label} matches the cpu backend`, async () => {
              const rng = new Rng(shapes.flat().reduce((a, b) => a * 31 + b, fusedColumns));
              const data = shapes.map((s) =>
                Float32Array.from({ length: s[0]! * (s[1] ?? 1) }, () => rng.uniform(-1, 1)),
              );
              const dtypeOf = (i: number) => (weights.includes(i) ? dtype : 'f32');
              // Plain arrays: upload rounds them to the dtype.
              const host = (i: number) => (dtypeOf(i) === 'f32' ? data[i]! : Array.from(data[i]!));
              const expected = cpu.run(
                spec,
                data.map((_, i) => cpu.upload(host(i), shapes[i]!, dtypeOf(i))),
              )[0]!;
              const [m, n] = expected.shape as [number, number];
              const out = gpu.upload(
                Float32Array.from({ length: m * n }, () => Number.NaN),
                [m, n],
              );
              gpu.run(
                spec,
                data.map((_, i) => gpu.upload(host(i), shapes[i]!, dtypeOf(i))),
                {},
                { out: [out] },
              );
              const mismatch = compareOutputs('f32', (await out.read()) as HostArray, await expected.read(), {
                rtol: 1e-4,
                atol: 4e-5 * shapes[0]![1]!,
              });
              expect(mismatch).toBeUndefined();
            });
          }
        }
      },
    );
  }
}

// One-row products without a gate split K across the workgroup (all its
// groups on the same 8 columns) unless the `fusedColumns` switch is set:
// N not a multiple of 8 clamps the last workgroup's columns, K past
// 256 · 8 runs the loop's remainder, odd K the scalar loads, and a first
// weight of rmsNormMatmul3 that is not a multiple of 8 rows keeps the
// shader of a column a group.
for (const features of [[], ['subgroups']] as const) {
  needsAdapter(
    `one-row fused products, K split across the workgroup${features.length ? ', no subgroups' : ''}`,
    () => {
      let gpu: WgpuBackend;
      const cpu = createCpuBackend();
      beforeAll(async () => {
        gpu = await WgpuBackend.create({ withoutFeatures: [...features] });
      });
      afterAll(() => gpu.dispose());

      const cases: readonly { spec: typeof rmsNormMatmul | typeof rmsNormMatmul3; shapes: number[][] }[] = [
        { spec: rmsNormMatmul, shapes: [[1, 2056], [2056], [13, 2056]] },
        { spec: rmsNormMatmul, shapes: [[1, 37], [37], [19, 37]] },
        { spec: rmsNormMatmul3, shapes: [[1, 520], [520], [16, 520], [8, 520], [5, 520]] },
        { spec: rmsNormMatmul3, shapes: [[1, 64], [64], [24, 64], [11, 64]] },
        { spec: rmsNormMatmul3, shapes: [[1, 72], [72], [12, 72], [8, 72], [8, 72]] },
      ];
      // Without subgroups only the tree of sums differs: two cases in bf16 (lavapipe compiles each shader slowly).
      for (const { spec, shapes } of features.length ? [cases[0]!, cases[2]!] : cases) {
        for (const dtype of features.length ? (['bf16'] as const) : (['f32', 'bf16'] as const)) {
          it(`${spec.name} ${shapes.map((s) => s.join('×')).join(', ')}, ${dtype} weights, matches the cpu backend`, async () => {
            const rng = new Rng(shapes.flat().reduce((a, b) => a * 31 + b, 7));
            const data = shapes.map((s) =>
              Float32Array.from({ length: s[0]! * (s[1] ?? 1) }, () => rng.uniform(-1, 1)),
            );
            // x and the norm stay f32; the weights (from index 2) take the dtype.
            const dtypeOf = (i: number) => (i >= 2 ? dtype : 'f32');
            const host = (i: number) => (dtypeOf(i) === 'f32' ? data[i]! : Array.from(data[i]!));
            const expected = cpu.run(
              spec,
              data.map((_, i) => cpu.upload(host(i), shapes[i]!, dtypeOf(i))),
            );
            const out = expected.map((e) =>
              gpu.upload(
                Float32Array.from({ length: e.size }, () => Number.NaN),
                e.shape,
              ),
            );
            gpu.run(
              spec,
              data.map((_, i) => gpu.upload(host(i), shapes[i]!, dtypeOf(i))),
              {},
              { out },
            );
            for (let i = 0; i < out.length; i++) {
              const mismatch = compareOutputs(
                'f32',
                (await out[i]!.read()) as HostArray,
                await expected[i]!.read(),
                {
                  rtol: 1e-4,
                  atol: 4e-5 * shapes[0]![1]!,
                },
              );
              expect(mismatch).toBeUndefined();
            }
          });
        }
      }
    },
  );
}
