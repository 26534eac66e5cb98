import { expectError, run, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { copy, fill, transpose } from './memory.js';

describe('fill', () => {
  it('writes the value into every element of x, in place', () => {
    const x = Float32Array.from([1, 2, 3, 4, 5, 6]);
    const { outputs, values } = run(fill, [{ shape: [2, 3], data: x }], { value: 0.1 });
    expect(outputs).toEqual([{ name: 'y', shape: [2, 3], dtype: 'f32', aliasOf: 0 }]);
    expect(values[0]).toBeInstanceOf(Float32Array);
    expect([...values[0]!]).toEqual(new Array(6).fill(Math.fround(0.1)));
  });

  it('fills integer tensors with integers up to their limits', () => {
    const i = run(fill, [{ shape: [3], data: Int32Array.from([1, 2, 3]), dtype: 'i32' }], {
      value: -(2 ** 31),
    });
    expect(i.values[0]).toBeInstanceOf(Int32Array);
    expect([...i.values[0]!]).toEqual([-(2 ** 31), -(2 ** 31), -(2 ** 31)]);
    const u = run(fill, [{ shape: [2], data: Uint32Array.from([1, 2]), dtype: 'u32' }], {
      value: 2 ** 32 - 1,
    });
    expect(u.values[0]).toBeInstanceOf(Uint32Array);
    expect([...u.values[0]!]).toEqual([2 ** 32 - 1, 2 ** 32 - 1]);
  });

  it('fills a scalar', () => {
    const { values } = run(fill, [{ shape: [], data: Float32Array.from([3]) }], { value: -2 });
    expect([...values[0]!]).toEqual([-2]);
  });

  it('rejects a value an integer tensor cannot hold', () => {
    const i32 = [{ shape: [4], dtype: 'i32' as const }];
    const u32 = [{ shape: [4], dtype: 'u32' as const }];
    const range = 'an integer in [-2147483648, 2147483647]';
    for (const [metas, value, expected] of [
      [i32, 2.5, range],
      [i32, 2 ** 31, range],
      [i32, -(2 ** 31) - 1, range],
      [u32, -1, 'an integer in [0, 4294967295]'],
      [u32, 2 ** 32, 'an integer in [0, 4294967295]'],
    ] as const) {
      const e = thrown(() => inferKernel(fill, metas, { value }));
      expectError(e, InvalidArgumentError, 'fill', 'attrs.value', expected, String(value));
    }
  });

  it('requires a value', () => {
    const e = thrown(() => inferKernel(fill, [{ shape: [4], dtype: 'f32' }], {}));
    expectError(e, InvalidArgumentError, 'fill', 'attrs.value', 'a number', 'nothing');
  });

  it('moves one write of x', () => {
    expect(fill.cost!([{ shape: [3, 5], dtype: 'f32' }], { value: 1 })).toEqual({ flops: 0, bytes: 60 });
  });
});

describe('copy', () => {
  it('returns a new array with the same contents, shape and dtype', () => {
    const x = Int32Array.from([5, -6, 7, 8]);
    const { outputs, values } = run(copy, [{ shape: [2, 2], data: x, dtype: 'i32' }]);
    expect(outputs).toEqual([{ name: 'y', shape: [2, 2], dtype: 'i32' }]);
    expect(values[0]).toBeInstanceOf(Int32Array);
    expect(values[0]).not.toBe(x);
    expect([...values[0]!]).toEqual([5, -6, 7, 8]);
  });

  it('copies floats bit for bit', () => {
    const x = Float32Array.from([Number.NaN, -0, Number.POSITIVE_INFINITY, 1e-40]);
    const { values } = run(copy, [{ shape: [4], data: x }]);
    expect(new Uint32Array(values[0]!.buffer)).toEqual(new Uint32Array(x.buffer));
  });
});

describe('transpose', () => {
  it('swaps the axes of a hand-written 2×3 matrix', () => {
    const x = Float32Array.from([1, 2, 3, 4, 5, 6]);
    const { outputs, values } = run(transpose, [{ shape: [2, 3], data: x }]);
    expect(outputs).toEqual([{ name: 'y', shape: [3, 2], dtype: 'f32' }]);
    expect([...values[0]!]).toEqual([1, 4, 2, 5, 3, 6]);
  });

  it('transposes each matrix of a batch', () => {
    const x = Uint32Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    const { outputs, values } = run(transpose, [{ shape: [2, 2, 3], data: x, dtype: 'u32' }]);
    expect(outputs[0]!.shape).toEqual([2, 3, 2]);
    expect(values[0]).toBeInstanceOf(Uint32Array);
    expect([...values[0]!]).toEqual([1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12]);
  });

  it('transposing twice gives x back', () => {
    const rng = new Rng(3);
    const x = Float32Array.from({ length: 3 * 5 * 7 }, () => rng.uniform(-1, 1));
    const once = run(transpose, [{ shape: [3, 5, 7], data: x }]);
    const twice = run(transpose, [{ shape: once.outputs[0]!.shape, data: once.values[0]! }]);
    expect(twice.outputs[0]!.shape).toEqual([3, 5, 7]);
    expect(twice.values[0]).toEqual(x);
  });

  it('handles 10^6 elements quickly', () => {
    const x = new Float32Array(1000 * 1003).map((_, i) => i);
    const start = performance.now();
    const { values } = run(transpose, [{ shape: [1000, 1003], data: x }]);
    expect(performance.now() - start).toBeLessThan(1000);
    expect(values[0]![1000]).toBe(1); // y[1, 0] = x[0, 1]
  });

  it('rejects a rank below 2', () => {
    for (const shape of [[7], []]) {
      const e = thrown(() => inferKernel(transpose, [{ shape, dtype: 'f32' }]));
      expectError(
        e,
        ShapeError,
        'transpose',
        'x',
        'rank >= 2 [..., R, C]',
        `rank ${shape.length} [${shape.join(', ')}]`,
      );
    }
  });
});
