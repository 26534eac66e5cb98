import {
  type Backend,
  createCpuBackend,
  InvalidArgumentError,
  QGEMV_FORMATS,
  QGEMV_SHAPES,
  QGEMV_VARIANTS,
  type QgemvFormat,
  type QgemvSlices,
  type QgemvVariant,
  quantizedGateUpSwiglu,
  quantizedMatmul,
  quantizeWeights,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { wgpuOptionsFromEnvironment } from '../environment.js';
import { backendProvider, createWgpuBackend } from '../index.js';
import { DEFAULT_WGPU_TUNING, resolveWgpuTuning } from '../tuning.js';
import { QUANTIZED_GATE_UP_KERNELS } from './quantizedGateUp.js';
import { qgemvShader, unrollOf } from './quantizedGemv.js';

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

const unavailable = await backendProvider.probe();

// Each variant and a forced split through the backend's options, on shapes the shaders treat
// specially (N not a multiple of a workgroup's columns, K not a multiple of a step), against the
// reference: the shader a product takes is the option's, and its result the reference's.
describe.skipIf(unavailable !== undefined)('quantized GEMV variants on the device', () => {
  const cpu = createCpuBackend();
  afterAll(() => cpu.dispose());
  const rng = new Rng(0x9e3);
  const random = (n: number, scale = 1) => Array.from({ length: n }, () => rng.uniform(-scale, scale));
  // One shape: llvmpipe compiles each shader for seconds, and the cuda interpreter runs the
  // variants on many more.
  const shapes: readonly (readonly [QgemvFormat, boolean, number, number, number])[] = [
    ['q4g32', true, 2, 200, 13],
  ];
  const cases: readonly (readonly [QgemvVariant | undefined, QgemvSlices | undefined])[] = [
    [undefined, undefined],
    ...QGEMV_VARIANTS.map((v) => [v, undefined] as const),
    ['b', 8],
  ];
  for (const [variant, slices] of cases) {
    it(`${variant ?? 'default'}${slices ? ` slices ${slices}` : ''}`, async () => {
      const tuning = {
        ...(variant ? { qgemvVariant: variant } : {}),
        ...(slices ? { qgemvSlices: slices } : {}),
      };
      const gpu = await createWgpuBackend(tuning);
      const keys: string[] = [];
      const get = gpu.pipelines.get.bind(gpu.pipelines);
      gpu.pipelines.get = (source) => {
        keys.push(source.key);
        return get(source);
      };
      try {
        for (const [format, zeroPoints, m, k, n] of shapes) {
          const gate = quantizeWeights(Float32Array.from(random(n * k, 0.05)), [n, k], format, {
            zeroPoints,
          });
          const up = quantizeWeights(Float32Array.from(random(n * k, 0.05)), [n, k], format, { zeroPoints });
          const x = random(m * k);
          const c = random(m * n);
          const run = (b: Backend) => {
            const [g, u] = [uploadQuantized(b, gate), uploadQuantized(b, up)];
            const xt = b.upload(x, [m, k]);
            const [y] = b.run(quantizedMatmul, [xt, g.packed, g.scales, g.zeros, b.upload(c, [m, n])], {
              format,
              beta: 0.5,
            }) as Tensor[];
            const [pair] = b.run(
              quantizedGateUpSwiglu,
              [xt, g.packed, g.scales, u.packed, u.scales, g.zeros, u.zeros],
              { format },
            ) as Tensor[];
            return [y!, pair!];
          };
          keys.length = 0;
          const got = run(gpu);
          const want = run(cpu);
          for (const [i, t] of got.entries()) {
            const mismatch = compareOutputs('f32', await t.read(), await want[i]!.read(), {
              rtol: 1e-4,
              atol: 2e-5 * Math.sqrt(k),
            });
            expect(mismatch, `${format} output ${i}`).toBeUndefined();
          }
          // One product, then the pair: the single weight's shader is the option's (absent: the
          // workgroup-per-8-columns shader), the pair's the option's shape or the default's.
          const rows = m === 1 ? 1 : 4;
          const shape = (v: 'b' | 'c' | 'd') =>
            `quantized/gemv/m${rows}/c${QGEMV_SHAPES[v].cols}w${QGEMV_SHAPES[v].words}/`;
          const single = variant === undefined || variant === 'a' ? 'quantized/stream/' : shape(variant);
          const pairShape = shape(variant === undefined || variant === 'a' ? 'c' : variant);
          const gemvKeys = keys.filter((key) => key.startsWith('quantized/'));
          expect(gemvKeys).toHaveLength(2);
          expect(gemvKeys[0]).toContain(single);
          expect(gemvKeys[1]).toContain(pairShape);
        }
      } finally {
        gpu.dispose();
      }
    }, 600_000);
  }
});
