import { createCpuBackend, matmul, type Tensor, toHostArray } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { assemblePtx, ptxasTestGate } from '../ptx/ptxas.js';
import { expectAssemblesCleanly } from '../testing/expectAssembles.js';
import { useInterpretedDevice } from '../testing/interpretedDevice.js';
import {
  type HalfDType,
  TC_BM,
  TC_BN,
  TC_ENTRY,
  TC_THREADS,
  type TensorCoreVariant,
  tensorCoreKey,
  tensorCoreModule,
} from './matmulTensorCore.js';

/** Unit roundoff of each half dtype. */
const UNIT: Record<HalfDType, number> = { f16: 2 ** -11, bf16: 2 ** -8 };
/** A quiet NaN in each dtype: what the output holds before the run. */
const POISON: Record<HalfDType, number> = { f16: 0x7e00, bf16: 0x7fc0 };
const LAYOUTS = [
  [false, false],
  [false, true],
  [true, false],
  [true, true],
] as const;

// The kernel is launched directly: which calls reach it is matmul's routing (tensorCoreDtype).
describe('the tensor-core product in the PTX interpreter', () => {
  const device = useInterpretedDevice();
  const cpu = createCpuBackend();
  afterAll(() => cpu.dispose());
  let seed = 11;
  const random = (n: number) =>
    Array.from({ length: n }, () => {
      seed = (seed * 16807) % 2147483647;
      return (seed / 2147483647) * 2 - 1;
    });
  /** Half words packed two to a 32-bit word (the last padded). */
  const words = (h: Uint16Array) => {
    const w = new Uint32Array(Math.ceil(h.length / 2));
    new Uint16Array(w.buffer).set(h);
    return w;
  };

  /** y = alpha · op(a) · op(b) (+ beta · c) by the kernel, y poisoned first, against the cpu backend. */
  async function check(
    variant: Omit<TensorCoreVariant, 'async'>,
    [m, k, n]: [number, number, number],
    { alpha = 1, beta = 1 } = {},
  ) {
    const { dtype, transA, transB, withC } = variant;
    const shapes = [transA ? [k, m] : [m, k], transB ? [n, k] : [k, n], [m, n]];
    const halves = shapes.map((s) => toHostArray(dtype, random(s[0]! * s[1]!)) as Uint16Array);
    const [a, b, c] = halves.map((h) => device.buffer(words(h)));
    const y = device.buffer(words(new Uint16Array(m * n).fill(POISON[dtype])));
    // The 16-byte copies where rows are whole chunks (the buffers are aligned).
    const async = (transA ? m : k) % 8 === 0 && (transB ? k : n) % 8 === 0;
    const v = { ...variant, async };
    const tilesM = Math.ceil(m / TC_BM);
    const tilesN = Math.ceil(n / TC_BN);
    device.launch(
      () => tensorCoreModule(v),
      TC_ENTRY,
      { grid: tilesM * tilesN, block: TC_THREADS },
      {
        a: a!.ptr,
        b: b!.ptr,
        c: c!.ptr,
        y: y.ptr,
        m,
        n,
        k,
        alpha,
        beta,
        strideA: m * k,
        strideB: k * n,
        strideY: m * n,
        tilesM,
        tilesN,
      },
    );
    const got = new Uint16Array(device.read(y, Math.ceil((m * n) / 2)).buffer, 0, m * n);
    const ins = halves.slice(0, withC ? 3 : 2).map((h, i) => cpu.upload(h, shapes[i]!, dtype));
    const [want] = cpu.run(matmul, ins, { alpha, beta, transA, transB }) as Tensor[];
    // The conformance suite's bound for half products: 4·u·√K.
    const tol = Math.max(1e-3, 4 * UNIT[dtype] * Math.sqrt(k));
    expect(
      compareOutputs(dtype, got, await want!.read(), { rtol: tol, atol: tol }),
      tensorCoreKey(v),
    ).toBeUndefined();
    for (const t of [...ins, want!]) t.dispose();
    return async;
  }

  it('multiplies each layout with 16-byte copies, edge tiles zero-filled', async () => {
    for (const dtype of ['bf16', 'f16'] as const) {
      for (const [transA, transB] of LAYOUTS) {
        expect(await check({ dtype, transA, transB, withC: false }, [24, 40, 16])).toBe(true);
      }
    }
  }, 300_000);

  it('adds beta · c after alpha, over two tiles each way and a pipeline that wraps twice', async () => {
    const v = { dtype: 'f16', transA: false, transB: true, withC: true } as const;
    expect(await check(v, [136, 200, 144], { alpha: 0.5, beta: -1.5 })).toBe(true);
  }, 600_000);

  it('loads odd shapes element by element and stores odd columns one by one', async () => {
    for (const [transA, transB] of LAYOUTS) {
      const v = { dtype: 'bf16', transA, transB, withC: true } as const;
      expect(await check(v, [19, 37, 21], { alpha: -1, beta: 2 })).toBe(false);
    }
    expect(await check({ dtype: 'f16', transA: false, transB: false, withC: false }, [1, 13, 7])).toBe(false);
  }, 300_000);

  it('writes beta · c alone when K is 0', async () => {
    const v = { dtype: 'bf16', transA: false, transB: false, withC: true } as const;
    await check(v, [5, 0, 6], { beta: 0.5 });
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

  it('assembles for sm_80 and sm_90 without spills', () => {
    for (const v of variants) {
      const text = tensorCoreModule(v).emit();
      const oldest = assemblePtx(text, 'sm_80');
      expect(oldest.ok, `${tensorCoreKey(v)}: ${oldest.log}`).toBe(true);
      const log = expectAssemblesCleanly(text, 'sm_90', tensorCoreKey(v)).log;
      // 64 accumulators and the fragments fit the 128 registers a thread of two blocks an SM.
      expect(Number(/Used (\d+) registers/.exec(log)?.[1])).toBeLessThanOrEqual(128);
    }
  }, 300_000);
});
