import { describe, expect, it } from 'vitest';
import {
  DEFAULT_QGEMV_VARIANT,
  isQgemvFormat,
  QGEMV_FORMATS,
  QGEMV_SHAPES,
  QGEMV_VARIANTS,
  qgemvPairVariant,
  qgemvSlicesFor,
} from './gemvVariants.js';
import { QUANT_FORMATS } from './layout.js';

describe('quantized GEMV variants', () => {
  it('give every variant but a a shape, and read formats core knows', () => {
    expect(Object.keys(QGEMV_SHAPES).sort()).toEqual(QGEMV_VARIANTS.filter((v) => v !== 'a'));
    for (const { cols, words } of Object.values(QGEMV_SHAPES)) {
      expect(Number.isInteger(cols) && cols > 0).toBe(true);
      expect([1, 2, 4]).toContain(words);
    }
    for (const format of QGEMV_FORMATS) expect(QUANT_FORMATS).toContain(format);
    expect(isQgemvFormat('q4g128')).toBe(true);
    expect(isQgemvFormat('q4g32a')).toBe(false);
  });

  it('give the gate·up pair the chosen shape, or the default for none and for a', () => {
    expect(qgemvPairVariant(undefined)).toBe(DEFAULT_QGEMV_VARIANT);
    expect(qgemvPairVariant('a')).toBe(DEFAULT_QGEMV_VARIANT);
    expect(qgemvPairVariant('d')).toBe('d');
  });

  it('split K across the groups of a block only where N gives too few groups', () => {
    const b = QGEMV_SHAPES.b;
    // H100: 132 SMs. q4 (8 weights per word).
    expect(qgemvSlicesFor(4096, 4096, b, 8, 132)).toBe(2);
    expect(qgemvSlicesFor(5632, 2048, b, 8, 132)).toBe(2);
    expect(qgemvSlicesFor(2048, 5632, b, 8, 132)).toBe(4);
    expect(qgemvSlicesFor(512, 2048, b, 8, 132)).toBe(8);
    expect(qgemvSlicesFor(32000, 2048, b, 8, 132)).toBe(1);
    // A short row is never split into groups without a step.
    expect(qgemvSlicesFor(8, 64, b, 8, 132)).toBe(1);
    // Two words a lane halve the steps: 4096 / (8 · 2 · 32) = 8 steps.
    expect(qgemvSlicesFor(64, 4096, QGEMV_SHAPES.c, 8, 132)).toBe(8);
    expect(qgemvSlicesFor(64, 1024, QGEMV_SHAPES.c, 8, 132)).toBe(2);
  });
});
