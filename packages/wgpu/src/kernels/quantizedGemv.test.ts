import { InvalidArgumentError, QGEMV_FORMATS, QGEMV_SHAPES } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { wgpuOptionsFromEnvironment } from '../environment.js';
import { DEFAULT_WGPU_TUNING, resolveWgpuTuning } from '../tuning.js';
import { QUANTIZED_GATE_UP_KERNELS, qgemvShader, unrollOf } from './quantizedGemv.js';

describe('quantized GEMV shaders', () => {
  it('take their variant and split from the backend options, which the environment can name', () => {
    expect(resolveWgpuTuning({})).toEqual(DEFAULT_WGPU_TUNING);
    expect(resolveWgpuTuning({ qgemvVariant: 'a', qgemvSlices: 8 })).toMatchObject({
      qgemvVariant: 'a',
      qgemvSlices: 8,
    });
    const variant = { qgemvVariant: 'q' } as unknown as { qgemvVariant: 'a' };
    expect(() => resolveWgpuTuning(variant)).toThrow(InvalidArgumentError);
    expect(() => resolveWgpuTuning(variant)).toThrow(/WgpuBackend\.create: argument 'qgemvVariant'/);
    const slices = { qgemvSlices: 16 } as unknown as { qgemvSlices: 1 };
    expect(() => resolveWgpuTuning(slices)).toThrow(/'qgemvSlices'.*got 16/);
    expect(wgpuOptionsFromEnvironment({ RAYO_QGEMV_VARIANT: 'c', RAYO_QGEMV_SLICES: '' })).toEqual({
      qgemvVariant: 'c',
    });
    expect(() => wgpuOptionsFromEnvironment({ RAYO_QGEMV_SLICES: '16' })).toThrow(/RAYO_QGEMV_SLICES/);
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
});
