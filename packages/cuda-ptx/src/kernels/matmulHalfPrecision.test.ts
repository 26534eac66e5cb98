import { batchedMatmul, matmul, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { TC_ENTRY } from './matmulTensorCore.js';
import { WG_ENTRY } from './matmulWgmma.js';

// matmul's precision 'half' through the backend: f32 operands rounded into
// half scratch, then a tensor-core product storing f32 y (+ f32 c), against
// the cpu reference rounding the same operands (only the summation order differs).
describe("matmul precision 'half' on an emulated sm_90 device", () => {
  const { gpu, cpu, fake } = useEmulatedGpu({ multiprocessors: 4 });
  const uniform = seededUniform(23, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);
  const tensorCoreLaunches = () => fake.launches.filter((l) => l.entry === TC_ENTRY || l.entry === WG_ENTRY);

  const cases = [
    // [M, K, N], b's dtype, transB, with c: wgmma where rows are whole 16 bytes, mma.sync for odd K.
    { shape: [40, 64, 24], b: 'bf16', transB: true, withC: true },
    { shape: [19, 37, 21], b: 'bf16', transB: false, withC: true },
    { shape: [24, 40, 17], b: 'f16', transB: true, withC: false },
    { shape: [17, 24, 32], b: 'f32', transB: false, withC: true },
  ] as const;
  for (const { shape, b: bDtype, transB, withC } of cases) {
    const [m, k, n] = shape;
    it(`${m}×${k}×${n}, f32 a, ${bDtype} b${transB ? ' transB' : ''}${withC ? ', + f32 c' : ''}`, async () => {
      const bShape = transB ? [n, k] : [k, n];
      const [aData, bData, cData] = [random(m * k), random(k * n), random(m * n)];
      const on = (backend: typeof gpu | typeof cpu) => [
        backend.upload(aData, [m, k]),
        backend.upload(bData, bShape, bDtype),
        withC ? backend.upload(cData, [m, n]) : undefined,
      ];
      const ins = [on(gpu), on(cpu)] as const;
      const attrs = { transB, alpha: 0.75, beta: -1.5, precision: 'half' } as const;
      const before = tensorCoreLaunches().length;
      const [y] = gpu.run(matmul, ins[0], attrs);
      const [want] = cpu.run(matmul, ins[1], attrs);
      expect(y!.dtype).toBe('f32');
      expect(tensorCoreLaunches().length - before).toBe(1);
      const tolerance = { rtol: 1e-4, atol: 1e-5 * Math.sqrt(k) };
      expect(compareOutputs('f32', await y!.read(), await want!.read(), tolerance)).toBeUndefined();
      for (const t of [...ins[0], ...ins[1], y, want]) (t as Tensor | undefined)?.dispose();
    }, 300_000);
  }

  it('batchedMatmul of f32 operands, both rounded to bf16', async () => {
    const [batch, m, k, n] = [3, 20, 16, 24];
    const [aData, bData] = [random(batch * m * k), random(batch * k * n)];
    const on = (backend: typeof gpu | typeof cpu) => [
      backend.upload(aData, [batch, m, k]),
      backend.upload(bData, [batch, k, n]),
    ];
    const ins = [on(gpu), on(cpu)] as const;
    const [y] = gpu.run(batchedMatmul, ins[0], { alpha: 2, precision: 'half' });
    const [want] = cpu.run(batchedMatmul, ins[1], { alpha: 2, precision: 'half' });
    expect(
      compareOutputs('f32', await y!.read(), await want!.read(), { rtol: 1e-4, atol: 1e-4 }),
    ).toBeUndefined();
    for (const t of [...ins[0], ...ins[1], y!, want!]) t.dispose();
  }, 300_000);

  it('keeps the GEMV shapes of decoding on the exact kernels', async () => {
    const [k, n] = [64, 40];
    const a = gpu.upload(random(k), [1, k]);
    const b = gpu.upload(random(n * k), [n, k], 'bf16');
    const before = tensorCoreLaunches().length;
    const [y] = gpu.run(matmul, [a, b], { transB: true, precision: 'half' });
    await y!.read();
    expect(tensorCoreLaunches().length).toBe(before);
    for (const t of [a, b, y!]) t.dispose();
  });
});
