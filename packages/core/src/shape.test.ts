import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ShapeError } from './errors.js';
import {
  broadcastIndexMap,
  broadcastShapes,
  formatShape,
  resolveReshape,
  sizeOf,
  stridesOf,
} from './shape.js';

const ctx = { operation: 'test', argument: 'b' };
const dim = fc.integer({ min: 1, max: 6 });
const shape = fc.array(dim, { minLength: 0, maxLength: 4 });

describe('shapes', () => {
  it('sizeOf is the product of the dimensions, 1 for a scalar', () => {
    expect(sizeOf([])).toBe(1);
    expect(sizeOf([3, 0, 2])).toBe(0);
    fc.assert(fc.property(shape, (s) => sizeOf(s) === s.reduce((a, b) => a * b, 1)));
  });

  it('row-major strides end in 1 and multiply up', () => {
    expect(stridesOf([2, 3, 4])).toEqual([12, 4, 1]);
    fc.assert(fc.property(shape, (s) => stridesOf(s).every((st, i) => st === sizeOf(s.slice(i + 1)))));
  });

  it('broadcasting a shape with itself or with [] is the identity', () => {
    fc.assert(
      fc.property(shape, (s) => {
        expect(broadcastShapes(s, s, ctx)).toEqual(s);
        expect(broadcastShapes(s, [], ctx)).toEqual(s);
        expect(broadcastShapes([], s, ctx)).toEqual(s);
      }),
    );
  });

  it('broadcasting is commutative and the result covers both operands', () => {
    // b is derived from a by replacing dimensions with 1 and dropping leading axes.
    const pair = shape.chain((a) =>
      fc
        .tuple(fc.array(fc.boolean(), { minLength: a.length, maxLength: a.length }), fc.nat(a.length))
        .map(([ones, drop]) => [a, a.map((d, i) => (ones[i] ? 1 : d)).slice(drop)] as const),
    );
    fc.assert(
      fc.property(pair, ([a, b]) => {
        const ab = broadcastShapes(a, b, ctx);
        expect(broadcastShapes(b, a, ctx)).toEqual(ab);
        expect(ab).toEqual(a);
        expect(sizeOf(ab)).toBeGreaterThanOrEqual(sizeOf(b));
      }),
    );
  });

  it('incompatible dimensions are a ShapeError naming the argument, expected and actual', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 9 }), fc.integer({ min: 2, max: 9 }), (x, y) => {
        fc.pre(x !== y);
        try {
          broadcastShapes([4, x], [y], ctx);
          return false;
        } catch (error) {
          expect(error).toBeInstanceOf(ShapeError);
          const e = error as ShapeError;
          expect(e.operation).toBe('test');
          expect(e.argument).toBe('b');
          expect(e.message).toContain(formatShape([y]));
          expect(e.message).toContain(formatShape([4, x]));
          return true;
        }
      }),
    );
  });

  it('broadcastIndexMap points each output element at its source', () => {
    fc.assert(
      fc.property(
        shape.chain((a) =>
          fc
            .array(fc.boolean(), { minLength: a.length, maxLength: a.length })
            .map((ones) => [a, a.map((d, i) => (ones[i] ? 1 : d))] as const),
        ),
        ([out, src]) => {
          const map = broadcastIndexMap(src, out);
          const outStrides = stridesOf(out);
          const srcStrides = stridesOf(src);
          for (let flat = 0; flat < map.length; flat++) {
            let expected = 0;
            let rest = flat;
            out.forEach((_, d) => {
              const i = Math.floor(rest / outStrides[d]!);
              rest -= i * outStrides[d]!;
              expected += (src[d] === 1 ? 0 : i) * srcStrides[d]!;
            });
            expect(map[flat]).toBe(expected);
          }
        },
      ),
    );
  });
});

describe('resolveReshape', () => {
  it('keeps the number of elements and infers one −1', () => {
    expect(resolveReshape([2, 3], [3, 2])).toEqual([3, 2]);
    expect(resolveReshape([2, 3, 4], [-1, 4])).toEqual([6, 4]);
    expect(resolveReshape([0, 3], [3, 0])).toEqual([3, 0]);
    expect(resolveReshape([1, 1], [])).toEqual([]);
  });
  it('refuses another size, two −1s, or a −1 next to a zero', () => {
    for (const to of [
      [4, 2],
      [-1, -1],
      [-1, 4],
      [0, -1],
      [2.5, 2],
    ]) {
      expect(() => resolveReshape([2, 3], to)).toThrow(ShapeError);
    }
    expect(() => resolveReshape([2, 3], [7])).toThrow(/expected a shape of 6 elements/);
  });
});
