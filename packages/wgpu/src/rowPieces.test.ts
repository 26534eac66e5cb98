import { type DType, UnsupportedOnBackendError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import type { Operand } from './kernel.js';
import { productPieces, rowPieces, rowsOf } from './rowPieces.js';
import type { GPUBuffer, GPUSupportedLimits } from './webgpuTypes.js';

const buffer = {} as GPUBuffer;
const operand = (shape: number[], dtype: DType, offset = 0): Operand => ({
  buffer,
  offset,
  size: shape.reduce((a, b) => a * b, 1),
  shape,
  dtype,
});
const limits = (maxBindingBytes: number) => ({
  maxBindingBytes,
  limits: { minStorageBufferOffsetAlignment: 256 } as GPUSupportedLimits,
});

describe('rowPieces', () => {
  it('keeps operands that fit one binding whole', () => {
    expect(rowPieces(limits(4096), 'k', 10, { packed: operand([10, 100], 'u32') })).toEqual([
      { start: 0, count: 10 },
    ]);
  });

  it('starts every piece at an aligned offset in every part: rows a multiple of their least common multiple', () => {
    // A Q4_0 row of K = 2048: 1,024 bytes of codes (1 row per 256 bytes), 64 f16 scales of 128 bytes
    // (2 rows), zero points of 32 bytes (8 rows): pieces of multiples of 8 rows.
    const n = 1003;
    const parts = {
      packed: operand([n, 256], 'u32'),
      scales: operand([n, 64], 'f16'),
      zeros: operand([n, 8], 'u32'),
    };
    const pieces = rowPieces(limits(100_000), 'k', n, parts);
    // 97 rows of 1,024 bytes fit; 96 is the multiple of 8 below.
    expect(pieces.map((p) => p.count)).toEqual([...Array(10).fill(96), 43]);
    for (const p of pieces) {
      for (const o of Object.values(parts)) {
        expect(rowsOf(o, n, p).offset % 256).toBe(0);
      }
      expect(p.count * 1024).toBeLessThanOrEqual(100_000);
    }
    expect(pieces.reduce((a, p) => a + p.count, 0)).toBe(n);
    expect(rowsOf(parts.scales, n, pieces[1]!)).toMatchObject({
      offset: 96 * 128,
      size: 96 * 64,
      shape: [96, 64],
    });
  });

  it('refuses a row larger than one binding, naming the kernel, the argument and both sizes', () => {
    const run = () => rowPieces(limits(4096), 'quantizedMatmul', 3, { packed: operand([3, 1100], 'u32') });
    expect(run).toThrow(UnsupportedOnBackendError);
    expect(run).toThrow(/quantizedMatmul.*'packed'.*rows of at most 4096 bytes.*4400 bytes per row/);
  });

  it('refuses where the fewest rows that start aligned in every part exceed one binding', () => {
    // Rows of 396 bytes start aligned every 64 rows: 25,344 bytes.
    const run = () => rowPieces(limits(16_384), 'embedding', 100, { y: operand([100, 99], 'f32') });
    expect(run).toThrow(/embedding.*'y'.*64 rows of 396 bytes \(25344 bytes\)/);
  });

  it('gives a product pieces of y rows times pieces of the weight, every weight in step', () => {
    const [m, k, n] = [6, 64, 320];
    const x = operand([m, k], 'f32');
    const y = operand([m, n], 'f32');
    const weight = (offset: number) => ({
      packed: operand([n, k / 4], 'u32', offset),
      scales: operand([n, 1], 'f32'),
    });
    const pieces = productPieces(limits(4096), 'k', { x, c: undefined, y, weights: [weight(0)] });
    // W: 64-byte rows, f32 scales (64 rows per aligned step): 64 rows a piece, 5 of them. y: 1,280-byte
    // rows, 3 a piece: 2 pieces of rows, each with every piece of W.
    expect(pieces.map((p) => [p.x.shape[0], p.columns.start, p.columns.count])).toEqual(
      [0, 1].flatMap(() => [0, 64, 128, 192, 256].map((start) => [3, start, 64])),
    );
    expect(pieces[5]!.y.offset).toBe(3 * 1280);
    for (const p of pieces) {
      expect(p.ldy).toBe(n);
      expect(p.weights[0]!.packed.offset).toBe(p.columns.start * 64);
      expect(p.weights[0]!.scales.offset).toBe(p.columns.start * 4);
    }
  });
});
