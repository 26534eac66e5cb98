import { sizeOf } from '@rayo/core';
import { expectAllAssembleCleanly, LAYOUTS, useGemmDevice } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CommandRecorder } from '../encoder.js';
import type { Operand } from '../kernel.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { SPLIT_SUM_ENTRY } from './matmulSplitK.js';
import {
  encodeWgmma,
  WG_ENTRY,
  type WgmmaVariant,
  wgmmaApplies,
  wgmmaKey,
  wgmmaModule,
  wgmmaSplits,
  wgmmaTileN,
  wgSharedBytes,
} from './matmulWgmma.js';

// The fake device is an sm_90 part: its tensor maps are the fake's own
// encoding, which the interpreter's bulk tensor copies decode.
describe('the wgmma product in the PTX interpreter', () => {
  const { fake, driver, product } = useGemmDevice(7);

  /** One product by the kernel against the cpu backend (gemmDevice.ts); returns its launches. */
  async function check(
    variant: WgmmaVariant,
    shape: [number, number, number],
    options: { alpha?: number; beta?: number; batch?: number } = {},
  ) {
    const before = fake.launches.filter((l) => l.entry === WG_ENTRY).length;
    await product(variant, shape, options, (recorder, call) => {
      expect(wgmmaApplies(recorder, call, variant.dtype)).toBe(true);
      encodeWgmma(recorder, call, variant.dtype);
    });
    return fake.launches.filter((l) => l.entry === WG_ENTRY).slice(before);
  }

  it('multiplies one 128 × 128 × 64 tile in each layout', async () => {
    for (const [transA, transB] of LAYOUTS) {
      const launches = await check({ dtype: 'bf16', transA, transB, withC: false }, [128, 64, 128]);
      expect(launches.map((l) => [l.grid, l.block, l.sharedBytes])).toEqual([
        [[1, 1, 1], [384, 1, 1], wgSharedBytes(128)],
      ]);
    }
  }, 120_000);

  it('zero-fills edge tiles and masks edge stores (130 × 72 × 136, + c, f16), and wraps the pipeline', async () => {
    await check({ dtype: 'f16', transA: false, transB: false, withC: true }, [130, 72, 136], {
      alpha: 0.5,
      beta: -1.5,
    });
    // 5 k steps through 4 stages: every stage refilled once after its release.
    await check({ dtype: 'bf16', transA: true, transB: true, withC: false }, [8, 320, 264]);
  }, 120_000);

  it('runs a batch as further tiles of the persistent grid through the maps’ third dimension', async () => {
    const launches = await check({ dtype: 'bf16', transA: false, transB: true, withC: false }, [16, 24, 8], {
      alpha: 2,
      batch: 3,
    });
    expect(launches.map((l) => l.grid)).toEqual([[3, 1, 1]]);
  });

  it('stores f32 y (+ f32 c) from half operands, edge tiles masked, and a batch', async () => {
    for (const [transA, transB] of LAYOUTS) {
      await check({ dtype: 'bf16', transA, transB, withC: true, out: 'f32' }, [136, 72, 136], {
        alpha: 0.75,
        beta: -0.5,
      });
    }
    // Odd M and N (K-major operands): single stores at the odd column.
    await check({ dtype: 'bf16', transA: false, transB: true, withC: true, out: 'f32' }, [131, 40, 129], {
      beta: 2,
    });
    const launches = await check(
      { dtype: 'f16', transA: false, transB: true, withC: false, out: 'f32' },
      [16, 24, 8],
      { alpha: 2, batch: 3 },
    );
    expect(launches.map((l) => l.grid)).toEqual([[3, 1, 1]]);
  }, 300_000);

  it('splits K where the tiles leave SMs idle: partial sums added in split order, then alpha, c and y’s dtype', async () => {
    const sums = () => fake.launches.filter((l) => l.entry === SPLIT_SUM_ENTRY).length;
    const before = sums();
    // [M, K, N]: 2 tiles × 17 k steps, 2 splits of 9 and 8 steps (4 tiles of the grid).
    const split = await check({ dtype: 'bf16', transA: false, transB: false, withC: true }, [130, 1032, 72], {
      alpha: 0.5,
      beta: -1.5,
    });
    expect(split.map((l) => l.grid)).toEqual([[4, 1, 1]]);
    // M-major a and a batch of 2: each split covers both batches.
    await check({ dtype: 'f16', transA: true, transB: true, withC: false, out: 'f32' }, [64, 1104, 136], {
      batch: 2,
    });
    // tf32 (32 of K a step): 17 steps, 2 splits.
    await check({ dtype: 'tf32', transA: false, transB: true, withC: true }, [40, 520, 24], { beta: 0.25 });
    expect(sums() - before).toBe(3);
  }, 300_000);

  it('takes 128-wide tiles where 256-wide ones would leave SMs idle, edge columns masked', async () => {
    // [M, K, N] = [136, 136, 296]: 2 × 3 narrow tiles, the last 8 rows and 40 columns wide.
    const launches = await check(
      { dtype: 'bf16', transA: true, transB: false, withC: true },
      [136, 136, 296],
      {
        alpha: 1.25,
        beta: 0.5,
      },
    );
    expect(launches.map((l) => [l.grid, l.sharedBytes])).toEqual([[[6, 1, 1], wgSharedBytes(128)]]);
    expect([
      wgmmaTileN(2048, 768, 1, 132),
      wgmmaTileN(4096, 2048, 1, 132),
      wgmmaTileN(8192, 96, 1, 132),
    ]).toEqual([128, 256, 128]);
    expect(wgmmaTileN(2048, 768, 4, 132)).toBe(256);
  }, 120_000);

  it('plans splits of at least eight K steps that keep every block resident', () => {
    expect(wgmmaSplits(18, 32, 132, 768 * 768)).toEqual({ splits: 4, steps: 8 });
    expect(wgmmaSplits(18, 64, 132, 768 * 768)).toEqual({ splits: 7, steps: 10 });
    expect(wgmmaSplits(48, 32, 132, 2048 * 768)).toEqual({ splits: 2, steps: 16 });
    expect(wgmmaSplits(48, 12, 132, 2048 * 768)).toEqual({ splits: 1, steps: 12 });
    expect(wgmmaSplits(128, 32, 132, 2048 * 2048)).toEqual({ splits: 1, steps: 32 });
    expect(wgmmaSplits(2, 7, 132, 1)).toEqual({ splits: 1, steps: 7 });
    expect(wgmmaSplits(1, 2 ** 20, 132, 2 ** 26)).toEqual({ splits: 15, steps: 69906 });
  });

  it('multiplies f32 operands as tf32, transposing a stored [K, M] and b stored [K, N] first', async () => {
    for (const [transA, transB] of [[false, true], ...LAYOUTS] as const) {
      const launches = await check({ dtype: 'tf32', transA, transB, withC: transA }, [130, 72, 136], {
        alpha: 0.75,
        beta: 0.5,
      });
      expect(launches).toHaveLength(1);
    }
  }, 120_000);

  it('leaves products without 16-byte rows to the mma.sync kernel', () => {
    const recorder = new CommandRecorder(driver);
    const op = (shape: number[]): Operand => ({
      ptr: 0x1000n,
      size: sizeOf(shape),
      shape,
      dtype: 'bf16',
      byteLength: 0,
    });
    const call = (m: number, k: number, n: number, transB: boolean) => ({
      a: op([m, k]),
      b: op(transB ? [n, k] : [k, n]),
      c: undefined,
      y: op([m, n]),
      batch: 1,
      m,
      n,
      k,
      transA: false,
      transB,
      alpha: 1,
      beta: 0,
    });
    expect(wgmmaApplies(recorder, call(64, 64, 64, false), 'bf16')).toBe(true);
    expect(wgmmaApplies(recorder, call(64, 60, 64, false), 'bf16')).toBe(false);
    expect(wgmmaApplies(recorder, call(64, 64, 60, false), 'bf16')).toBe(false);
    expect(wgmmaApplies(recorder, call(64, 64, 60, true), 'bf16')).toBe(true);
    expect(wgmmaApplies(recorder, call(64, 60, 60, false), 'tf32')).toBe(true);
    expect(wgmmaApplies(recorder, call(64, 62, 64, true), 'tf32')).toBe(false);
  });
});

