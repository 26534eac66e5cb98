import {
  type Backend,
  createBackend,
  type HostArray,
  type KernelRunner,
  matmul,
  type Tensor,
} from '@rayo/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBenchmarks } from './bench.js';
import { type BenchCase, elementSubset, matmulRowSubset } from './case.js';
import { ceilingCase, SUITE } from './suite.js';
import { checkOutputs, compareOutput, expectedOutputs, makeInputs, verifyOnBackend } from './verify.js';

/** Bitwise equality of two host arrays (fast, unlike a deep toEqual on large arrays). */
function same(a: HostArray | undefined, b: HostArray | undefined): boolean {
  if (!a || !b) return a === b;
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

const TIMING = {
  warmup: 0,
  minReps: 1,
  maxReps: 1,
  targetMs: 0,
  rotateBytes: 0,
  maxSets: 1,
  deviceSampleMs: 0,
  maxCallsPerSample: 1,
};

/** A backend whose read() returns `corrupt` applied to the real result. */
function corrupting(backend: Backend, corrupt: (data: HostArray) => void): Backend {
  return new Proxy(backend, {
    get(target, key, receiver) {
      if (key === 'read') {
        return async (t: Tensor) => {
          const data = await target.read(t);
          corrupt(data);
          return data;
        };
      }
      const value = Reflect.get(target, key, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

const smallGemm: BenchCase = {
  id: 'gemm/64x32x48',
  family: 'gemm',
  bound: 'flops',
  x: 48,
  spec: matmul,
  inputs: [{ shape: [64, 32] }, { shape: [32, 48] }],
  attrs: {},
  quick: true,
  full: true,
  tolerance: { rtol: 1e-3, atol: 0, relativeTo: 'max' },
};

let cpu: Backend;
beforeAll(async () => {
  cpu = await createBackend('cpu');
});
afterAll(() => cpu.dispose());

describe('compareOutput', () => {
  const tol = { rtol: 1e-3, atol: 1e-6 };

  it('accepts equal and nearly equal values', () => {
    const e = Float32Array.of(1, -2, 3, 1000);
    expect(compareOutput(e, e, tol).ok).toBe(true);
    expect(compareOutput(Float32Array.of(1.0005, -2, 3, 1000.9), e, tol).ok).toBe(true);
  });

  it('counts and locates mismatches', () => {
    const r = compareOutput(Float32Array.of(1, 2.5, 3, 5), Float32Array.of(1, 2, 3, 4), tol);
    expect(r.ok).toBe(false);
    expect(r.mismatches).toBe(2);
    expect(r.first).toBe(1);
    expect(r.maxError).toBeCloseTo(1);
    expect(r.message).toMatch(/^2 of 4 elements differ .*first at \[1\]: got 2.5, expected 2/);
  });

  it('scales by max|expected| when asked', () => {
    const expected = Float32Array.of(1000, 0.001);
    const actual = Float32Array.of(1000, 0.5);
    expect(compareOutput(actual, expected, { rtol: 1e-3, atol: 0 }).ok).toBe(false);
    expect(compareOutput(actual, expected, { rtol: 1e-3, atol: 0, relativeTo: 'max' }).ok).toBe(true);
    expect(
      compareOutput(Float32Array.of(1000, 2), expected, { rtol: 1e-3, atol: 0, relativeTo: 'max' }).ok,
    ).toBe(false);
  });

  it('matches NaN and infinities only exactly', () => {
    const e = Float32Array.of(Number.NaN, Number.POSITIVE_INFINITY);
    expect(compareOutput(Float32Array.of(Number.NaN, Number.POSITIVE_INFINITY), e, tol).ok).toBe(true);
    expect(compareOutput(Float32Array.of(0, Number.POSITIVE_INFINITY), e, tol).ok).toBe(false);
    expect(compareOutput(Float32Array.of(Number.NaN), Float32Array.of(1), tol).ok).toBe(false);
  });

  it('rejects a length mismatch', () => {
    expect(compareOutput(new Float32Array(3), new Float32Array(4), tol).message).toBe(
      '3 elements, expected 4',
    );
  });
});

describe('inputs', () => {
  it('are seeded, never zero, and positive where asked', () => {
    const rms = SUITE.find((c) => c.id === 'rmsnorm/64x4096')!;
    const [x, w] = makeInputs(rms);
    const [x2] = makeInputs(rms);
    expect(same(x, x2)).toBe(true);
    expect(x!.some((v) => v === 0)).toBe(false);
    expect(new Set(x).size).toBeGreaterThan(1000);
    expect(Math.min(...w!)).toBeGreaterThanOrEqual(0.5);
    expect(Math.max(...w!)).toBeLessThan(1.5);
    expect(same(makeInputs(rms, 1)[0], x)).toBe(false);
  });
});

describe('verification', () => {
  it('passes for a correct backend', async () => {
    const data = makeInputs(smallGemm);
    expect(await verifyOnBackend(cpu, smallGemm, data, expectedOutputs(smallGemm, data))).toBeUndefined();
  });

  it('fails on a deliberately wrong result', async () => {
    const data = makeInputs(smallGemm);
    const expected = expectedOutputs(smallGemm, data);
    const wrong = corrupting(cpu, (d) => {
      d[17] = (d[17] as number) + 1;
    });
    const message = await verifyOnBackend(wrong, smallGemm, data, expected);
    expect(message).toMatch(/^output '\w+': 1 of 3072 elements differ/);
    expect(message).toContain('first at [17]');

    const actual = expected.outputs.map((o) => o.slice());
    (actual[0] as Float32Array)[5] = Number.NaN;
    expect(checkOutputs(smallGemm, actual, expected)).toMatch(/1 of 3072 elements differ/);
  });

  it('marks a wrong result FAILED and does not time it', async () => {
    const wrong = corrupting(cpu, (d) => d.fill(0));
    const results = await runBenchmarks({ backends: [cpu, wrong], cases: [smallGemm], timing: TIMING });
    expect(results.map((r) => r.status)).toEqual(['ok', 'FAILED']);
    expect(results[0]!.timing).toBeDefined();
    expect(results[1]!.timing).toBeUndefined();
    expect(results[1]!.message).toMatch(/elements differ/);
    expect(cpu.memory().liveTensors).toBe(0);
  });

  it('reports a backend that throws as ERROR', async () => {
    const broken = new Proxy(cpu, {
      get(target, key) {
        if (key === 'run') {
          return () => {
            throw new Error('device lost');
          };
        }
        const value = Reflect.get(target, key);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const [result] = await runBenchmarks({ backends: [broken], cases: [smallGemm], timing: TIMING });
    expect(result).toMatchObject({ status: 'ERROR', message: 'device lost' });
  });

  it('checks in-place kernels on fresh copies, leaving the inputs as they were', async () => {
    const adamw = SUITE.find((c) => c.id === 'adamw/1e5')!;
    const data = makeInputs(adamw);
    const before = data.map((d) => d?.slice());
    const expected = expectedOutputs(adamw, data);
    expect(expected.outputs).toHaveLength(3);
    expect(await verifyOnBackend(cpu, adamw, data, expected)).toBeUndefined();
    // a second check on the same data still passes: nothing was updated in place
    expect(await verifyOnBackend(cpu, adamw, data, expected)).toBeUndefined();
    expect(data.every((d, i) => same(d, before[i]))).toBe(true);
  });

  it('checks sampled rows of a large GEMM against the reference on those rows', async () => {
    const sampled: BenchCase = { ...smallGemm, subset: matmulRowSubset(64, 32, 48, 5) };
    const data = makeInputs(sampled);
    const expected = expectedOutputs(sampled, data);
    expect(expected.outputs[0]).toHaveLength(5 * 48);
    expect(await verifyOnBackend(cpu, sampled, data, expected)).toBeUndefined();
    // row 63 is sampled (the last row always is)
    const wrong = corrupting(cpu, (d) => {
      d[63 * 48 + 2] = (d[63 * 48 + 2] as number) * 2 + 1;
    });
    expect(await verifyOnBackend(wrong, sampled, data, expected)).toMatch(/1 of 240 elements differ/);
  });
});

describe('sampled checks', () => {
  it('gather rows of a transposed A from its columns', async () => {
    const ta: BenchCase = {
      ...smallGemm,
      id: 'gemm-ta/64x32x48',
      inputs: [{ shape: [32, 64] }, { shape: [32, 48] }],
      attrs: { transA: true },
      subset: matmulRowSubset(64, 32, 48, 7, { transA: true }),
    };
    const data = makeInputs(ta);
    const expected = expectedOutputs(ta, data);
    const full = expectedOutputs({ ...ta, subset: undefined }, data);
    expect(expected.outputs[0]).toHaveLength(7 * 48);
    // the sampled reference is exactly the full reference's rows
    expect(same(expected.outputs[0], expected.select(0, full.outputs[0]!))).toBe(true);
    expect(await verifyOnBackend(cpu, ta, data, expected)).toBeUndefined();
  });

  it('pick the same elements of every input and output of an elementwise kernel', async () => {
    const adamw = SUITE.find((c) => c.id === 'adamw/1e5')!;
    const sampled: BenchCase = { ...adamw, subset: elementSubset(1e5, 100) };
    const data = makeInputs(sampled);
    const expected = expectedOutputs(sampled, data);
    expect(expected.outputs.map((o) => o.length)).toEqual([100, 100, 100]);
    const full = expectedOutputs(adamw, data);
    expect(same(expected.outputs[2], expected.select(2, full.outputs[2]!))).toBe(true);
    expect(await verifyOnBackend(cpu, sampled, data, expected)).toBeUndefined();
  });
});

describe('cases that are not one kernel call', () => {
  const byId = (id: string) => SUITE.find((c) => c.id === id)!;

  it('check the weight cache, a batch chain and transfers on the cpu backend', async () => {
    for (const id of ['wcache/4x512x512', 'batch/1000x1024', 'upload/4KiB', 'read/1MiB']) {
      const c = byId(id);
      const data = makeInputs(c);
      expect(await verifyOnBackend(cpu, c, data, expectedOutputs(c, data)), id).toBeUndefined();
    }
    expect(cpu.memory().liveTensors).toBe(0);
  });

  it('fail a batch whose chain is cut short', async () => {
    const c = byId('batch/1000x1024');
    const data = makeInputs(c);
    const short = expectedOutputs({ ...c, chain: 999 }, data);
    expect(await verifyOnBackend(cpu, c, data, short)).toMatch(/elements differ/);
  });

  it('time them on the host, a batch per kernel', async () => {
    const cases = ['wcache/1x512x512', 'batch/1000x1024', 'upload/4KiB', 'read/4KiB'].map(byId);
    const results = await runBenchmarks({ backends: [cpu], cases, timing: TIMING });
    expect(results.map((r) => [r.status, r.timer])).toEqual(cases.map(() => ['ok', 'host']));
    expect(results.every((r) => r.sets === 1)).toBe(true);
    expect(cpu.memory().liveTensors).toBe(0);
  });
});

/** The cpu backend with a device clock: a submission of n kernels takes `ms(n)` (or no clock: undefined). */
function withClock(
  backend: Backend,
  ms: number | undefined | ((kernels: number) => number),
  calls: { kernels: number }[],
): Backend {
  return new Proxy(backend, {
    get(target, key, receiver) {
      if (key === 'deviceTime') {
        return async (work: (runner: KernelRunner) => void) => {
          const call = { kernels: 0 };
          work({
            run: (...args: Parameters<KernelRunner['run']>) => {
              call.kernels++;
              return target.run(...args);
            },
          });
          calls.push(call);
          return typeof ms === 'function' ? ms(call.kernels) : ms;
        };
      }
      const value = Reflect.get(target, key, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('timers', () => {
  it('use the device clock where the backend has one', async () => {
    const calls: { kernels: number }[] = [];
    const clocked = withClock(cpu, 1.5, calls);
    const timing = { ...TIMING, warmup: 2, minReps: 3, maxReps: 3 };
    const [result] = await runBenchmarks({ backends: [clocked], cases: [smallGemm], timing });
    expect(result).toMatchObject({ status: 'ok', timer: 'device' });
    expect(result!.timing).toMatchObject({ samples: 3, median: 1.5 });
    // a warm-up run and three timed ones, one kernel each
    expect(calls).toEqual([{ kernels: 1 }, { kernels: 1 }, { kernels: 1 }, { kernels: 1 }]);
    expect(cpu.memory().liveTensors).toBe(0);
  });

  it('put several calls into one sample when the device clock is coarse', async () => {
    const calls: { kernels: number }[] = [];
    // 0.25 ms per kernel on a clock that counts whole milliseconds
    const coarse = withClock(cpu, (kernels) => Math.floor(kernels * 0.25), calls);
    const timing = { ...TIMING, minReps: 3, maxReps: 3, deviceSampleMs: 4, maxCallsPerSample: 100 };
    const [result] = await runBenchmarks({ backends: [coarse], cases: [smallGemm], timing });
    expect(result).toMatchObject({ status: 'ok', timer: 'device', callsPerSample: 20 });
    expect(result!.timing!.median).toBeCloseTo(0.25);
    // 1 call reads 0 ms, 8 calls 2 ms, 20 calls 5 ms: then three samples of 20
    expect(calls.map((c) => c.kernels)).toEqual([1, 8, 20, 20, 20, 20]);
    expect(cpu.memory().liveTensors).toBe(0);
  });

  it('fall back to the host when the device has no timestamps', async () => {
    const calls: { kernels: number }[] = [];
    const [result] = await runBenchmarks({
      backends: [withClock(cpu, undefined, calls)],
      cases: [smallGemm],
      timing: TIMING,
    });
    expect(result).toMatchObject({ status: 'ok', timer: 'host' });
    expect(calls).toHaveLength(1);
  });

  it('rotate input sets that fit in L2, and measure the ceiling first', async () => {
    const rotating = { ...TIMING, rotateBytes: 4 * 3 * 64 * 48 * 4, maxSets: 8 };
    const ceiling = ceilingCase('quick', 2 ** 16);
    const results = await runBenchmarks({
      backends: [cpu],
      cases: [smallGemm],
      timing: rotating,
      ceiling: () => ceiling,
    });
    expect(results.map((r) => [r.id, r.ceiling ?? false])).toEqual([
      ['copy/64KiB', true],
      ['gemm/64x32x48', false],
    ]);
    expect(results[1]!.sets).toBeGreaterThan(1);
    expect(cpu.memory().liveTensors).toBe(0);
  });
});
