import { describe, expect, it } from 'vitest';
import { CpuBackend } from './cpu/backend.js';
import { f32ToF16Bits, toHostArray, toNumbers } from './dtype.js';
import { DTypeError, UnsupportedOnBackendError } from './errors.js';
import { runReference, type TensorMeta } from './kernel.js';
import { checkCall, F32_ONLY, floatDtypesOf, KernelTable } from './kernelCall.js';
import { inferKernel } from './kernelChecks.js';
import { adamwStep, cast, incrementalAttention, matmul, multiTensorAdamw, rmsNorm } from './kernels/index.js';
import { Rng } from './testing/random.js';

const rng = new Rng(3);
const randoms = (n: number) => Array.from({ length: n }, () => rng.uniform(-1, 1));

describe('half storage', () => {
  it('float inputs of one dtype group share one dtype; weights, caches and gradients form their own', () => {
    const a = { shape: [2, 3], dtype: 'f16' as const };
    const bBf16 = { shape: [3, 4], dtype: 'bf16' as const };
    // Weight-only half: the output takes the activation's dtype.
    expect(inferKernel(matmul, [{ ...a, dtype: 'f32' }, bBf16]).outputs[0]!.dtype).toBe('f32');
    expect(inferKernel(matmul, [a, bBf16]).outputs[0]!.dtype).toBe('f16');
    // matmul's c is a group of its own, whose dtype y takes: an f32 residual under half operands.
    const c = { shape: [2, 4], dtype: 'f32' as const };
    expect(inferKernel(matmul, [a, bBf16, c]).outputs[0]!.dtype).toBe('f32');
    const error = (() => {
      try {
        inferKernel(matmul, [a, bBf16, c], { out: 'f16' });
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(DTypeError);
    expect(error).toMatchObject({ kernel: 'matmul', argument: 'c', expected: 'f16', actual: 'f32' });
    const q = { shape: [4, 8], dtype: 'f32' as const };
    const cache = { shape: [2, 5, 8], dtype: 'f16' as const };
    expect(inferKernel(incrementalAttention, [q, cache, cache], { seqLen: 3 }).outputs[0]!.dtype).toBe('f32');
    expect(() =>
      inferKernel(incrementalAttention, [q, cache, { ...cache, dtype: 'bf16' }], { seqLen: 3 }),
    ).toThrow(DTypeError);
    const p = { shape: [5], dtype: 'f32' as const };
    const outputs = inferKernel(adamwStep, [p, { shape: [5], dtype: 'bf16' }, p, p], {
      lr: 0.1,
      step: 1,
    }).outputs;
    expect(outputs.map((o) => o.dtype)).toEqual(['f32', 'f32', 'f32']);
  });

  it('multiTensorAdamw takes half gradients of one dtype beside f32 params and moments', () => {
    const f32: TensorMeta = { shape: [3], dtype: 'f32' };
    const bf16: TensorMeta = { shape: [3], dtype: 'bf16' };
    const attrs = { lr: 0.1, step: 1 };
    const fours = (grad0: TensorMeta, grad1: TensorMeta, param0 = f32) => [
      undefined,
      undefined,
      undefined,
      undefined,
      ...[param0, grad0, f32, f32],
      ...[f32, grad1, f32, f32],
    ];
    const outputs = inferKernel(multiTensorAdamw, fours(bf16, bf16), attrs).outputs;
    expect(outputs.every((o) => o.dtype === 'f32')).toBe(true);
    expect(() => inferKernel(multiTensorAdamw, fours(bf16, f32), attrs)).toThrow(DTypeError);
    const backend = new CpuBackend();
    const tensors = fours(bf16, bf16, bf16).map((m) => m && backend.zeros(m.shape, m.dtype));
    expect(() => backend.run(multiTensorAdamw, tensors, attrs)).toThrow(
      expect.objectContaining({ argument: 'tensors[0]', actual: 'bf16' }),
    );
    for (const t of tensors) t?.dispose();
    backend.dispose();
  });

  it('runs f32 code on widened inputs and rounds each output to its dtype', () => {
    const x = randoms(3 * 7);
    const w = randoms(7).map((v) => v + 2);
    const f32Metas = [
      { shape: [3, 7], dtype: 'f32' as const },
      { shape: [7], dtype: 'f32' as const },
    ];
    const f32 = inferKernel(rmsNorm, f32Metas);
    const halfMetas = [
      { shape: [3, 7], dtype: 'f16' as const },
      { shape: [7], dtype: 'f16' as const },
    ];
    const half = inferKernel(rmsNorm, halfMetas);
    const xh = toHostArray('f16', x);
    const wh = toHostArray('f16', w);
    const [y] = runReference(rmsNorm, [xh, wh], half.attrs, { inputs: halfMetas, outputs: half.outputs });
    expect(y).toBeInstanceOf(Uint16Array);
    // The f32 result on the rounded inputs, rounded once more, is the half result bit for bit.
    const widened = [Float32Array.from(toNumbers('f16', xh)), Float32Array.from(toNumbers('f16', wh))];
    const [exact] = runReference(rmsNorm, widened, f32.attrs, {
      inputs: f32Metas,
      outputs: f32.outputs,
    });
    expect(Array.from(y!)).toEqual(Array.from(exact!, (v) => f32ToF16Bits(v)));
  });

  it('the cpu backend runs half calls and casts with IEEE rounding', async () => {
    const backend = new CpuBackend();
    using x = backend.upload([1, 65519, 65520, -1e6, 2 ** -25, 3 * 2 ** -25, Number.NaN], [7]);
    const [h] = backend.run(cast, [x], { to: 'f16' });
    expect(h!.dtype).toBe('f16');
    expect(Array.from(await h!.read())).toEqual([0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x0000, 0x0002, 0x7e00]);
    const [back] = backend.run(cast, [h!], { to: 'f32' });
    expect(Array.from(await back!.read())).toEqual([1, 65504, Infinity, -Infinity, 0, 2 ** -23, Number.NaN]);
    h!.dispose();
    back!.dispose();
    backend.dispose();
  });

  it('costs count the bytes of the actual dtypes', () => {
    const cost = (b: 'f32' | 'bf16') =>
      matmul.cost!(
        [
          { shape: [1, 64], dtype: 'f32' },
          { shape: [64, 32], dtype: b },
        ],
        { alpha: 1, beta: 1, transA: false, transB: false, precision: 'f32', out: 'auto' },
      ).bytes;
    expect(cost('f32') - cost('bf16')).toBe(64 * 32 * 2);
  });

  it('a backend refuses a dtype its kernel does not declare, naming kernel, argument, expected and actual', () => {
    const backend = new CpuBackend();
    using x = backend.upload(toHostArray('bf16', [1, 2, 3]), [3], 'bf16');
    const table = new KernelTable('test', 'TEST', [{ spec: cast }]);
    expect(table.supports('cast')).toBe(true);
    expect(table.supports('cast', 'f32')).toBe(true);
    expect(table.supports('cast', 'bf16')).toBe(false);
    const floats = floatDtypesOf(table.get(cast));
    let caught: unknown;
    try {
      checkCall(backend, cast, floats, [x], { to: 'f32' }, undefined);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(UnsupportedOnBackendError);
    expect(caught).toMatchObject({ operation: 'cast', argument: 'x', actual: 'bf16' });
    expect((caught as UnsupportedOnBackendError).expected).toContain(F32_ONLY.join(' | '));
    using y = backend.upload([1, 2, 3], [3]);
    expect(() => checkCall(backend, cast, floats, [y], { to: 'f16' }, undefined)).toThrow(
      expect.objectContaining({
        argument: 'out[0]',
        actual: 'f16',
        message: expect.stringMatching(/output 'y'/),
      }),
    );
    backend.dispose();
  });
});