const gate = ptxasTestGate();

describe('the wgmma product on a one-SM device', () => {
  const { fake, product } = useGemmDevice(5, 1);

  it('loops one block over 9 tiles, its stages and phases running on across tiles', async () => {
    const before = fake.launches.length;
    // 3 k steps a tile through 4 stages: tile boundaries fall mid-round.
    await product(
      { dtype: 'bf16', transA: false, transB: false, withC: true },
      [300, 136, 520],
      { beta: 0.5 },
      (r, call) => encodeWgmma(r, call, 'bf16'),
    );
    await product(
      { dtype: 'f16', transA: true, transB: true, withC: false },
      [136, 64, 264],
      { batch: 2 },
      (r, call) => encodeWgmma(r, call, 'f16'),
    );
    expect(fake.launches.slice(before).map((l) => l.grid)).toEqual([
      [1, 1, 1],
      [1, 1, 1],
    ]);
  }, 120_000);
});

describe.skipIf(gate.skip)(`the wgmma product under ptxas (${gate.reason})`, () => {
  it('assembles for sm_90a without spills', () => {
    const variants: WgmmaVariant[] = [
      ...LAYOUTS.map(([transA, transB]) => ({ dtype: 'bf16' as const, transA, transB, withC: false })),
      { dtype: 'f16', transA: false, transB: false, withC: true },
      { dtype: 'tf32', transA: false, transB: true, withC: true },
      { dtype: 'bf16', transA: false, transB: true, withC: true, out: 'f32' },
      { dtype: 'f16', transA: true, transB: false, withC: false, out: 'f32' },
      ...LAYOUTS.map(([transA, transB]) => ({
        dtype: 'bf16' as const,
        transA,
        transB,
        withC: true,
        bn: 128 as const,
      })),
      { dtype: 'tf32', transA: false, transB: true, withC: false, bn: 128 },
      { dtype: 'bf16', transA: false, transB: false, withC: false, out: 'f32', bn: 128 },
    ];
    // 384 threads of one block an SM: ptxas budgets 168 registers, setmaxnreg moves them to the consumers.
    expectAllAssembleCleanly(
      variants.map((v) => ({
        ptx: wgmmaModule(v).emit(),
        arch: 'sm_90a',
        what: wgmmaKey(v),
        maxRegisters: 168,
      })),
    );
  }, 300_000);
});
