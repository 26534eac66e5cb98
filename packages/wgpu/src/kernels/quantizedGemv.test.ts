import { afterEach, describe, expect, it } from 'vitest';
import {
  DEFAULT_QGEMV_VARIANT,
  parseQgemvSlices,
  parseQgemvVariant,
  QGEMV_FORMATS,
  QGEMV_SHAPES,
  QUANTIZED_GATE_UP_KERNELS,
  qgemvShader,
  qgemvVariant,
  resetQgemvVariant,
  slicesFor,
  unrollOf,
} from './quantizedGemv.js';

const ENV = 'RAYO_QGEMV_VARIANT';
const saved = process.env[ENV];
afterEach(() => {
  if (saved === undefined) delete process.env[ENV];
  else process.env[ENV] = saved;
  resetQgemvVariant();
});

describe('quantized GEMV shaders', () => {
  it('read RAYO_QGEMV_VARIANT once and refuse a name they do not know', () => {
    expect(parseQgemvVariant(undefined)).toBe(DEFAULT_QGEMV_VARIANT);
    expect(parseQgemvVariant('a')).toBe('a');
    expect(() => parseQgemvVariant('q')).toThrow(/RAYO_QGEMV_VARIANT/);
    expect(parseQgemvSlices('')).toBeUndefined();
    expect(parseQgemvSlices('8')).toBe(8);
    expect(() => parseQgemvSlices('16')).toThrow(/RAYO_QGEMV_SLICES/);
    process.env[ENV] = 'c';
    resetQgemvVariant();
    expect(qgemvVariant()).toBe('c');
    process.env[ENV] = 'b';
    expect(qgemvVariant()).toBe('c');
  });

  it('implement quantizedGateUpSwiglu for every float storage', () => {
    expect(QUANTIZED_GATE_UP_KERNELS.map((k) => k.spec.name)).toEqual(['quantizedGateUpSwiglu']);
    expect(QUANTIZED_GATE_UP_KERNELS[0]!.dtypes).toEqual(['f32', 'f16', 'bf16']);
  });

  it('load codes and x from storage without a workgroup stage in the loop, and bind what the format needs', () => {
    for (const format of QGEMV_FORMATS) {
      for (const [name, shape] of Object.entries(QGEMV_SHAPES)) {
        const v = { format, rows: 1, vecX: true, pair: false, ...shape };
        const code = qgemvShader(v).code();
        const word = shape.words === 1 ? 'u32' : `vec${shape.words}<u32>`;
        expect(code, name).toContain(`var<storage, read> packed: array<${word}>`);
        expect(code).toContain('var<storage, read> x: array<vec4<f32>>');
        expect(code.includes('zeros')).toBe(format !== 'q8');
        // One load of each column's words per step, all steps' loads before their sums.
        const loads = code.match(/= packed\[/g)!.length;
        expect(loads).toBe(shape.cols * unrollOf(v));
        const loop = code.slice(code.indexOf('for (var first'), code.indexOf('kk += '));
        expect(loop).not.toContain('workgroupBarrier');
        expect(loop.lastIndexOf('= packed[')).toBeLessThan(loop.indexOf('part0 +='));
        const pair = qgemvShader({ ...v, pair: true }).code();
        expect(pair).toContain('packed2');
        expect(pair).toContain('silu_f(sum0) * sum1');
        expect(pair).not.toContain('var<storage, read> c:');
      }
    }
  });

  it('compile one shader per format, row count, x layout, pair and shape', () => {
    const keys = QGEMV_FORMATS.flatMap((format) =>
      [1, 4].flatMap((rows) =>
        [true, false].flatMap((vecX) =>
          [true, false].flatMap((pair) =>
            Object.values(QGEMV_SHAPES).map((s) => qgemvShader({ format, rows, vecX, pair, ...s }).key),
          ),
        ),
      ),
    );
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys).toContain('quantized/gemv/m1/c4w1/v4/q4g32');
    expect(() => qgemvShader({ format: 'q8', rows: 5, vecX: true, pair: false, cols: 4, words: 1 })).toThrow(
      /rows/,
    );
  });

  it('split K across the groups of a workgroup where N alone gives too few', () => {
    expect(slicesFor(4096, 4096, 4, 1, 8)).toBe(2);
    expect(slicesFor(512, 2048, 4, 1, 8)).toBe(8);
    expect(slicesFor(32000, 2048, 4, 1, 8)).toBe(1);
    expect(slicesFor(8, 64, 4, 1, 8)).toBe(1);
  });
});
