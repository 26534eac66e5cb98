import { type Backend, createBackend, type HostArray, matmul, type Tensor } from '@rayo/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBenchmarks } from './bench.js';
import { type BenchCase, matmulRowSubset, SUITE } from './suite.js';
import { checkOutputs, compareOutput, expectedOutputs, makeInputs, verifyOnBackend } from './verify.js';

/** Bitwise equality of two host arrays (fast, unlike a deep toEqual on large arrays). */
function same(a: HostArray | undefined, b: HostArray | undefined): boolean {
  if (!a || !b) return a === b;
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

const TIMING = { warmup: 0, minReps: 1, maxReps: 1, targetMs: 0 };

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
