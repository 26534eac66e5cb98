import { expectAllAssembleCleanly, LAYOUTS, useGemmDevice } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { SPLIT_SUM_ENTRY } from './matmulSplitK.js';
import {
  encodeTensorCore,
  TC_ENTRY,
  type TensorCoreShape,
  type TensorCoreVariant,
  tensorCoreDtype,
  tensorCoreKey,
  tensorCoreModule,
} from './matmulTensorCore.js';

// The kernel is recorded by its launch function on an interpreted device: which
// calls reach it is matmul's routing (tensorCoreDtype).
describe('the tensor-core product in the PTX interpreter', () => {
  const { fake, product } = useGemmDevice(11);

  /**
   * One product by the kernel against the cpu backend (gemmDevice.ts);
   * returns whether it took the 16-byte copies and the kernel's launches so far.
   */
  async function check(
    variant: Omit<TensorCoreVariant, 'async'>,
    [m, k, n]: [number, number, number],
    options: { alpha?: number; beta?: number; batch?: number } = {},
    shape?: TensorCoreShape,
  ) {
    const { dtype, transA, transB } = variant;
    await product(variant, [m, k, n], options, (recorder, call) => {
      expect(tensorCoreDtype(call)).toBe(dtype);
      encodeTensorCore(recorder, call, dtype, shape);
    });
    const launches = fake.launches.filter((l) => l.entry === TC_ENTRY);
    return { async: (transA ? m : k) % 8 === 0 && (transB ? k : n) % 8 === 0, launches: launches.length };
  }

  it('multiplies each layout with 16-byte copies, edge tiles zero-filled', async () => {
    for (const dtype of ['bf16', 'f16'] as const) {
      for (const [transA, transB] of LAYOUTS) {
        expect(await check({ dtype, transA, transB, withC: false }, [24, 40, 16])).toMatchObject({
          async: true,
        });
      }
    }
  }, 300_000);

  it('adds beta · c after alpha, over two tiles each way and a pipeline that wraps twice', async () => {
    const v = { dtype: 'f16', transA: false, transB: true, withC: true } as const;
    expect(await check(v, [136, 200, 144], { alpha: 0.5, beta: -1.5 })).toMatchObject({ async: true });
  }, 600_000);

  it('loads odd shapes element by element and stores odd columns one by one', async () => {
    for (const [transA, transB] of LAYOUTS) {
      const v = { dtype: 'bf16', transA, transB, withC: true } as const;
      expect(await check(v, [19, 37, 21], { alpha: -1, beta: 2 })).toMatchObject({ async: false });
    }
    const v = { dtype: 'f16', transA: false, transB: false, withC: false } as const;
    expect(await check(v, [1, 13, 7])).toMatchObject({ async: false });
  }, 300_000);

  it('stores f32 y (+ f32 c) from half operands: odd shapes, beta · c, a batch', async () => {
    for (const dtype of ['bf16', 'f16'] as const) {
      const v = { dtype, transA: false, transB: true, withC: true, out: 'f32' } as const;
      expect(await check(v, [24, 40, 16], { alpha: 0.5, beta: -1.5 })).toMatchObject({ async: true });
    }
    for (const [transA, transB] of LAYOUTS) {
      const v = { dtype: 'bf16', transA, transB, withC: true, out: 'f32' } as const;
      expect(await check(v, [19, 37, 21], { alpha: -1, beta: 2 })).toMatchObject({ async: false });
    }
    const v = { dtype: 'bf16', transA: false, transB: false, withC: false, out: 'f32' } as const;
    await check(v, [24, 16, 40], { alpha: 2, batch: 3 });
  }, 300_000);

  it('splits K across blocks for few rows, skipping the pieces past M, the partial sums then added', async () => {
    const split = (launches: number) => fake.launches.slice(launches).map((l) => [l.entry, l.grid]);
    let before = fake.launches.length;
    // 160 + 103 of K, the second split's last step ragged; 3 rows of 128; f32 y = -1 · a·b + 2 · c.
    const odd = { dtype: 'bf16', transA: false, transB: true, withC: true, out: 'f32' } as const;
    await check(odd, [3, 263, 72], { alpha: -1, beta: 2 }, { smallM: true, splits: 2, kPerSplit: 160 });
    expect(split(before)).toEqual([
      [TC_ENTRY, [1, 2, 1]],
      [SPLIT_SUM_ENTRY, expect.any(Array)],
    ]);
    // 16-byte copies, rows in a second 16-row piece, half y through the sum kernel, a batch of two.
    before = fake.launches.length;
    const copies = { dtype: 'f16', transA: false, transB: true, withC: false } as const;
    expect(
      await check(copies, [21, 96, 40], { alpha: 0.5, batch: 2 }, { smallM: true, splits: 3, kPerSplit: 32 }),
    ).toMatchObject({ async: true });
    expect(split(before)[0]).toEqual([TC_ENTRY, [1, 3, 2]]);
  }, 300_000);

  it('writes beta · c alone when K is 0', async () => {
    const v = { dtype: 'bf16', transA: false, transB: false, withC: true } as const;
    await check(v, [5, 0, 6], { beta: 0.5 });
  });

  it('runs a batch along the grid z, each product at its own offsets', async () => {
    const before = (await check({ dtype: 'bf16', transA: false, transB: true, withC: false }, [8, 16, 8]))
      .launches;
    const v = { dtype: 'bf16', transA: true, transB: false, withC: false } as const;
    const after = await check(v, [24, 16, 40], { alpha: 2, batch: 3 });
    expect(after.launches - before).toBe(1);
    expect(fake.launches.at(-1)!.grid).toEqual([1, 1, 3]);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`the tensor-core product under ptxas (${gate.reason})`, () => {
  const variants: TensorCoreVariant[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const [transA, transB] of LAYOUTS) {
      variants.push({ dtype, transA, transB, async: true, withC: false });
    }
  }
  variants.push({ dtype: 'bf16', transA: false, transB: false, async: false, withC: true });
  variants.push({ dtype: 'f16', transA: true, transB: true, async: true, withC: true });
  variants.push({ dtype: 'bf16', transA: false, transB: true, async: true, withC: true, out: 'f32' });
  variants.push({ dtype: 'f16', transA: true, transB: false, async: false, withC: true, out: 'f32' });
  // The small-M kernel (f32 out), over half or f32 (aF32) A.
  const smallM = { out: 'f32', smallM: true } as const;
  variants.push(
    { dtype: 'bf16', transA: false, transB: true, async: true, withC: false, ...smallM },
    { dtype: 'f16', transA: false, transB: true, async: false, withC: true, ...smallM },
    { dtype: 'bf16', transA: false, transB: true, async: true, withC: false, ...smallM, aF32: true },
    { dtype: 'bf16', transA: true, transB: true, async: false, withC: true, ...smallM, aF32: true },
  );

  it('assembles for sm_80 and sm_90 without spills', () => {
    // 64 accumulators and the fragments fit the 128 registers a thread of two blocks an SM.
    expectAllAssembleCleanly(
      variants.flatMap((v) => {
        const ptx = tensorCoreModule(v).emit();
        return [
          { ptx, arch: 'sm_80', what: `${tensorCoreKey(v)} sm_80`, spillsAllowed: true },
          { ptx, arch: 'sm_90', what: tensorCoreKey(v), maxRegisters: 128 },
        ];
      }),
    );
  }, 300_000);
});
