import { expectInferErrors, expectThrows, meta, random, runFirst as run, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { bf16BitsToF32, type DType, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../dtype.js';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { batchedMatmul, type MatmulPrecision, matmul } from './matmul.js';

/** Row-major [rows, cols] → [cols, rows]. */
function transposed(x: Float32Array, rows: number, cols: number): Float32Array {
  const y = new Float32Array(x.length);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j]!;
  return y;
}

const A = Float32Array.from([1, 2, 3, 4, 5, 6]); // [2, 3]
const B = Float32Array.from([7, 8, 9, 10, 11, 12]); // [3, 2]

describe('matmul reference', () => {
  it('multiplies a hand-computed 2×3 by 3×2', () => {
    const y = run(matmul, [
      { shape: [2, 3], data: A },
      { shape: [3, 2], data: B },
    ]);
    expect([...y]).toEqual([58, 64, 139, 154]);
  });

  it('scales by alpha and adds beta · c', () => {
    const c = Float32Array.from([1, 2, 3, 4]);
    const y = run(
      matmul,
      [
        { shape: [2, 3], data: A },
        { shape: [3, 2], data: B },
        { shape: [2, 2], data: c },
      ],
      { alpha: 2, beta: -1 },
    );
    expect([...y]).toEqual([115, 126, 275, 304]);
  });

  it('adds c with beta = 1 by default and ignores beta without c', () => {
    const c = Float32Array.from([1, 2, 3, 4]);
    const withC = run(matmul, [
      { shape: [2, 3], data: A },
      { shape: [3, 2], data: B },
      { shape: [2, 2], data: c },
    ]);
    expect([...withC]).toEqual([59, 66, 142, 158]);
    const noC = run(
      matmul,
      [
        { shape: [2, 3], data: A },
        { shape: [3, 2], data: B },
      ],
      { beta: 5 },
    );
    expect([...noC]).toEqual([58, 64, 139, 154]);
  });

  it('computes a GEMV (M = 1) as dot products with the columns of b', () => {
    const x = Float32Array.from([1, -2, 3]);
    const y = run(matmul, [
      { shape: [1, 3], data: x },
      { shape: [3, 2], data: B },
    ]);
    expect([...y]).toEqual([7 - 18 + 33, 8 - 20 + 36]);
  });

  it('matches explicitly transposed inputs for every transpose combination', () => {
    const rng = new Rng(3);
    const [m, k, n] = [5, 7, 3];
    const a = random(rng, m * k);
    const b = random(rng, k * n);
    const c = random(rng, m * n);
    const attrs = { alpha: -0.75, beta: 1.5 };
    const plain = run(
      matmul,
      [
        { shape: [m, k], data: a },
        { shape: [k, n], data: b },
        { shape: [m, n], data: c },
      ],
      attrs,
    );
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        const y = run(
          matmul,
          [
            { shape: transA ? [k, m] : [m, k], data: transA ? transposed(a, m, k) : a },
            { shape: transB ? [n, k] : [k, n], data: transB ? transposed(b, k, n) : b },
            { shape: [m, n], data: c },
          ],
          { ...attrs, transA, transB },
        );
        expect(y).toEqual(plain);
      }
    }
  });

  it('does not write its inputs and works from the output metadata alone', () => {
    const rng = new Rng(5);
    const a = random(rng, 4 * 6);
    const b = random(rng, 6 * 3);
    const [a0, b0] = [a.slice(), b.slice()];
    const io = inferKernel(matmul, [meta([6, 4]), meta([3, 6])], { transA: true, transB: true });
    const withInputs = matmul.reference([a, b], io.attrs, {
      inputs: [meta([6, 4]), meta([3, 6])],
      outputs: io.outputs,
    });
    const outputsOnly = matmul.reference([a, b], io.attrs, { inputs: [], outputs: io.outputs });
    expect(outputsOnly[0]).toEqual(withInputs[0]);
    expect(a).toEqual(a0);
    expect(b).toEqual(b0);
  });

  it("rounds f32 operands to the half operand's dtype (else bf16) under precision 'half'", () => {
    const rng = new Rng(9);
    const [a, b] = [random(rng, 5 * 7), random(rng, 7 * 3)];
    const roundTo = (dtype: 'f16' | 'bf16', x: Float32Array) =>
      Float32Array.from(
        x,
        dtype === 'bf16' ? (v) => bf16BitsToF32(f32ToBf16Bits(v)) : (v) => f16BitsToF32(f32ToF16Bits(v)),
      );
    const product = (ta: DType, tb: DType, x: Float32Array, y: Float32Array, precision: MatmulPrecision) => {
      const inputs = [
        { shape: [5, 7], dtype: ta },
        { shape: [7, 3], dtype: tb },
      ];
      const io = inferKernel(matmul, inputs, { precision });
      return matmul.reference([x, y], io.attrs, { inputs, outputs: io.outputs })[0];
    };
    const bF16 = roundTo('f16', b);
    // f32 × f16: a rounded to f16, b (already f16 values) as it is.
    expect(product('f32', 'f16', a, bF16, 'half')).toEqual(
      product('f32', 'f32', roundTo('f16', a), bF16, 'f32'),
    );
    // f32 × f32: both rounded to bf16.
    expect(product('f32', 'f32', a, b, 'half')).toEqual(
      product('f32', 'f32', roundTo('bf16', a), roundTo('bf16', b), 'f32'),
    );
    expect(product('f32', 'f32', a, b, 'half')).not.toEqual(product('f32', 'f32', a, b, 'f32'));
  });

  it('infers [M, N] and counts 2·M·N·K flops', () => {
    const { outputs, attrs } = inferKernel(matmul, [meta([7, 3]), meta([5, 7])], {
      transA: true,
      transB: true,
    });
    expect(outputs).toEqual([{ name: 'y', shape: [3, 5], dtype: 'f32' }]);
    expect(matmul.cost!([meta([7, 3]), meta([5, 7])], attrs)).toEqual({
      flops: 2 * 3 * 5 * 7,
      bytes: 4 * (21 + 35 + 15),
    });
    const withC = inferKernel(matmul, [meta([3, 7]), meta([7, 5]), meta([3, 5])]);
    expect(matmul.cost!([meta([3, 7]), meta([7, 5]), meta([3, 5])], withC.attrs)).toEqual({
      flops: 2 * 3 * 5 * 7 + 2 * 15,
      bytes: 4 * (21 + 35 + 15 + 15),
    });
  });
});

