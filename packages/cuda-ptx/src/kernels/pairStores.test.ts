import { matmul, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { FEW_ROWS_ENTRY } from './matmulFewRows.js';
import { TC_ENTRY } from './matmulTensorCore.js';
import { WG_ENTRY } from './matmulWgmma.js';

// The tensor-core products store two adjacent columns as one access only where
// y (and c) are aligned for it: a y or c that is a view may start at any
// element, and a misaligned pair store would fault the device.

describe('half products into y and from c that start one element past a pair', () => {
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 4 });
  const uniform = seededUniform(17, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);
  // [M, K, N, the kernel that takes it]: the warpgroup GEMM, mma.sync (K not a whole number of
  // 16-byte rows), and the few-rows kernel (64 columns or more).
  const cases = [
    [130, 64, 24, WG_ENTRY],
    [40, 60, 24, TC_ENTRY],
    [5, 64, 72, FEW_ROWS_ENTRY],
  ] as const;
  for (const [m, k, n, entry] of cases) {
    it(`${m}×${k}→${n}, ${entry}`, async () => {
      const [a, b, c] = [random(m * k), random(n * k), random(m * n)];
      const run = (backend: typeof gpu | typeof cpu, view: boolean) => {
        const inputs = [backend.upload(a, [m, k], 'bf16'), backend.upload(b, [n, k], 'bf16')];
        if (!view) {
          const cFull = backend.upload(c, [m, n], 'bf16');
          return backend.run(matmul, [...inputs, cFull], { transB: true, beta: 1 })[0] as Tensor;
        }
        // c and y one bf16 into larger tensors: their bases 2 bytes past a word.
        const cBase = backend.upload([0, ...c], [m * n + 1], 'bf16');
        const yBase = backend.upload(new Array<number>(m * n + 1).fill(Number.NaN), [m * n + 1], 'bf16');
        const y = yBase.slice(1, m * n).reshape([m, n]);
        backend.run(
          matmul,
          [...inputs, cBase.slice(1, m * n).reshape([m, n])],
          { transB: true, beta: 1 },
          { out: [y] },
        );
        return y;
      };
      const first = fake.launches.length;
      const got = await run(gpu, true).read();
      expect(fake.launches.slice(first).map((l) => l.entry)).toContain(entry);
      const want = await run(cpu, false).read();
      const tolerance = { rtol: 1e-2, atol: 2e-3 * Math.sqrt(k) };
      expect(compareOutputs('f32', got, want, tolerance)).toBeUndefined();
    }, 300_000);
  }
});
