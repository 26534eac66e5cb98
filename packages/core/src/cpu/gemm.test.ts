import { describe, expect, it } from 'vitest';
import { inferKernel } from '../kernelChecks.js';
import { matmul } from '../kernels/matmul.js';
import { compareOutputs } from '../testing/compare.js';
import { Rng } from '../testing/random.js';
import { gemm } from './gemm.js';

function random(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
}

describe('cache-blocked gemm', () => {
  // Shapes that straddle the row, depth and column blocks.
  const shapes = [
    [1, 1, 1],
    [33, 1025, 129],
    [65, 7, 257],
    [3, 1100, 5],
  ] as const;
  for (const [m, n, k] of shapes) {
    for (const [transA, transB] of [
      [false, false],
      [true, false],
      [false, true],
      [true, true],
    ] as const) {
      it(`matches the reference at ${m}×${n}×${k} transA=${transA} transB=${transB}`, () => {
        const rng = new Rng(m * 31 + n * 7 + k);
        const a = random(rng, m * k);
        const b = random(rng, k * n);
        const c = random(rng, m * n);
        const attrs = { alpha: 0.75, beta: -1.5, transA, transB };
        const aShape = transA ? [k, m] : [m, k];
        const bShape = transB ? [n, k] : [k, n];
        const io = inferKernel(
          matmul,
          [
            { shape: aShape, dtype: 'f32' },
            { shape: bShape, dtype: 'f32' },
            { shape: [m, n], dtype: 'f32' },
          ],
          attrs,
        );
        const expected = matmul.reference([a, b, c], io.attrs, { inputs: [], outputs: io.outputs })[0]!;
        const actual = gemm({ m, n, k, a, b, c, ...attrs });
        expect(compareOutputs('f32', actual, expected, { rtol: 1e-6, atol: 1e-6 })).toBeUndefined();
      });
    }
  }

  it('propagates NaN from either operand', () => {
    const a = new Float32Array([0, 1]);
    const b = new Float32Array([Number.NaN, 1]);
    const y = gemm({ m: 1, n: 1, k: 2, a, b, alpha: 1, beta: 0, transA: false, transB: false });
    expect(Number.isNaN(y[0])).toBe(true);
  });
});
