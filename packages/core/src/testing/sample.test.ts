import { describe, expect, it } from 'vitest';
import { KERNELS } from '../kernels/index.js';
import { conformanceSuite } from './conformance.js';
import { sampleConformance } from './sample.js';

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
        expect(matmul).toContain(`${dtypes} precision=f32 ${layout}`);
      }
    }
    expect(matmul).toContain('f32,f32 precision=f32 transA=false transB=false batch');
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

  it('picks the same checks on every run', () => {
    const again = sampleConformance(conformanceSuite({ create: () => Promise.reject() }).checks);
    expect(again.checks.map((c) => c.name)).toEqual(sample.checks.map((c) => c.name));
  });
});