describe('batchedMatmul reference', () => {
  it('multiplies each batch entry like matmul, with transposes and alpha', () => {
    const rng = new Rng(9);
    const [batch, m, k, n] = [3, 4, 5, 2];
    const a = random(rng, batch * m * k);
    const b = random(rng, batch * k * n);
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        const as = Array.from({ length: batch }, (_, i) => a.subarray(i * m * k, (i + 1) * m * k));
        const bs = Array.from({ length: batch }, (_, i) => b.subarray(i * k * n, (i + 1) * k * n));
        const aData = new Float32Array(a.length);
        const bData = new Float32Array(b.length);
        for (let i = 0; i < batch; i++) {
          aData.set(transA ? transposed(as[i]!, m, k) : as[i]!, i * m * k);
          bData.set(transB ? transposed(bs[i]!, k, n) : bs[i]!, i * k * n);
        }
        const y = run(
          batchedMatmul,
          [
            { shape: transA ? [batch, k, m] : [batch, m, k], data: aData },
            { shape: transB ? [batch, n, k] : [batch, k, n], data: bData },
          ],
          { alpha: 0.5, transA, transB },
        );
        expect(y.length).toBe(batch * m * n);
        for (let i = 0; i < batch; i++) {
          const expected = run(
            matmul,
            [
              { shape: [m, k], data: as[i]!.slice() },
              { shape: [k, n], data: bs[i]!.slice() },
            ],
            { alpha: 0.5 },
          );
          expect(y.subarray(i * m * n, (i + 1) * m * n)).toEqual(expected);
        }
      }
    }
  });

  it('infers [B, M, N] and counts 2·B·M·N·K flops', () => {
    const { outputs, attrs } = inferKernel(batchedMatmul, [meta([2, 3, 7]), meta([2, 7, 5])]);
    expect(outputs).toEqual([{ name: 'y', shape: [2, 3, 5], dtype: 'f32' }]);
    expect(batchedMatmul.cost!([meta([2, 3, 7]), meta([2, 7, 5])], attrs)).toEqual({
      flops: 2 * 2 * 3 * 5 * 7,
      bytes: 4 * 2 * (21 + 35 + 15),
    });
  });
});

