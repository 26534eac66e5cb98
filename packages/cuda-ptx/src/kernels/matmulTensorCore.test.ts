import { batchedMatmul, createCpuBackend, matmul, sizeOf, type Tensor, toHostArray } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { CudaDriver } from '../driver/driver.js';
import type { DeviceBuffer } from '../driver/pool.js';
import { CommandRecorder } from '../encoder.js';
import type { Operand } from '../kernel.js';
import { assemblePtx, ptxasTestGate } from '../ptx/ptxas.js';
import { expectAssemblesCleanly } from '../testing/expectAssembles.js';
import { FakeLibCuda } from '../testing/fakeLibCuda.js';
import { PtxInterpreter } from '../testing/ptxInterpreter.js';
import {
  encodeTensorCore,
  type HalfDType,
  TC_ENTRY,
  type TensorCoreVariant,
  tensorCoreDtype,
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

// The kernel is recorded by its launch function on an interpreted device: which
// calls reach it is matmul's routing (tensorCoreDtype).
describe('the tensor-core product in the PTX interpreter', () => {
  const fake = new FakeLibCuda();
  new PtxInterpreter(fake).attach();
  const driver = new CudaDriver(fake);
  const stream = driver.createStream();
  const cpu = createCpuBackend();
  const buffers: DeviceBuffer[] = [];
  afterAll(() => {
    for (const b of buffers) driver.free(b);
    cpu.dispose();
  });
  let seed = 11;
  const random = (n: number) =>
    Array.from({ length: n }, () => {
      seed = (seed * 16807) % 2147483647;
      return (seed / 2147483647) * 2 - 1;
    });
  const operand = (h: Uint16Array, shape: number[], dtype: HalfDType): Operand => {
    const buffer = driver.alloc(Math.max(h.byteLength, 16));
    buffers.push(buffer);
    driver.copyHtoD(buffer.ptr, h, h.byteLength);
    return { ptr: buffer.ptr, size: h.length, shape, dtype, byteLength: h.byteLength };
  };

  /**
   * y = alpha · op(a) · op(b) (+ beta · c) for each of `batch` products by the
   * kernel, y poisoned first, against the cpu backend; returns whether it took
   * the 16-byte copies.
   */
  async function check(
    variant: Omit<TensorCoreVariant, 'async'>,
    [m, k, n]: [number, number, number],
    { alpha = 1, beta = 1, batch = 1 } = {},
  ) {
    const { dtype, transA, transB, withC } = variant;
    const shapes = [transA ? [k, m] : [m, k], transB ? [n, k] : [k, n], [m, n]].map((s) =>
      batch > 1 ? [batch, ...s] : s,
    );
    const halves = shapes.map((s) => toHostArray(dtype, random(sizeOf(s))) as Uint16Array);
    const [a, b, c] = halves.map((h, i) => operand(h, shapes[i]!, dtype));
    const y = operand(new Uint16Array(batch * m * n).fill(POISON[dtype]), shapes[2]!, dtype);
    const recorder = new CommandRecorder(driver);
    const call = { a: a!, b: b!, c: withC ? c : undefined, y, batch, m, n, k, transA, transB, alpha, beta };
    expect(tensorCoreDtype(call)).toBe(dtype);
    encodeTensorCore(recorder, call, dtype);
    driver.enqueue(recorder.commands, stream);
    driver.synchronize(stream);
    const got = new Uint16Array(batch * m * n);
    driver.copyDtoH(got, y.ptr, got.byteLength);
    const ins = halves.slice(0, withC ? 3 : 2).map((h, i) => cpu.upload(h, shapes[i]!, dtype));
    const [want] = (
      batch > 1
        ? cpu.run(batchedMatmul, ins, { alpha, transA, transB })
        : cpu.run(matmul, ins, { alpha, beta, transA, transB })
    ) as Tensor[];
    // The conformance suite's bound for half products: 4·u·√K.
    const tol = Math.max(1e-3, 4 * UNIT[dtype] * Math.sqrt(k));
    expect(compareOutputs(dtype, got, await want!.read(), { rtol: tol, atol: tol })).toBeUndefined();
    for (const t of [...ins, want!]) t.dispose();
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
