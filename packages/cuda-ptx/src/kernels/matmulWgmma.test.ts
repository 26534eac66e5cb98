import { batchedMatmul, createCpuBackend, matmul, sizeOf, type Tensor, toHostArray } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { CudaDriver } from '../driver/driver.js';
import type { DeviceBuffer } from '../driver/pool.js';
import { CommandRecorder } from '../encoder.js';
import type { Operand } from '../kernel.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { expectAssemblesCleanly } from '../testing/expectAssembles.js';
import { FakeLibCuda } from '../testing/fakeLibCuda.js';
import { PtxInterpreter } from '../testing/ptxInterpreter.js';
import type { HalfDType } from './matmulTensorCore.js';
import {
  encodeWgmma,
  WG_ENTRY,
  type WgmmaDType,
  type WgmmaVariant,
  wgmmaApplies,
  wgmmaKey,
  wgmmaModule,
} from './matmulWgmma.js';

const UNIT: Record<WgmmaDType, number> = { f16: 2 ** -11, bf16: 2 ** -8, tf32: 2 ** -11 };
const POISON: Record<HalfDType, number> = { f16: 0x7e00, bf16: 0x7fc0 };
const LAYOUTS = [
  [false, false],
  [false, true],
  [true, false],
  [true, true],
] as const;

// The fake device is an sm_90 part: its tensor maps are the fake's own
// encoding, which the interpreter's bulk tensor copies decode.
describe('the wgmma product in the PTX interpreter', () => {
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
  let seed = 7;
  const random = (n: number) =>
    Array.from({ length: n }, () => {
      seed = (seed * 16807) % 2147483647;
      return (seed / 2147483647) * 2 - 1;
    });
  const operand = (
    h: Uint16Array | Float32Array,
    shape: number[],
    dtype: 'f16' | 'bf16' | 'f32',
  ): Operand => {
    const buffer = driver.alloc(Math.max(h.byteLength, 16));
    buffers.push(buffer);
    driver.copyHtoD(buffer.ptr, h, h.byteLength);
    return { ptr: buffer.ptr, size: h.length, shape, dtype, byteLength: h.byteLength };
  };

  async function check(
    variant: WgmmaVariant,
    [m, k, n]: [number, number, number],
    { alpha = 1, beta = 1, batch = 1 } = {},
  ) {
    const { dtype, transA, transB, withC } = variant;
    const stored = dtype === 'tf32' ? 'f32' : dtype;
    const shapes = [transA ? [k, m] : [m, k], transB ? [n, k] : [k, n], [m, n]].map((s) =>
      batch > 1 ? [batch, ...s] : s,
    );
    const host = shapes.map((s) =>
      stored === 'f32'
        ? Float32Array.from(random(sizeOf(s)))
        : (toHostArray(stored, random(sizeOf(s))) as Uint16Array),
    );
    const [a, b, c] = host.map((h, i) => operand(h, shapes[i]!, stored));
    const poison =
      dtype === 'tf32'
        ? new Float32Array(batch * m * n).fill(Number.NaN)
        : new Uint16Array(batch * m * n).fill(POISON[dtype]);
    const y = operand(poison, shapes[2]!, stored);
    const recorder = new CommandRecorder(driver);
    const call = { a: a!, b: b!, c: withC ? c : undefined, y, batch, m, n, k, transA, transB, alpha, beta };
    expect(wgmmaApplies(recorder, call, dtype)).toBe(true);
    const before = fake.launches.filter((l) => l.entry === WG_ENTRY).length;
    encodeWgmma(recorder, call, dtype);
    driver.enqueue(recorder.commands, stream);
    driver.synchronize(stream);
    for (const s of recorder.scratchBuffers) driver.free(s);
    const got = dtype === 'tf32' ? new Float32Array(batch * m * n) : new Uint16Array(batch * m * n);
    driver.copyDtoH(got, y.ptr, got.byteLength);
    const ins = host.slice(0, withC ? 3 : 2).map((h, i) => cpu.upload(h, shapes[i]!, stored));
    const [want] = (
      batch > 1
        ? cpu.run(batchedMatmul, ins, { alpha, transA, transB })
        : cpu.run(matmul, ins, { alpha, beta, transA, transB })
    ) as Tensor[];
    // The conformance suite's bound for reduced-precision products: 4·u·√K.
    const tol = Math.max(1e-3, 4 * UNIT[dtype] * Math.sqrt(k));
    const wanted = await want!.read();
    expect(compareOutputs(stored, got, wanted, { rtol: tol, atol: tol })).toBeUndefined();
    for (const t of [...ins, want!]) t.dispose();
    return fake.launches.filter((l) => l.entry === WG_ENTRY).slice(before);
  }

  it('multiplies one 128 × 128 × 64 tile in each layout', async () => {
    for (const [transA, transB] of LAYOUTS) {
      const launches = await check({ dtype: 'bf16', transA, transB, withC: false }, [128, 64, 128]);
      expect(launches.map((l) => [l.grid, l.block, l.sharedBytes > 192 * 1024])).toEqual([
        [[1, 1, 1], [384, 1, 1], true],
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

  it('runs a batch along the grid z through the maps’ third dimension', async () => {
    const launches = await check({ dtype: 'bf16', transA: false, transB: true, withC: false }, [16, 24, 8], {
      alpha: 2,
      batch: 3,
    });
    expect(launches.map((l) => l.grid)).toEqual([[1, 1, 3]]);
  }, 60_000);

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

describe.skipIf(gate.skip)(`the wgmma product under ptxas (${gate.reason})`, () => {
  it('assembles for sm_90a without spills', () => {
    const variants: WgmmaVariant[] = [
      ...LAYOUTS.map(([transA, transB]) => ({ dtype: 'bf16' as const, transA, transB, withC: false })),
      { dtype: 'f16', transA: false, transB: false, withC: true },
      { dtype: 'tf32', transA: false, transB: true, withC: true },
    ];
    for (const v of variants) {
      const log = expectAssemblesCleanly(wgmmaModule(v).emit(), 'sm_90a', wgmmaKey(v)).log;
      // 384 threads of one block an SM: ptxas budgets 168 registers, setmaxnreg moves them to the consumers.
      expect(Number(/Used (\d+) registers/.exec(log)?.[1]), wgmmaKey(v)).toBeLessThanOrEqual(168);
    }
  }, 300_000);
});
