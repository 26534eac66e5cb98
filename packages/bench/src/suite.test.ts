import { inferKernel } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import {
  caseCost,
  caseFilter,
  caseVia,
  inputMetas,
  sampleRows,
  selectCases,
  workingSetBytes,
} from './case.js';
import { ceilingCase, FAMILIES, SUITE } from './suite.js';

const ids = (mode: 'quick' | 'full') => selectCases(SUITE, { mode }).map((c) => c.id);

describe('the suite', () => {
  it('has unique ids, each prefixed by its family, and every family documented', () => {
    const all = SUITE.map((c) => c.id);
    expect(new Set(all).size).toBe(all.length);
    for (const c of SUITE) {
      expect(c.id.startsWith(`${c.family}/`), c.id).toBe(true);
      expect(FAMILIES[c.family], c.family).toBeDefined();
      expect(c.quick || c.full, c.id).toBe(true);
      expect(c.x, c.id).toBeGreaterThan(0);
    }
  });

  it('covers every family in both modes', () => {
    const families = (mode: 'quick' | 'full') => new Set(selectCases(SUITE, { mode }).map((c) => c.family));
    const expected = Object.keys(FAMILIES).filter((f) => f !== 'copy');
    expect([...families('quick')].sort()).toEqual([...expected].sort());
    expect([...families('full')].sort()).toEqual([...expected].sort());
  });

  it('has the shapes the benchmark promises in full mode', () => {
    const full = ids('full');
    for (const id of [
      'gemm/256x256x256',
      'gemm/8192x8192x8192',
      'gemm-llm/1x4096x4096',
      'gemm-llm/16x4096x11008',
      'gemm-llm/512x4096x4096',
      'gemm-tb/4096x4096x4096',
      'gemm-ta/4096x512x4096',
      'gemv/1x4096x11008',
      'gateup/1x2048x5632',
      'gateup/1x2048x5632-norm',
      'gateup/1x4096x11008',
      'gateup/1x4096x11008-norm',
      'normmatmul/1x2048x2048',
      'normmatmul/1x2048x32000',
      'normmatmul3/1x2048x2048+512+512',
      'normmatmul3/1x4096x4096+1024+1024',
      'qgemv/q8-1x4096x4096',
      'qgemv/q4g32-1x4096x4096',
      'qgemv/q4g128-1x4096x4096',
      'qgemv/q4g128z-1x4096x4096',
      'wcache/1x4096x4096',
      'wcache/4x4096x4096',
      'wcache/64x4096x4096',
      'attention/h32-d128-t128',
      'attention/h32-d128-t32768',
      'attention/h64-d64-t32768',
      'adamw/1e6',
      'adamw/1e8',
      'clip/1e8',
      'batch/1000x1024',
      'upload/4KiB',
      'upload/256MiB',
      'read/256MiB',
    ]) {
      expect(full).toContain(id);
    }
    expect(full).not.toContain('adamw/1e5');
  });

  it('keeps quick mode small enough for a CPU', () => {
    for (const c of selectCases(SUITE, { mode: 'quick' })) {
      const cost = caseCost(c)!;
      expect(cost.flops, c.id).toBeLessThan(1e8);
      expect(workingSetBytes(c), c.id).toBeLessThan(32 * 2 ** 20);
    }
  });

  it('declares valid calls whose cost is known', () => {
    for (const c of SUITE) {
      const { outputs } = inferKernel(c.spec, inputMetas(c), c.attrs);
      expect(outputs.length, c.id).toBeGreaterThan(0);
      const cost = caseCost(c);
      expect(cost, c.id).toBeDefined();
      expect(cost!.bytes, c.id).toBeGreaterThan(0);
      if (c.bound === 'flops') expect(cost!.flops, c.id).toBeGreaterThan(0);
    }
  });

  it('counts the codes, scales and zero points a quantized GEMV reads, and stores q4 scales in f16', () => {
    const q4 = SUITE.find((c) => c.id === 'qgemv/q4g32-1x4096x4096')!;
    expect(inputMetas(q4).map((m) => m?.dtype)).toEqual(['f32', 'u32', 'f16']);
    // 4096² nibbles, 4096 · 128 f16 scales, x and y in f32.
    expect(caseCost(q4)!.bytes).toBe(4096 * 4096 * 0.5 + 4096 * 128 * 2 + 2 * 4096 * 4);
    expect(q4.x).toBe(4096 * 4096 * 0.5 + 4096 * 128 * 2);
    const q8 = SUITE.find((c) => c.id === 'qgemv/q8-1x4096x4096')!;
    expect(caseCost(q8)!.bytes).toBe(4096 * 4096 + 4096 * 4 + 2 * 4096 * 4);
    // Q4_K repacked: nibbles, an f32 scale and an f32 offset per 32.
    const q4a = SUITE.find((c) => c.id === 'qgemv/q4g32a-1x4096x4096')!;
    expect(inputMetas(q4a).map((m) => m?.dtype)).toEqual(['f32', 'u32', 'f32', undefined, undefined, 'f32']);
    expect(q4a.x).toBe(4096 * 4096 * 0.5 + 4096 * 128 * 8);
    // Q4_K as stored: nibbles, an f16 d and dmin and twelve bytes of 6-bit scales per 256 (4.5 bits per weight).
    const q4k = SUITE.find((c) => c.id === 'qgemv/q4k-1x4096x4096')!;
    expect(inputMetas(q4k).map((m) => m?.dtype)).toEqual(['f32', 'u32', 'f16', 'u32', undefined, 'f16']);
    expect(q4k.x).toBe((4096 * 4096 * 4.5) / 8);
    // Q6_K as stored: 48 words, an f16 d and sixteen int8 scales per 256 (6.5625 bits per weight).
    const q6k = SUITE.find((c) => c.id === 'qgemv/q6k-1x4096x4096')!;
    expect(inputMetas(q6k).map((m) => m?.dtype)).toEqual(['f32', 'u32', 'f16', 'u32']);
    expect(q6k.x).toBe((4096 * 4096 * 6.5625) / 8);
    // Q5_K as stored: 40 words, an f16 d and dmin and twelve bytes of 6-bit scales per 256 (5.5 bits per weight).
    const q5k = SUITE.find((c) => c.id === 'qgemv/q5k-1x4096x4096')!;
    expect(inputMetas(q5k).map((m) => m?.dtype)).toEqual(['f32', 'u32', 'f16', 'u32', undefined, 'f16']);
    expect(q5k.x).toBe((4096 * 4096 * 5.5) / 8);
    // Q5_0 and Q5_1 as stored: nibbles and a high word per 32, f16 d (and −m): 5.5 and 6 bits per weight.
    const q5g32 = SUITE.find((c) => c.id === 'qgemv/q5g32-1x4096x4096')!;
    expect(inputMetas(q5g32).map((m) => m?.dtype)).toEqual(['f32', 'u32', 'f16']);
    expect(q5g32.x).toBe((4096 * 4096 * 5.5) / 8);
    const q5g32a = SUITE.find((c) => c.id === 'qgemv/q5g32a-1x4096x4096')!;
    expect(inputMetas(q5g32a).map((m) => m?.dtype)).toEqual([
      'f32',
      'u32',
      'f16',
      undefined,
      undefined,
      'f16',
    ]);
    expect(q5g32a.x).toBe((4096 * 4096 * 6) / 8);
  });

  it('counts about 2·M·N·K flops for a GEMM, transposed or not', () => {
    for (const id of ['gemm/256x256x256', 'gemm-tb/256x256x256', 'gemm-ta/256x256x256']) {
      const flops = caseCost(SUITE.find((c) => c.id === id)!)!.flops;
      expect(flops, id).toBe(2 * 256 ** 3);
    }
  });

  it('counts the bytes of a transfer once and the mean kernel of a batch', () => {
    const upload = SUITE.find((c) => c.id === 'upload/1MiB')!;
    expect(caseVia(upload)).toBe('upload');
    expect(caseCost(upload)).toEqual({ flops: 0, bytes: 2 ** 20 });
    const batch = SUITE.find((c) => c.id === 'batch/1000x1024')!;
    // add: 1024 flops, 3·4 KiB; scale: 2048 flops, 2·4 KiB
    expect(caseCost(batch)).toEqual({ flops: 1536, bytes: 2.5 * 4096 });
  });

  it('stores transposed operands transposed and weights as [N, K]', () => {
    const ta = SUITE.find((c) => c.id === 'gemm-ta/4096x512x4096')!;
    expect(ta.inputs.map((i) => i?.shape)).toEqual([
      [512, 4096],
      [512, 4096],
    ]);
    const wc = SUITE.find((c) => c.id === 'wcache/4x4096x4096')!;
    expect(caseVia(wc)).toBe('weightCache');
    expect(wc.attrs).toEqual({ transB: true });
  });

  it('checks only sampled rows or elements of the large cases', () => {
    const byId = (id: string) => SUITE.find((c) => c.id === id)!;
    expect(byId('gemm/256x256x256').subset).toBeUndefined();
    expect(byId('gemm/1024x1024x1024').subset).toBeDefined();
    expect(byId('gemm-ta/4096x4096x4096').subset).toBeDefined();
    expect(byId('adamw/1e6').subset).toBeUndefined();
    expect(byId('adamw/1e8').subset).toBeDefined();
  });

  it('marks which ceiling applies', () => {
    const byId = (id: string) => SUITE.find((c) => c.id === id)!;
    expect(byId('gemm/4096x4096x4096').bound).toBe('flops');
    expect(byId('gemm-llm/1x4096x4096').bound).toBe('bytes');
    expect(byId('attention/h32-d128-t4096').bound).toBe('bytes');
    expect(byId('batch/1000x1024').bound).toBe('latency');
    expect(byId('read/1MiB').bound).toBe('latency');
  });
});

describe('the ceiling case', () => {
  it('copies 16 MiB quick and 256 MiB full, within what one kernel can bind', () => {
    expect(ceilingCase('quick').id).toBe('copy/16MiB');
    expect(ceilingCase('full').id).toBe('copy/256MiB');
    expect(ceilingCase('full', 128 * 2 ** 20).id).toBe('copy/128MiB');
    expect(caseCost(ceilingCase('quick'))!.bytes).toBe(2 * 16 * 2 ** 20);
  });
});

describe('working sets', () => {
  it('count inputs and outputs, not in-place outputs twice', () => {
    const byId = (id: string) => SUITE.find((c) => c.id === id)!;
    expect(workingSetBytes(byId('gemm/256x256x256'))).toBe(3 * 256 * 256 * 4);
    expect(workingSetBytes(byId('adamw/1e5'))).toBe(4 * 1e5 * 4);
    expect(workingSetBytes(byId('upload/1MiB'))).toBe(2 ** 20);
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
