import { describe, expect, it } from 'vitest';
import { KERNELS } from '../kernels/index.js';
import { conformanceSuite } from './conformance.js';
import { SMALL_CASE_ELEMENTS, sampleConformance } from './sample.js';

describe('sampleConformance', () => {
  const { checks } = conformanceSuite({
    create: () => {
      throw new Error('sampling creates no backend');
    },
  });
  const sample = sampleConformance(checks);
  const pair = (c: (typeof checks)[number]) => `${c.kernelCase!.kernel} | ${c.kernelCase!.variant}`;

  it('keeps one valid case of every kernel × variant and every other check, in the suite’s order', () => {
    const cases = checks.filter((c) => c.kernelCase);
    const kept = sample.checks.filter((c) => c.kernelCase);
    expect(new Set(kept.map(pair))).toEqual(new Set(cases.map(pair)));
    expect(kept).toHaveLength(new Set(cases.map(pair)).size);
    expect(sample.checks.filter((c) => !c.kernelCase)).toEqual(checks.filter((c) => !c.kernelCase));
    expect(sample.checks).toEqual(checks.filter((c) => sample.checks.includes(c)));
    expect(sample.kernels).toBe(KERNELS.length);
    expect(sample.variants).toBe(kept.length);
    expect(sample.total).toBe(checks.length);
    expect(sample.checks.length).toBeLessThan(checks.length / 2);
  });

  it('tells the half variants and the layouts apart, and an explicit default from its absence not', () => {
    const variants = (name: string) =>
      new Set(checks.filter((c) => c.kernelCase?.kernel === name).map((c) => c.kernelCase!.variant));
    const matmul = variants('matmul');
    for (const dtypes of ['f32,f32', 'f16,f16', 'bf16,bf16', 'f32,bf16']) {
      for (const layout of ['transA=false transB=false', 'transA=true transB=true']) {
        expect(matmul).toContain(`${dtypes} out=auto precision=f32 ${layout}`);
      }
    }
    expect(matmul).toContain('f32,f32 out=auto precision=f32 transA=false transB=false batch');
    expect([...matmul].some((v) => v.includes('transB=undefined'))).toBe(false);
  });

  it("by 'dtypes': one valid case of every kernel × dtypes, far fewer than by variant", () => {
    const coarse = sampleConformance(checks, 'dtypes');
    const dtypes = (c: (typeof checks)[number]) =>
      `${c.kernelCase!.kernel} | ${c.kernelCase!.variant.split(' ')[0]}`;
    const cases = checks.filter((c) => c.kernelCase);
    const kept = coarse.checks.filter((c) => c.kernelCase);
    expect(new Set(kept.map(dtypes))).toEqual(new Set(cases.map(dtypes)));
    expect(kept).toHaveLength(coarse.variants);
    expect(coarse.kernels).toBe(KERNELS.length);
    expect(coarse.variants).toBeLessThan(sample.variants / 2);
    expect(coarse.checks.filter((c) => !c.kernelCase)).toEqual(checks.filter((c) => !c.kernelCase));
  });

  it("by 'kernel': one valid case of every kernel, in dtypes spread over the kernels", () => {
    const coarse = sampleConformance(checks, 'kernel');
    const kept = coarse.checks.filter((c) => c.kernelCase);
    expect(kept.map((c) => c.kernelCase!.kernel).sort()).toEqual(KERNELS.map((s) => s.name).sort());
    expect(coarse.kernels).toBe(KERNELS.length);
    expect(coarse.variants).toBe(KERNELS.length);
    const dtypes = new Set(kept.map((c) => c.kernelCase!.variant.split(' ')[0]!.split(',')[0]));
    for (const dtype of ['f32', 'f16', 'bf16']) expect(dtypes).toContain(dtype);
    expect(coarse.checks.filter((c) => !c.kernelCase)).toEqual(checks.filter((c) => !c.kernelCase));
  });

  it("preferring 'small': of every kernel × variant the smallest case of enough elements", () => {
    // A case's elements are those of its inputs and outputs: a [7, 257], b [3, 257], the product [7, 3].
    const product = checks.find((c) => c.name === 'matmul 7×257×3 transB');
    expect(product?.kernelCase?.elements).toBe(7 * 257 + 3 * 257 + 7 * 3);
    const small = sampleConformance(checks, 'variant', 'small');
    const cases = new Map<string, number[]>();
    for (const c of checks.filter((c) => c.kernelCase))
      cases.set(pair(c), [...(cases.get(pair(c)) ?? []), c.kernelCase!.elements]);
    const kept = small.checks.filter((c) => c.kernelCase);
    expect(kept).toHaveLength(cases.size);
    for (const c of kept) {
      const sizes = cases.get(pair(c))!;
      const enough = sizes.filter((n) => n >= SMALL_CASE_ELEMENTS);
      const want = enough.length > 0 ? Math.min(...enough) : Math.max(...sizes);
      expect(c.kernelCase!.elements, c.name).toBe(want);
    }
    expect(small.variants).toBe(sample.variants);
    const elements = (list: typeof checks) => list.reduce((n, c) => n + (c.kernelCase?.elements ?? 0), 0);
    expect(elements(small.checks)).toBeLessThan(elements(sample.checks));
    expect(small.checks.filter((c) => !c.kernelCase)).toEqual(checks.filter((c) => !c.kernelCase));
  });

  it('picks the same checks on every run', () => {
    const again = sampleConformance(conformanceSuite({ create: () => Promise.reject() }).checks);
    expect(again.checks.map((c) => c.name)).toEqual(sample.checks.map((c) => c.name));
  });
});
