import { describe, expect, it } from 'vitest';
import { WG } from '../kernels/common.js';
import {
  cachedRowThreads,
  MAX_CACHED,
  planCachedRow,
  planVectorRow,
  rowGrid,
  rowPrologue,
  threadsPerRow,
} from './rowReduce.js';

const isPowerOfTwo = (x: number) => Number.isInteger(x) && x > 0 && (x & (x - 1)) === 0;
const EDGES = [1, 3, 4, 31, 32, 33, 100, 8192, WG * MAX_CACHED + 1, 1 << 20];

describe('threadsPerRow', () => {
  it('gives about perThread elements each, at least 8 threads from 32 elements, at most a workgroup', () => {
    expect(EDGES.map((n) => threadsPerRow(n, 8))).toEqual([1, 1, 1, 4, 8, 8, 16, 256, 256, 256]);
    expect(threadsPerRow(31, 1)).toBe(32);
    expect(threadsPerRow(64, 64)).toBe(8);
  });
});

describe('planCachedRow (softmax)', () => {
  it('short rows: at least 4 threads from 4 elements, 8 from 32', () => {
    expect([1, 3, 4, 5, 16, 17, 31].map(cachedRowThreads)).toEqual([1, 1, 4, 4, 4, 8, 8]);
    expect(planCachedRow(1)).toEqual({ threads: 1, cached: 1 });
    expect(planCachedRow(3)).toEqual({ threads: 1, cached: 4 });
    expect(planCachedRow(4)).toEqual({ threads: 4, cached: 1 });
    expect(planCachedRow(31)).toEqual({ threads: 8, cached: 4 });
    expect(planCachedRow(32)).toEqual({ threads: 8, cached: 4 });
  });

  it('caches rows of up to WG · MAX_CACHED in registers and streams longer ones over a workgroup', () => {
    expect(planCachedRow(300)).toEqual({ threads: 64, cached: 8 });
    expect(planCachedRow(WG * MAX_CACHED)).toEqual({ threads: WG, cached: MAX_CACHED });
    expect(planCachedRow(WG * MAX_CACHED + 1)).toEqual({ threads: WG, cached: 0 });
    expect(planCachedRow(1 << 20)).toEqual({ threads: WG, cached: 0 });
  });

  it('every row length: threads divide the workgroup and the cache holds the whole row', () => {
    for (let n = 1; n <= WG * MAX_CACHED + 64; n++) {
      const { threads, cached } = planCachedRow(n);
      expect(isPowerOfTwo(threads) && WG % threads === 0).toBe(true);
      if (n <= WG * MAX_CACHED) {
        expect(isPowerOfTwo(cached) && cached <= MAX_CACHED).toBe(true);
        expect(threads * cached).toBeGreaterThanOrEqual(n);
      } else {
        expect(cached).toBe(0);
      }
    }
  });
});

describe('planVectorRow (normalization, loss)', () => {
  it('vec4 loads when the length is a multiple of 4, one thread per load up to a workgroup', () => {
    expect(planVectorRow(1)).toEqual({ vec: 1, loads: 1, threads: 1 });
    expect(planVectorRow(3)).toEqual({ vec: 1, loads: 3, threads: 4 });
    expect(planVectorRow(4)).toEqual({ vec: 4, loads: 1, threads: 1 });
    expect(planVectorRow(31)).toEqual({ vec: 1, loads: 31, threads: 32 });
    expect(planVectorRow(32)).toEqual({ vec: 4, loads: 8, threads: 8 });
    expect(planVectorRow(8192)).toEqual({ vec: 4, loads: 2048, threads: WG });
    expect(planVectorRow(WG * MAX_CACHED + 1)).toEqual({ vec: 1, loads: 8193, threads: WG });
  });
});

describe('row geometry', () => {
  const limits = { maxComputeWorkgroupsPerDimension: 65535 } as GPUSupportedLimits;

  it('packs WG / threads rows into a workgroup', () => {
    expect(rowGrid({ limits }, 1000, 4)).toEqual([Math.ceil(1000 / (WG / 4)), 1]);
    expect(rowGrid({ limits }, 3, WG)).toEqual([3, 1]);
    expect(rowGrid({ limits }, 1, 1)).toEqual([1, 1]);
    // More workgroups than one dimension holds spread over y.
    expect(rowGrid({ limits }, 70000, WG)).toEqual([35000, 2]);
  });

  it('the prologue gives rows past the last an empty range, so they still reach the barriers', () => {
    const wgsl = rowPrologue(8, 'params.n');
    expect(wgsl).toContain(`* ${WG / 8}u + lid.x / 8u`);
    expect(wgsl).toContain('let end = select(0u, params.n, row < params.rows);');
  });
});