describe('matmul argument errors', () => {
  it('names b when its K does not match a', () => {
    const e = thrown(() => inferKernel(matmul, [meta([3, 7]), meta([5, 3])]));
    expect(e).toBeInstanceOf(ShapeError);
    expect(e.operation).toBe('matmul');
    expect(e.argument).toBe('b');
    expect(e.expected).toBe('dimension 0 = 7');
    expect(e.message).toContain("K of 'a'");
    expect(e.message).toContain('dimension 0 = 7');
    expect(e.message).toContain('5 in [5, 3]');
  });

  it('takes K from the transposed layouts', () => {
    const a = thrown(() => inferKernel(matmul, [meta([3, 7]), meta([7, 2])], { transA: true }));
    expect(a).toBeInstanceOf(ShapeError);
    expect(a.argument).toBe('b');
    expect(a.message).toContain('dimension 0 = 3');
    expectThrows(
      () => inferKernel(matmul, [meta([3, 7]), meta([7, 2])], { transB: true }),
      ShapeError,
      'matmul',
      'b',
      'dimension 1 = 7',
      '2 in [7, 2]',
    );
  });

  it('names a or b of the wrong rank', () => {
    expectThrows(
      () => inferKernel(matmul, [meta([2, 3, 4]), meta([4, 5])]),
      ShapeError,
      'matmul',
      'a',
      'rank 2 [M, K]',
      'rank 3 [2, 3, 4]',
    );
    const b = thrown(() => inferKernel(matmul, [meta([3, 4]), meta([4])]));
    expect(b).toBeInstanceOf(ShapeError);
    expect(b.argument).toBe('b');
    expect(b.message).toContain('rank 1 [4]');
  });

  it('names c when it is not [M, N]', () => {
    expectThrows(
      () => inferKernel(matmul, [meta([3, 7]), meta([7, 5]), meta([5, 3])]),
      ShapeError,
      'matmul',
      'c',
      'expected [3, 5]',
      'got [5, 3]',
    );
  });

  it('rejects attributes of the wrong kind', () => {
    expectThrows(
      () => inferKernel(matmul, [meta([3, 7]), meta([7, 5])], { transB: 'yes' as unknown as boolean }),
      InvalidArgumentError,
      'matmul',
      'attrs.transB',
      'true or false',
      '"yes"',
    );
  });

  it('batchedMatmul names b when batch or K disagree, and a or b of the wrong rank', () => {
    expectInferErrors(batchedMatmul, [
      [[meta([3, 4, 7]), meta([5, 7, 2])], undefined, ShapeError, 'b', 'dimension 0 = 3', '5 in [5, 7, 2]'],
      [
        [meta([3, 4, 7]), meta([3, 7, 2])],
        { transB: true },
        ShapeError,
        'b',
        'dimension 2 = 7',
        '2 in [3, 7, 2]',
      ],
      [[meta([4, 7]), meta([1, 7, 2])], undefined, ShapeError, 'a', 'rank 3 [B, M, K]', 'rank 2 [4, 7]'],
    ]);
  });
});
