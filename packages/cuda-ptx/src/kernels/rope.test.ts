import { rope, UnsupportedOnBackendError } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { type AssemblyJob, expectAllAssembleCleanly, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { headsPerThread, PAIR_BITS, pairIndexBits, ropeKey, ropeModule, thetaPowers } from './rope.js';

const H100 = { multiprocessors: 132, maxThreadsPerMultiprocessor: 2048 };

describe('rope kernel', () => {
  it('keys a rope module by its layout and head count', () => {
    expect(ropeKey({ layout: 'interleaved', headsPerThread: 4 })).toBe('rope/interleaved/heads4');
  });

  it("holds theta's powers in 1.63 fixed point, one per bit of a pair index", () => {
    const powers = thetaPowers('rope', 10000, 128);
    expect(Object.keys(powers)).toHaveLength(PAIR_BITS);
    expect(Number(powers.power0!) / 2 ** 63).toBeCloseTo(10000 ** (-2 / 128), 15);
    expect(Number(powers.power3!) / 2 ** 63).toBeCloseTo(10000 ** (-16 / 128), 15);
    expect(thetaPowers('rope', 1, 8).power5).toBe(2n ** 63n);
    expect(() => thetaPowers('rope', 10000, 2 ** 18)).toThrow(UnsupportedOnBackendError);
  });

  it('multiplies only the powers of the bits a pair index has', () => {
    expect([1, 2, 3, 32, 33, 64, 2 ** 16, 2 ** 17].map(pairIndexBits)).toEqual([0, 1, 2, 5, 6, 6, 16, 16]);
    expect(ropeKey({ layout: 'half', headsPerThread: 4, indexBits: 5 })).toBe('rope/half/heads4/bits5');
    const products = (indexBits: number) =>
      ropeModule({ layout: 'half', headsPerThread: 1, indexBits })
        .emit()
        .match(/mul\.hi\.u64/g)!.length;
    // One 64-bit product per power a pair's bits select, and one to turns.
    expect(products(PAIR_BITS) - products(5)).toBe(PAIR_BITS - 5);
  });

  it('shares an angle among four or eight heads only where pairs are plentiful', () => {
    expect(headsPerThread(H100, 32 * 64, 32)).toBe(1);
    expect(headsPerThread(H100, 512 * 32 * 32, 32)).toBe(4);
    expect(headsPerThread(H100, 4096 * 32 * 64, 32)).toBe(8);
    expect(headsPerThread(H100, 4096 * 32 * 64, 6)).toBe(4);
    expect(headsPerThread(H100, 4096 * 32 * 64, 2)).toBe(1);
  });

  it('emits no approximate sin or cos', () => {
    const text = ropeModule({ layout: 'half', headsPerThread: 1 }).emit();
    expect(text).not.toMatch(/sin\.approx|cos\.approx/);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`rope PTX assembles with ptxas (${gate.reason})`, () => {
  it(`every layout, head count, position and table, f32 and half, for sm_90 and ${DEFAULT_TARGET}`, () => {
    const jobs: AssemblyJob[] = [];
    for (const layout of ['half', 'interleaved'] as const) {
      for (const [heads, devicePosition, table] of [
        [1, false, false],
        [4, false, false],
        [1, true, false],
        [4, true, false],
        [1, false, true],
        [4, true, true],
        [8, false, false],
        [8, true, true],
      ] as const) {
        // Theta's kernels with the 5 bits of a head of 64; tables take no bits.
        const indexBits = table ? PAIR_BITS : 5;
        const key = ropeKey({ layout, headsPerThread: heads, devicePosition, table, indexBits });
        for (const type of ['f32', 'f16', 'bf16'] as const) {
          const ptx = ropeModule({
            layout,
            headsPerThread: heads,
            devicePosition,
            type,
            table,
            indexBits,
          }).emit();
          for (const arch of ['sm_90', DEFAULT_TARGET])
            jobs.push({ ptx, arch, what: `${key} ${type} ${arch}` });
        }
      }
    }
    expectAllAssembleCleanly(jobs);
  });
});

describe('rope on an emulated device', () => {
  // One SM: a few thousand pairs already take the four-heads path.
  const { gpu, cpu } = useEmulatedGpu({ multiprocessors: 1 });

  async function check(shape: [number, number, number], attrs: Record<string, unknown>, atol: number) {
    const rng = new Rng(shape.reduce((a, b) => a * 31 + b, 7));
    const data = Float32Array.from({ length: shape[0] * shape[1] * shape[2] }, () => rng.uniform(-1, 1));
    const got = await gpu.run(rope, [gpu.upload(data, shape)], attrs)[0]!.read();
    const want = await cpu.run(rope, [cpu.upload(data, shape)], attrs)[0]!.read();
    expect(compareOutputs('f32', got, want, { rtol: 1e-5, atol })).toBeUndefined();
  }

  // The conformance bound, which holds at every position an i32 holds.
  it('is accurate at large positions, both layouts, forwards and inverse', async () => {
    for (const layout of ['half', 'interleaved']) {
      for (const inverse of [false, true]) {
        for (const positionOffset of [100_000, 2 ** 24 - 8, 2 ** 31 - 3]) {
          await check([2, 3, 64], { positionOffset, layout, inverse }, 2e-6);
        }
      }
    }
  }, 120_000);

  it('takes four heads per thread, with a partial last run', async () => {
    expect(headsPerThread({ multiprocessors: 1, maxThreadsPerMultiprocessor: 2048 }, 48 * 6 * 64, 6)).toBe(4);
    await check([48, 6, 128], { positionOffset: 3, layout: 'half' }, 2e-6);
    await check([48, 6, 128], { positionOffset: 3, layout: 'interleaved', inverse: true }, 2e-6);
  }, 120_000);

  it("takes eight heads per thread past eight times the device's threads, with a partial last run", async () => {
    expect(headsPerThread({ multiprocessors: 1, maxThreadsPerMultiprocessor: 2048 }, 40 * 10 * 64, 10)).toBe(
      8,
    );
    await check([40, 10, 128], { positionOffset: 5, layout: 'half' }, 2e-6);
    await check([40, 10, 128], { positionOffset: 5, layout: 'interleaved', inverse: true }, 2e-6);
  }, 120_000);

  it('refuses a base below 1 or an infinite one by name', () => {
    const x = gpu.upload(new Float32Array(9 * 2 * 16).fill(0.5), [9, 2, 16]);
    expect(() => gpu.run(rope, [x], { theta: Number.POSITIVE_INFINITY })).toThrow(
      expect.objectContaining({ argument: 'attrs.theta', expected: 'a finite number' }),
    );
    expect(() => gpu.run(rope, [x], { theta: 0.5 })).toThrow(
      expect.objectContaining({ argument: 'attrs.theta' }),
    );
    x.dispose();
  });

  it('reads a frequency table in place of theta, with four heads per thread too', async () => {
    const rng = new Rng(3);
    for (const [shape, positionOffset, layout] of [
      [[5, 3, 64], 70_000, 'half'],
      [[2, 3, 64], 2 ** 24 - 8, 'interleaved'],
      [[48, 6, 128], 3, 'interleaved'],
    ] as const) {
      const [seq, heads, headDim] = shape;
      const table = Float32Array.from({ length: headDim / 2 }, () => 10 ** rng.uniform(-5, 0));
      const data = Float32Array.from({ length: seq * heads * headDim }, () => rng.uniform(-1, 1));
      const attrs = { positionOffset, layout };
      const got = await gpu
        .run(rope, [gpu.upload(data, [...shape]), undefined, gpu.upload(table, [headDim / 2])], attrs)[0]!
        .read();
      const want = await cpu
        .run(rope, [cpu.upload(data, [...shape]), undefined, cpu.upload(table, [headDim / 2])], attrs)[0]!
        .read();
      expect(compareOutputs('f32', got, want, { rtol: 1e-5, atol: 2e-6 })).toBeUndefined();
    }
  }, 120_000);
});
