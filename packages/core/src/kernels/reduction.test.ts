import { expectError, type Input, run, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { argmax, max, sum, sumSquares } from './reduction.js';

const X = { shape: [2, 3], data: Float32Array.from([1, -2, 3, -4, 5, 0.5]) };

/** Sum, max and sum of squares of `x` over `axis` are each one value of shape [], the ones `expected` lists. */
function expectScalars(x: Input, axis: 'last' | 'all', expected: readonly [number, number, number]): void {
  [sum, max, sumSquares].forEach((spec, i) => {
    const { outputs, values } = run(spec, [x], { axis });
    expect(outputs).toEqual([{ name: 'y', shape: [], dtype: 'f32' }]);
    expect([...values[0]!]).toEqual([expected[i]]);
  });
}

describe('reductions over the last axis', () => {
  it('drop the last axis of a hand-written 2×3 matrix', () => {
    const s = run(sum, [X]);
    expect(s.outputs).toEqual([{ name: 'y', shape: [2], dtype: 'f32' }]);
    expect([...s.values[0]!]).toEqual([2, 1.5]);
    expect([...run(max, [X]).values[0]!]).toEqual([3, 5]);
    expect([...run(sumSquares, [X]).values[0]!]).toEqual([14, 41.25]);
  });

  it('reduce a vector to a scalar of shape []', () => {
    expectScalars({ shape: [4], data: Float32Array.from([1, 2, 3, 4]) }, 'last', [10, 4, 30]);
  });

  it('max does not start from zero', () => {
    const x = { shape: [2, 2], data: Float32Array.from([-3, -2, -0.5, -7]) };
    expect([...run(max, [x]).values[0]!]).toEqual([-2, -0.5]);
  });

  it('max propagates NaN', () => {
    const x = { shape: [3], data: Float32Array.from([1, Number.NaN, 2]) };
    expect(run(max, [x]).values[0]![0]).toBeNaN();
  });

  it('sum of an empty axis is 0', () => {
    const { outputs, values } = run(sum, [{ shape: [3, 0], data: new Float32Array(0) }]);
    expect(outputs[0]!.shape).toEqual([3]);
    expect([...values[0]!]).toEqual([0, 0, 0]);
  });
});

describe('reductions over everything', () => {
  it('give shape []', () => {
    expectScalars(X, 'all', [3.5, 5, 55.25]);
  });

  it('accumulate in doubles', () => {
    // In float32, 1e8 + 1 rounds back to 1e8.
    const x = { shape: [3], data: Float32Array.from([1e8, 1, -1e8]) };
    expect([...run(sum, [x], { axis: 'all' }).values[0]!]).toEqual([1]);
  });

  it('handle 10^6 elements quickly and agree with the last-axis reduction', () => {
    const rng = new Rng(5);
    const x = {
      shape: [1000, 1001],
      data: Float32Array.from({ length: 1000 * 1001 }, () => rng.uniform(-1, 1)),
    };
    const start = performance.now();
    const all = run(sum, [x], { axis: 'all' }).values[0]![0]!;
    const rows = run(sum, [x]).values[0]!;
    expect(performance.now() - start).toBeLessThan(1000);
    expect(rows.length).toBe(1000);
    let total = 0;
    for (const r of rows) total += r;
    expect(all).toBeCloseTo(total, 2);
  });
});

describe('reduction errors', () => {
  it('reject a rank-0 x', () => {
    for (const spec of [sum, max, sumSquares]) {
      const e = thrown(() => inferKernel(spec, [{ shape: [], dtype: 'f32' }]));
      expectError(e, ShapeError, spec.name, 'x', 'rank >= 1 [..., N]', 'rank 0 []');
    }
  });

  it('reject an unknown axis', () => {
    const e = thrown(() => inferKernel(sum, [{ shape: [3], dtype: 'f32' }], { axis: 'first' as 'last' }));
    expectError(e, InvalidArgumentError, 'sum', 'attrs.axis', '"last" | "all"', '"first"');
  });

  it('max rejects an empty reduction', () => {
    let e = thrown(() => inferKernel(max, [{ shape: [3, 0], dtype: 'f32' }]));
    expectError(e, ShapeError, 'max', 'x', 'a last dimension of at least 1', '[3, 0]');
    e = thrown(() => inferKernel(max, [{ shape: [0, 3], dtype: 'f32' }], { axis: 'all' }));
    expectError(e, ShapeError, 'max', 'x', 'at least one element', '[0, 3]');
  });
});

describe('reduction cost', () => {
  it('reads x once and writes one value per run', () => {
    const x = [{ shape: [4, 5], dtype: 'f32' as const }];
    expect(sum.cost!(x, { axis: 'last' })).toEqual({ flops: 20, bytes: 96 });
    expect(sumSquares.cost!(x, { axis: 'all' })).toEqual({ flops: 40, bytes: 84 });
  });
});

describe('argmax', () => {
  const at = (data: number[], shape = [data.length]) => [
    ...run(argmax, [{ shape, data: Float32Array.from(data) }]).values[0]!,
  ];

  it('gives i32 indices, one per row, and [] for a vector', () => {
    const { outputs, values } = run(argmax, [X]);
    expect(outputs).toEqual([{ name: 'y', shape: [2], dtype: 'i32' }]);
    expect(values[0]).toBeInstanceOf(Int32Array);
    expect([...values[0]!]).toEqual([2, 1]);
    expect(run(argmax, [{ shape: [4], data: Float32Array.from([1, 4, 2, 3]) }]).outputs[0]!.shape).toEqual(
      [],
    );
    expect(at([7])).toEqual([0]);
  });

  it('keeps the lowest index of equal values, -0 and +0 included', () => {
    expect(at([1, 3, 2, 3, 3])).toEqual([1]);
    expect(at([-1, -0, 0, -2])).toEqual([1]);
    expect(at([-1, 0, -0])).toEqual([1]);
    expect(at([5, 5, 5, 1, 1, 1], [2, 3])).toEqual([0, 0]);
  });

  it('does not start from zero', () => {
    expect(at([-3, -2, -0.5, -7])).toEqual([2]);
  });

  it('orders ±Infinity like numbers and counts NaN as largest (the first NaN wins), as torch.argmax does', () => {
    const inf = Number.POSITIVE_INFINITY;
    const nan = Number.NaN;
    expect(at([-inf, -inf])).toEqual([0]);
    expect(at([-inf, 1, inf, inf])).toEqual([2]);
    expect(at([3, nan, 1, 5])).toEqual([1]);
    expect(at([inf, nan, -inf, nan])).toEqual([1]);
    expect(at([1, 2, nan])).toEqual([2]);
    expect(at([nan, nan])).toEqual([0]);
  });

  it('rejects a rank-0 x and an empty last axis', () => {
    let e = thrown(() => inferKernel(argmax, [{ shape: [], dtype: 'f32' }]));
    expectError(e, ShapeError, 'argmax', 'x', 'rank >= 1 [..., N]', 'rank 0 []');
    e = thrown(() => inferKernel(argmax, [{ shape: [3, 0], dtype: 'f32' }]));
    expectError(e, ShapeError, 'argmax', 'x', 'a last dimension of at least 1', '[3, 0]');
  });

  it('reads x once and writes one index per row', () => {
    expect(argmax.cost!([{ shape: [4, 5], dtype: 'f32' }], {})).toEqual({ flops: 20, bytes: 96 });
  });
});
