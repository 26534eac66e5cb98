import { matmul, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { describe, expect, it } from 'vitest';
import { assemblePtx, ptxasTestGate } from '../ptx/ptxas.js';
import { useEmulatedGpu } from '../testing/emulatedGpu.js';
import { expectAssemblesCleanly } from '../testing/expectAssembles.js';
import {
  type HalfDType,
  TC_ENTRY,
  type TensorCoreVariant,
  tensorCoreKey,
  tensorCoreModule,
} from './matmulTensorCore.js';

/** Unit roundoff of each half dtype. */
const UNIT: Record<HalfDType, number> = { f16: 2 ** -11, bf16: 2 ** -8 };
/** A quiet NaN in each dtype: what the output holds before the run. */
const POISON: Record<HalfDType, number> = { f16: 0x7e00, bf16: 0x7fc0 };

describe('the tensor-core product in the PTX interpreter', () => {
  const { fake, gpu, cpu } = useEmulatedGpu();
  let seed = 11;
  const random = (n: number) =>
    Array.from({ length: n }, () => {
      seed = (seed * 16807) % 2147483647;
      return (seed / 2147483647) * 2 - 1;
    });

  /** y = alpha · op(a) · op(b) (+ beta · c) on both backends, y poisoned first; returns the entries launched. */
  async function check(
    dtype: HalfDType,
    [m, k, n]: [number, number, number],
    attrs: { transA?: boolean; transB?: boolean; alpha?: number; beta?: number },
    withC = false,
  ) {
    const shapes = [attrs.transA ? [k, m] : [m, k], attrs.transB ? [n, k] : [k, n]];
    if (withC) shapes.push([m, n]);
    const data = shapes.map((s) => random(s[0]! * s[1]!));
    const ins = data.map((d, i) => gpu.upload(d, shapes[i]!, dtype));
    const refs = data.map((d, i) => cpu.upload(d, shapes[i]!, dtype));
    using out = gpu.upload(new Uint16Array(m * n).fill(POISON[dtype]), [m, n], dtype);
    const first = fake.launches.length;
    gpu.run(matmul, ins, attrs, { out: [out] });
    const [want] = cpu.run(matmul, refs, attrs) as Tensor[];
    // The conformance suite's bound for half products: 4·u·√K.
    const tol = Math.max(1e-3, 4 * UNIT[dtype] * Math.sqrt(k));
    const error = compareOutputs(dtype, await out.read(), await want!.read(), { rtol: tol, atol: tol });
    expect(error).toBeUndefined();
    for (const t of [...ins, ...refs, want!]) t.dispose();
    return fake.launches.slice(first).map((l) => l.entry);
  }

  it('runs bf16 [K, N] products with 16-byte copies, edge tiles zero-filled', async () => {
    expect(await check('bf16', [24, 40, 16], {})).toEqual([TC_ENTRY]);
  }, 120_000);

  it('runs f16 with b stored [N, K], alpha and beta · c, over two tiles each way and a wrapping pipeline', async () => {
    expect(await check('f16', [136, 136, 144], { transB: true, alpha: 0.5, beta: -1.5 }, true)).toEqual([
      TC_ENTRY,
    ]);
  }, 600_000);

  it('loads odd shapes element by element, a stored [K, M], and stores odd columns one by one', async () => {
    expect(await check('bf16', [19, 37, 21], { transA: true, beta: 2 }, true)).toEqual([TC_ENTRY]);
    expect(await check('f16', [9, 13, 7], { transA: true, transB: true })).toEqual([TC_ENTRY]);
  }, 300_000);

  it('leaves f32 products to the other kernels', async () => {
    const a = gpu.upload(random(8 * 8), [8, 8]);
    const b = gpu.upload(random(8 * 8), [8, 8]);
    const first = fake.launches.length;
    const [y] = gpu.run(matmul, [a, b], {}) as Tensor[];
    await y!.read();
    expect(fake.launches.slice(first).map((l) => l.entry)).not.toContain(TC_ENTRY);
    for (const t of [a, b, y!]) t.dispose();
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`the tensor-core product under ptxas (${gate.reason})`, () => {
  const variants: TensorCoreVariant[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const [transA, transB] of [
      [false, false],
      [false, true],
      [true, false],
      [true, true],
    ] as const) {
      variants.push({ dtype, transA, transB, async: true, withC: false });
    }
  }
  variants.push({ dtype: 'bf16', transA: false, transB: false, async: false, withC: true });
  variants.push({ dtype: 'f16', transA: true, transB: true, async: true, withC: true });

  it('assembles for sm_80 and sm_90 without spills', () => {
    for (const v of variants) {
      const text = tensorCoreModule(v).emit();
      const oldest = assemblePtx(text, 'sm_80');
      expect(oldest.ok, `${tensorCoreKey(v)}: ${oldest.log}`).toBe(true);
      const log = expectAssemblesCleanly(text, 'sm_90', tensorCoreKey(v)).log;
      // 64 accumulators and the fragments fit in one block's 255 registers a thread.
      expect(Number(/Used (\d+) registers/.exec(log)?.[1])).toBeLessThanOrEqual(255);
    }
  }, 300_000);
});
