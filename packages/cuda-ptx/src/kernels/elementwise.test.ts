import { broadcastIndexMap, broadcastShapes, type Shape, sizeOf } from '@rayo/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { assemblePtx, ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import {
  BINARY_OPS,
  binaryModule,
  broadcastPlan,
  ELEMENTWISE_KERNELS,
  MAP_DECLS,
  MAX_RANK,
  mapModule,
} from './elementwise.js';

/** The kernel's index arithmetic, in JS: innermost coordinate first, the outermost is what is left. */
function planIndices(plan: ReturnType<typeof broadcastPlan>, n: number): [number[], number[]] {
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

const context = { kernel: 'add', argument: 'b' };

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
    expect(broadcastPlan([2, 1, 3], [2, 1, 3], [3])).toEqual({ dims: [2, 3], sa: [3, 1], sb: [0, 1] });
    expect(broadcastPlan([], [], [])).toEqual({ dims: [1], sa: [0], sb: [0] });
    expect(broadcastPlan([1, 1], [1], [1, 1])).toEqual({ dims: [1], sa: [0], sb: [0] });
  });

  it('reads the same elements as the reference for any broadcastable shapes', () => {
    const dim = fc.integer({ min: 1, max: 4 });
    const shapes = fc
      .array(dim, { minLength: 0, maxLength: 6 })
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
    fc.assert(
      fc.property(shapes, ([a, b]) => {
        const out = broadcastShapes(a, b, context);
        const plan = broadcastPlan(out, a, b);
        expect(plan.dims.length).toBeLessThanOrEqual(Math.max(1, out.length));
        expect(plan.dims.reduce((x, y) => x * y, 1)).toBe(sizeOf(out));
        const [ia, ib] = planIndices(plan, sizeOf(out));
        expect(ia).toEqual([...broadcastIndexMap(a, out)]);
        expect(ib).toEqual([...broadcastIndexMap(b, out)]);
      }),
      { numRuns: 300 },
    );
  });

  it('needs at most MAX_RANK axes for shapes of rank MAX_RANK', () => {
    const out = [2, 3, 2, 3, 2, 3];
    const a = [2, 1, 2, 1, 2, 1];
    const b = [1, 3, 1, 3, 1, 3];
    expect(broadcastPlan(out, a, b).dims).toHaveLength(MAX_RANK);
  });
});

describe('elementwise PTX', () => {
  it('implements every elementwise spec once', () => {
    const names = ELEMENTWISE_KERNELS.map((k) => k.spec.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toEqual(
      expect.arrayContaining(['add', 'div', 'gelu', 'swigluBackward', 'biasAdd', 'clipBackward']),
    );
  });

  it('is the same text for the same configuration and claims the default target', () => {
    expect(binaryModule('add', 3).emit()).toBe(binaryModule('add', 3).emit());
    expect(binaryModule('add', 3).emit()).not.toBe(binaryModule('add', 2).emit());
    const gelu = MAP_DECLS.find((d) => d.spec.name === 'gelu')!;
    expect(mapModule(gelu).emit()).toBe(mapModule(gelu).emit());
    expect(mapModule(gelu).target).toBe(DEFAULT_TARGET);
  });

  it('passes each rank as parameters and uses IEEE division', () => {
    const text = binaryModule('div', 2).emit();
    for (const p of ['n', 'd0', 'd1', 'sa0', 'sa1', 'sb0', 'sb1'])
      expect(text).toContain(`binary_div_r2_param_${p}`);
    expect(text).not.toContain('binary_div_r2_param_d2');
    expect(text).toContain('div.rn.f32');
    expect(text).not.toMatch(/\.ftz/);
  });
});

const gate = ptxasTestGate();
const ARCHS = ['sm_90', DEFAULT_TARGET];

describe.skipIf(gate.skip)(`elementwise PTX assembles with ptxas (${gate.reason})`, () => {
  for (const op of BINARY_OPS) {
    it(`binary ${op} at every rank`, () => {
      for (let rank = 1; rank <= MAX_RANK; rank++) {
        for (const arch of ARCHS) {
          const result = assemblePtx(binaryModule(op, rank).emit(), arch);
          expect(result.log, `${op} rank ${rank} ${arch}`).toBe('');
          expect(result.ok).toBe(true);
        }
      }
    }, 120_000);
  }
  it('binary ops over half storage', () => {
    for (const op of BINARY_OPS) {
      for (const type of ['f16', 'bf16'] as const) {
        const result = assemblePtx(binaryModule(op, 2, type).emit(), DEFAULT_TARGET);
        expect(result.log, `${op} ${type}`).toBe('');
        expect(result.ok).toBe(true);
      }
    }
  }, 120_000);
  for (const decl of MAP_DECLS) {
    it(`map ${decl.spec.name}`, () => {
      for (const arch of ARCHS) {
        for (const type of ['f32', 'f16', 'bf16'] as const) {
          const result = assemblePtx(mapModule(decl, type).emit(), arch);
          expect(result.log, `${decl.spec.name} ${type} ${arch}`).toBe('');
          expect(result.ok).toBe(true);
        }
      }
    }, 60_000);
  }
});
