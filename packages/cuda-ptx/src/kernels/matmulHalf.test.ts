import { matmul, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { FEW_ROWS_ENTRY } from './matmulFewRows.js';
import { smallMApplies, smallMShape } from './matmulHalf.js';
import { SPLIT_SUM_ENTRY } from './matmulSplitK.js';
import { TC_ENTRY } from './matmulTensorCore.js';

describe('the small-M product against half weights', () => {
  it('splits K where the 128-column tiles leave SMs idle, in whole pipeline steps', () => {
    // Llama-3.2-1B's products at 16 rows on 132 SMs: o (2048²), down (K 8192), gate (N 8192), the head.
    for (const [shape, splits, kPerSplit] of [
      [{ m: 16, n: 2048, k: 2048 }, 16, 128],
      [{ m: 64, n: 2048, k: 8192 }, 16, 512],
      [{ m: 4, n: 8192, k: 2048 }, 4, 512],
      [{ m: 64, n: 128256, k: 2048 }, 1, 2048],
    ] as const) {
      expect(smallMShape({ ...shape, batch: 1 }, 132)).toEqual({ smallM: true, splits, kPerSplit });
    }
    // Too short a K to split: whole.
    expect(smallMShape({ m: 3, n: 72, k: 200, batch: 1 }, 132).splits).toBe(1);
  });

  it('takes 2 … 64 rows against half b, f32 a only under precision half, never the GEMV', () => {
    const op = (dtype: 'f32' | 'bf16' | 'f16', shape: number[]) => ({
      ptr: 0n,
      size: shape.reduce((x, y) => x * y, 1),
      shape,
      dtype,
      byteLength: 0,
    });
    const call = (m: number, a: 'f32' | 'bf16' | 'f16', b: 'f32' | 'bf16' | 'f16', precision?: 'half') => ({
      a: op(a, [m, 64]),
      b: op(b, [96, 64]),
      c: undefined,
      y: op('f32', [m, 96]),
      batch: 1,
      m,
      n: 96,
      k: 64,
      transA: false,
      transB: true,
      alpha: 1,
      beta: 0,
      ...(precision ? { precision } : {}),
    });
    const sm90 = [9, 0];
    expect(smallMApplies(call(16, 'f32', 'bf16', 'half'), sm90)).toBe(true);
    expect(smallMApplies(call(2, 'bf16', 'bf16'), sm90)).toBe(true);
    expect(smallMApplies(call(64, 'f16', 'f16'), sm90)).toBe(true);
    expect(smallMApplies(call(1, 'f32', 'bf16', 'half'), sm90)).toBe(false);
    expect(smallMApplies(call(65, 'f32', 'bf16', 'half'), sm90)).toBe(false);
    expect(smallMApplies(call(16, 'f32', 'bf16'), sm90)).toBe(false);
    expect(smallMApplies(call(16, 'f32', 'f32', 'half'), sm90)).toBe(false);
    expect(smallMApplies(call(16, 'f32', 'bf16', 'half'), [7, 5])).toBe(false);
  });
});

// The routing through the backend: f32 activations times half weights under precision 'half', as a batched decode step runs them.
describe("a few rows times half weights under precision 'half' on an emulated sm_90 device", () => {
  const { gpu, cpu, fake } = useEmulatedGpu({ multiprocessors: 4 });
  const uniform = seededUniform(29, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);
  const entries = (since: number) => fake.launches.slice(since).map((l) => l.entry);

  const cases = [
    // [M, K, N], a's and b's dtypes, with c, the kernels that run; a stored [K, M] where transA.
    // Up to 16 rows with K a multiple of 8 stream b into the fragments (a ragged last chunk, odd N).
    { shape: [5, 264, 67], a: 'f32', b: 'bf16', withC: true, ran: [FEW_ROWS_ENTRY], transA: false },
    { shape: [6, 392, 72], a: 'bf16', b: 'bf16', withC: true, ran: [FEW_ROWS_ENTRY], transA: false },
    // Two rounds of the chunks in flight for an f32 a.
    { shape: [16, 1032, 136], a: 'f32', b: 'f16', withC: false, ran: [FEW_ROWS_ENTRY], transA: false },
    // The tile: K not a multiple of 8, split in two on 4 SMs (a ragged last step); more rows; a stored [K, M].
    {
      shape: [13, 260, 67],
      a: 'f32',
      b: 'bf16',
      withC: true,
      ran: [TC_ENTRY, SPLIT_SUM_ENTRY],
      transA: false,
    },
    { shape: [19, 96, 130], a: 'f32', b: 'f16', withC: false, ran: [TC_ENTRY], transA: false },
    { shape: [7, 72, 64], a: 'f32', b: 'bf16', withC: true, ran: [TC_ENTRY], transA: true },
  ] as const;
  for (const { shape, a: aDtype, b: bDtype, withC, ran: kernels, transA } of cases) {
    const [m, k, n] = shape;
    it(`${m}×${k}×${n}, ${aDtype} a${transA ? ' [K, M]' : ''}, ${bDtype} b [N, K]${withC ? ', + f32 c' : ''}`, async () => {
      const [aData, bData, cData] = [random(m * k), random(k * n), random(m * n)];
      const on = (backend: typeof gpu | typeof cpu) => [
        backend.upload(aData, transA ? [k, m] : [m, k], aDtype),
        backend.upload(bData, [n, k], bDtype),
        withC ? backend.upload(cData, [m, n]) : undefined,
      ];
      const ins = [on(gpu), on(cpu)] as const;
      const attrs = { transA, transB: true, alpha: 0.75, beta: -1.5, precision: 'half' } as const;
      const since = fake.launches.length;
      const [y] = gpu.run(matmul, ins[0], attrs);
      const [want] = cpu.run(matmul, ins[1], attrs);
      const got = await y!.read();
      const ran = entries(since);
      // No pass rounding a into scratch first: the kernel rounds a's rows as it loads them.
      expect(ran).toEqual(kernels);
      const tolerance = { rtol: 1e-4, atol: 1e-5 * Math.sqrt(k) };
      expect(compareOutputs('f32', got, await want!.read(), tolerance)).toBeUndefined();
      for (const t of [...ins[0], ...ins[1], y, want]) (t as Tensor | undefined)?.dispose();
    }, 120_000);
  }
});
