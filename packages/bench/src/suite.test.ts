import { inferKernel } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { caseCost, caseFilter, inputMetas, SUITE, sampleRows, selectCases } from './suite.js';

describe('the suite', () => {
  it('has unique ids', () => {
    const ids = SUITE.map((c) => c.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('runs small sizes in quick mode and adds the large ones in full mode', () => {
    expect(selectCases(SUITE, { mode: 'quick' }).map((c) => c.id)).toEqual([
      'gemm/128x128x128',
      'gemm/256x256x256',
      'gemm/512x512x512',
      'gemv/1x1024x1024',
      'softmax/64x4096',
      'rmsnorm/64x4096',
      'attention/h8-d128-t1024',
      'adamw/1e5',
    ]);
    const full = selectCases(SUITE, { mode: 'full' }).map((c) => c.id);
    for (const id of [
      'gemm/128x128x128',
      'gemm/1024x1024x1024',
      'gemm/2048x2048x2048',
      'gemm/4096x4096x4096',
      'gemv/1x4096x4096',
      'softmax/64x4096',
      'rmsnorm/64x4096',
      'attention/h32-d128-t4096',
      'adamw/1e6',
    ]) {
      expect(full).toContain(id);
    }
    expect(full).not.toContain('adamw/1e5');
  });

  it('declares valid calls whose cost is known', () => {
    for (const c of SUITE) {
      const { outputs } = inferKernel(c.spec, inputMetas(c), c.attrs);
      expect(outputs.length, c.id).toBeGreaterThan(0);
      const cost = caseCost(c);
      expect(cost, c.id).toBeDefined();
      expect(cost!.flops, c.id).toBeGreaterThan(0);
      expect(cost!.bytes, c.id).toBeGreaterThan(0);
    }
  });

  it('counts about 2·M·N·K flops for a GEMM', () => {
    const gemm = SUITE.find((c) => c.id === 'gemm/256x256x256')!;
    const flops = caseCost(gemm)!.flops;
    expect(flops).toBeGreaterThanOrEqual(2 * 256 ** 3);
    expect(flops).toBeLessThan(2 * 256 ** 3 * 1.01);
  });

  it('checks only sampled rows of the large GEMMs', () => {
    expect(SUITE.find((c) => c.id === 'gemm/512x512x512')!.subset).toBeUndefined();
    expect(SUITE.find((c) => c.id === 'gemm/1024x1024x1024')!.subset).toBeDefined();
  });
});

describe('--filter', () => {
  it('matches substrings and regular expressions', () => {
    expect(caseFilter(undefined)('anything')).toBe(true);
    expect(caseFilter('gemm')('gemm/128x128x128')).toBe(true);
    expect(caseFilter('gemm')('gemv/1x1024x1024')).toBe(false);
    expect(caseFilter('^ge(mm|mv)/')('gemv/1x1024x1024')).toBe(true);
    expect(caseFilter('x512$')('gemm/512x512x512')).toBe(true);
    expect(caseFilter('x512$')('gemm/512x512x1024')).toBe(false);
    // not a valid expression: a plain substring
    expect(caseFilter('h8-d128-t1024(')('attention/h8-d128-t1024(')).toBe(true);
    expect(caseFilter('(')('gemm/128x128x128')).toBe(false);
  });

  it('selects by mode and filter', () => {
    expect(selectCases(SUITE, { mode: 'quick', filter: 'softmax' }).map((c) => c.id)).toEqual([
      'softmax/64x4096',
    ]);
    expect(selectCases(SUITE, { mode: 'quick', filter: 'nothing-like-this' })).toEqual([]);
  });
});

describe('sampleRows', () => {
  it('spreads rows evenly, first and last included', () => {
    expect(sampleRows(5, 10)).toEqual([0, 1, 2, 3, 4]);
    expect(sampleRows(100, 3)).toEqual([0, 50, 99]);
    const rows = sampleRows(4096, 24);
    expect(rows).toHaveLength(24);
    expect(rows[0]).toBe(0);
    expect(rows.at(-1)).toBe(4095);
  });
});
