import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { INT8_CHECK_CASES, int8Check, int8CheckLine } from './int8Check.js';

describe('int8-check', () => {
  it('passes the int8 GEMV and fails the exact one, whose x is not rounded to int8 blocks', async () => {
    const small = { format: 'q4k', m: 1, k: 512, n: 20, pair: false } as const;
    const int8 = createEmulatedGpu({ multiprocessors: 1, tuning: { qgemvActivations: 'int8' } });
    const exact = createEmulatedGpu({ multiprocessors: 1 });
    try {
      const good = await int8Check(int8.gpu, small);
      expect(good.ok).toBe(true);
      expect(good.worst).toBeLessThanOrEqual(1);
      expect(int8CheckLine(good)).toMatch(/^q4k 1×512→20 +PASS/);
      const pair = await int8Check(int8.gpu, { ...small, format: 'q8g32', pair: true });
      expect(pair.ok).toBe(true);
      // A folded norm: x · normWeight quantized, the sums scaled by the inverse RMS.
      const normed = await int8Check(int8.gpu, { ...small, norm: true });
      expect(normed.ok).toBe(true);
      expect(int8CheckLine(normed)).toMatch(/^q4k 1×512→20 normed +PASS/);
      const bad = await int8Check(exact.gpu, small);
      expect(bad.ok).toBe(false);
      expect(int8CheckLine(bad)).toContain('FAIL');
    } finally {
      int8.dispose();
      exact.dispose();
    }
  });

  it('covers every format narrow and wide, and the pairs', () => {
    const formats = new Set(INT8_CHECK_CASES.map((c) => c.format));
    expect([...formats].sort()).toEqual(
      ['q4g128', 'q4g32', 'q4g32a', 'q4k', 'q5g32', 'q5g32a', 'q5k', 'q6k', 'q8', 'q8g32', 'q8g32a'].sort(),
    );
    expect(INT8_CHECK_CASES.some((c) => c.pair && c.n >= 8448)).toBe(true);
    expect(INT8_CHECK_CASES.some((c) => !c.pair && c.n >= 16896)).toBe(true);
    expect(INT8_CHECK_CASES.some((c) => c.norm && c.pair)).toBe(true);
    expect(INT8_CHECK_CASES.some((c) => c.norm && !c.pair && c.n >= 16896)).toBe(true);
  });
});
