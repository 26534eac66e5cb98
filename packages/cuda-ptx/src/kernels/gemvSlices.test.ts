import { gateUpSwiglu, matmul, rmsNormMatmul, type Tensor, toHostArray } from '@rayo/core';
import { compareOutputs, conformanceSuite, runChecks, sampleConformance } from '@rayo/core/testing';
import { createEmulatedGpu, seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { GEMV_SLICE_CHOICES } from '../tuning.js';
import { streamSlicesFor } from './gemv.js';
import { planMatmul } from './matmul.js';

// Split K in the dense streaming products: `slices` warps of a block share
// one column, each summing every slices-th piece of K, and meet in shared
// memory. Checked against the reference with every slice count forced, and
// with the default choice on the decode step's shapes.

/** The emulated gpu's one output agrees with the reference's within 1e-4 (relative) and 2e-4. */
async function expectClose(got: readonly Tensor[], want: readonly Tensor[]) {
  expect(got.length).toBe(1);
  const tolerance = { rtol: 1e-4, atol: 2e-4 };
  expect(compareOutputs('f32', await got[0]!.read(), await want[0]!.read(), tolerance)).toBeUndefined();
}

const H100 = { multiprocessors: 132, computeCapability: [9, 0] as const };
const ALIGNED = { a: true, b: true, y: true, c: true };

describe('how many warps split a column', () => {
  it('as many as leave each warp one whole unrolled pass of K and the grid in one wave, at most 8', () => {
    // An H200: 132 SMs of 4 blocks. The 1B decode step: K 2,048 or 8,192 halves, 8 a lane, 2 steps
    // in flight in the fused kernels and 4 in the dot.
    const h200 = (k: number, unroll: number, columns: number) =>
      streamSlicesFor({ k, width: 8, unroll, columns, residentBlocks: 4 * 132 });
    expect(h200(2048, 2, 3072)).toBe(1); // q·k·v: two ways would be two waves
    expect(h200(2048, 2, 8192)).toBe(1); // gate·up
    expect(h200(2048, 4, 2048)).toBe(2); // o
    expect(h200(8192, 4, 2048)).toBe(2); // down: four ways would be two waves
    expect(h200(4096, 4, 4096)).toBe(1); // the 8B's o
    expect(h200(2048, 2, 37)).toBe(4); // few columns: K decides
    expect(h200(8192, 4, 37)).toBe(8);
    expect(h200(1024, 4, 37)).toBe(1);
    // The switch wins.
    expect(streamSlicesFor({ k: 100, width: 1, unroll: 4, columns: 9999, residentBlocks: 1 }, 8)).toBe(8);
    expect(streamSlicesFor({ k: 8192, width: 8, unroll: 4, columns: 37, residentBlocks: 528 }, 1)).toBe(1);
  });

  it('split by default for one row against half weights, not for f32 weights or batched rows', () => {
    const problem = (m: number, b: 'bf16' | 'f32') => ({
      batch: 1,
      m,
      n: 2048,
      k: 8192,
      transA: false,
      transB: true,
      withC: true,
      types: { a: 'f32', b, out: 'f32' } as const,
      aligned: ALIGNED,
    });
    expect(planMatmul(problem(1, 'bf16'), H100)).toMatchObject({
      kind: 'dot',
      variant: { slices: 2 },
      blocks: 512,
    });
    expect(planMatmul(problem(1, 'f32'), H100)).toMatchObject({ kind: 'dot', blocks: 256 });
    expect(planMatmul(problem(1, 'f32'), H100).variant).not.toHaveProperty('slices');
    expect(planMatmul(problem(3, 'bf16'), H100).variant).not.toHaveProperty('slices');
    // Asked for, any row count splits.
    expect(planMatmul({ ...problem(3, 'f32'), slices: 4 }, H100)).toMatchObject({
      variant: { slices: 4 },
      blocks: 1024,
    });
  });
});

describe('split K on the decode shapes, default choice', () => {
  // An H100's SMs: few columns of a long K split without a second wave.
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 132 });
  const uniform = seededUniform(29, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);
  const upload = (shape: number[], dtype: 'f32' | 'bf16') => {
    const values = random(shape.reduce((a, b) => a * b, 1));
    const host = toHostArray(dtype, values);
    return [gpu.upload(host, shape, dtype), cpu.upload(host, shape, dtype)] as const;
  };

  // K 2,048 of bf16 weights: 4 warps a column in the fused kernels (2 columns a block), 2 in the dot.
  // N 37 leaves the last block a column past N, which must read in bounds and store nothing.
  const k = 2048;
  const n = 37;
  it('rmsNormMatmul and gateUpSwiglu: 4 warps a column', async () => {
    const [gx, cx] = upload([1, k], 'f32');
    const [gn, cn] = upload([k], 'f32');
    const [gw, cw] = upload([n, k], 'bf16');
    const [gu, cu] = upload([n, k], 'bf16');
    for (const [spec, gpuIn, cpuIn] of [
      [rmsNormMatmul, [gx, gn, gw], [cx, cn, cw]],
      [gateUpSwiglu, [gx, gw, gu, gn], [cx, cw, cu, cn]],
    ] as const) {
      const first = fake.launches.length;
      const got = gpu.run(spec, [...gpuIn], {}) as Tensor[];
      const want = cpu.run(spec, [...cpuIn], {}) as Tensor[];
      await expectClose(got, want);
      const launches = fake.launches.slice(first);
      expect(launches.map((l) => l.grid[0])).toEqual([Math.ceil(n / 2)]);
    }
  });

  it('matmul with c: 2 warps a column', async () => {
    const [ga, ca] = upload([1, k], 'f32');
    const [gb, cb] = upload([n, k], 'bf16');
    const [gc, cc] = upload([1, n], 'f32');
    const first = fake.launches.length;
    const got = gpu.run(matmul, [ga, gb, gc], { transB: true, beta: 1 }) as Tensor[];
    const want = cpu.run(matmul, [ca, cb, cc], { transB: true, beta: 1 }) as Tensor[];
    await expectClose(got, want);
    expect(fake.launches.slice(first).map((l) => l.grid[0])).toEqual([Math.ceil(n / 4)]);
  });
});

// The streaming products' conformance cases (poisoned outputs, odd shapes, half storage, batches)
// with each slice count forced, whatever K and the row count.
describe('split K conformance on an emulated device', () => {
  const full = process.env.RAYO_FULL_CONFORMANCE === '1';
  const kernels = ['matmul', 'linear', 'rmsNormMatmul', 'rmsNormMatmul3', 'gateUpSwiglu'];
  for (const slices of GEMV_SLICE_CHOICES.filter((s) => s > 1)) {
    it(`${slices} warps a column`, async () => {
      const emulated = createEmulatedGpu({ multiprocessors: 2, tuning: { gemvSlices: slices } });
      const suite = conformanceSuite({ create: () => emulated.gpu });
      try {
        const checks = suite.checks.filter(
          (c) => c.kernelCase !== undefined && kernels.includes(c.kernelCase.kernel),
        );
        expect(new Set(checks.map((c) => c.kernelCase!.kernel))).toEqual(new Set(kernels));
        const chosen = full ? checks : sampleConformance(checks, 'variant', 'small').checks;
        const summary = await runChecks(chosen);
        expect(summary.failures).toEqual([]);
        expect(summary.passed).toBeGreaterThan(10);
      } finally {
        await suite.teardown();
        emulated.dispose();
      }
    }, 600_000);
  }
});
