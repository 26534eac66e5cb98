import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BroadcastPlan, broadcastPlan } from './broadcastPlan.js';
import { runReference } from './kernel.js';
import { inferKernel } from './kernelChecks.js';
import { add } from './kernels/elementwise.js';
import { broadcastIndexMap, broadcastShapes, type Shape, sizeOf } from './shape.js';

/** A broadcasting kernel's index arithmetic, in JS: innermost coordinate first, the outermost is what is left. */
function planIndices(plan: BroadcastPlan, n: number): [number[], number[]] {
  const ia: number[] = [];
  const ib: number[] = [];
  const rank = plan.dims.length;
  for (let i = 0; i < n; i++) {
    let rest = i;
    let a = 0;
    let b = 0;
    for (let d = rank - 1; d >= 1; d--) {
      const c = rest % plan.dims[d]!;
      rest = Math.floor(rest / plan.dims[d]!);
      a += c * plan.sa[d]!;
      b += c * plan.sb[d]!;
    }
    ia.push(a + rest * plan.sa[0]!);
    ib.push(b + rest * plan.sb[0]!);
  }
  return [ia, ib];
}

const context = { operation: 'add', argument: 'b' };

/** Broadcastable pairs of shapes: an output shape, each operand with some axes 1 and some leading axes dropped. */
function broadcastablePairs(maxRank: number, maxDim: number) {
  const dim = fc.integer({ min: 1, max: maxDim });
  return fc
    .array(dim, { minLength: 0, maxLength: maxRank })
    .chain((out) =>
      fc.tuple(
        fc.constant(out),
        fc.array(fc.boolean(), { minLength: out.length, maxLength: out.length }),
        fc.array(fc.boolean(), { minLength: out.length, maxLength: out.length }),
        fc.nat({ max: out.length }),
        fc.nat({ max: out.length }),
      ),
    )
    .map(([out, onesA, onesB, dropA, dropB]) => {
      const a = out.map((d, i) => (onesA[i] ? 1 : d)).slice(dropA);
      const b = out.map((d, i) => (onesB[i] ? 1 : d)).slice(dropB);
      return [a, b] as [Shape, Shape];
    });
}

describe('broadcastPlan', () => {
  it('merges contiguous axes and drops size-1 ones', () => {
    expect(broadcastPlan([7, 13], [7, 13], [7, 13])).toEqual({ dims: [91], sa: [1], sb: [1] });
    expect(broadcastPlan([7, 13], [7, 13], [13])).toEqual({ dims: [7, 13], sa: [13, 1], sb: [0, 1] });
    expect(broadcastPlan([61, 3], [1], [61, 3])).toEqual({ dims: [183], sa: [0], sb: [1] });
    expect(broadcastPlan([5, 4, 3], [5, 1, 3], [1, 4, 3])).toEqual({
      dims: [5, 4, 3],
      sa: [3, 0, 1],
      sb: [0, 3, 1],
    });
    // The size-1 axis would otherwise keep b's row from merging with a's.
    expect(broadcastPlan([2, 1, 3], [2, 1, 3], [3])).toEqual({ dims: [2, 3], sa: [3, 1], sb: [0, 1] });
    expect(broadcastPlan([], [], [])).toEqual({ dims: [1], sa: [0], sb: [0] });
    expect(broadcastPlan([1, 1], [1], [1, 1])).toEqual({ dims: [1], sa: [0], sb: [0] });
  });

  it('reads the same elements as the reference for any broadcastable shapes', () => {
    fc.assert(
      fc.property(broadcastablePairs(7, 4), ([a, b]) => {
        const out = broadcastShapes(a, b, context);
        const plan = broadcastPlan(out, a, b);
        expect(plan.dims.length).toBeLessThanOrEqual(Math.max(1, out.filter((d) => d !== 1).length));
        expect(plan.dims.reduce((x, y) => x * y, 1)).toBe(sizeOf(out));
        const [ia, ib] = planIndices(plan, sizeOf(out));
        expect(ia).toEqual([...broadcastIndexMap(a, out)]);
        expect(ib).toEqual([...broadcastIndexMap(b, out)]);
      }),
      { numRuns: 300 },
    );
  });

  it("gives the reference's sums when a kernel indexes random operands through it", () => {
    fc.assert(
      fc.property(
        broadcastablePairs(5, 5),
        fc.integer({ min: 1, max: 2 ** 30 }),
        ([aShape, bShape], seed) => {
          let state = seed;
          const random = (n: number) =>
            Float32Array.from({ length: n }, () => {
              state = (state * 16807) % 2147483647;
              return (state / 2147483647) * 2 - 1;
            });
          const a = random(sizeOf(aShape));
          const b = random(sizeOf(bShape));
          const out = broadcastShapes(aShape, bShape, context);
          const inputs = [
            { shape: aShape, dtype: 'f32' as const },
            { shape: bShape, dtype: 'f32' as const },
          ];
          const { outputs } = inferKernel(add, inputs);
          const [want] = runReference(add, [a, b], {}, { inputs, outputs });
          const [ia, ib] = planIndices(broadcastPlan(out, aShape, bShape), sizeOf(out));
          const got = Float32Array.from(ia, (i, e) => a[i]! + b[ib[e]!]!);
          expect(got).toEqual(want);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('needs fewer axes than the output has where some are 1', () => {
    // Seven output axes, one of them 1: six independent axes after dropping it.
    const out = [2, 3, 2, 1, 3, 2, 3];
    const a = [2, 1, 2, 1, 1, 2, 1];
    const b = [1, 3, 1, 1, 3, 1, 3];
    expect(broadcastPlan(out, a, b).dims).toEqual([2, 3, 2, 3, 2, 3]);
  });
});
