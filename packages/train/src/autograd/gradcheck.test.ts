import { createCpuBackend, LINEAR_ACTIVATIONS, type Shape, sizeOf, type Tensor } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Rng } from '../random.js';
import { type GradCheckInput, type GradCheckOptions, gradCheck } from './gradcheck.js';
import {
  add,
  batchedMatmul,
  biasAdd,
  clip,
  crossEntropy,
  div,
  embedding,
  exp,
  flashAttention,
  gelu,
  layerNorm,
  linear,
  logSoftmax,
  matmul,
  mean,
  mseLoss,
  mul,
  reducedLinear,
  relu,
  reshape,
  rmsNorm,
  rope,
  scale,
  sigmoid,
  silu,
  softmax,
  sub,
  sum,
  sumSquares,
  swiglu,
  tanh,
  transpose,
} from './ops/index.js';
import type { Tape, Variable } from './tape.js';

const backend = createCpuBackend();
const rng = new Rng(7);

function input(shape: Shape, low = -1, high = 1): GradCheckInput {
  return { shape, data: rng.uniformArray(sizeOf(shape), low, high) };
}

/** Values in ±[0.2, 1]: away from the kinks of relu and clip. */
function awayFromZero(shape: Shape): GradCheckInput {
  const data = rng.uniformArray(sizeOf(shape), 0.2, 1);
  for (let i = 0; i < data.length; i++) if (rng.next() < 0.5) data[i] = -data[i]!;
  return { shape, data };
}

async function expectGradients(
  fn: (tape: Tape, ...inputs: Variable[]) => Variable,
  inputs: readonly GradCheckInput[],
  options?: GradCheckOptions,
): Promise<void> {
  const result = await gradCheck(backend, fn, inputs, options);
  expect(result.mismatches.slice(0, 5)).toEqual([]);
  expect(result.checked).toBe(inputs.reduce((n, i) => n + sizeOf(i.shape), 0));
}

function ids(values: readonly number[], shape: Shape = [values.length]): Tensor {
  return backend.upload(Int32Array.from(values), shape, 'i32');
}

describe('gradients against central differences (cpu)', () => {
  describe('matmul through the transpose flags', () => {
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        it(`transA=${transA} transB=${transB}`, async () => {
          const [m, k, n] = [3, 4, 2];
          await expectGradients(
            (t, a, b) => matmul(t, a, b, { transA, transB, alpha: 0.7 }),
            [input(transA ? [k, m] : [m, k]), input(transB ? [n, k] : [k, n])],
          );
        });
      }
    }
    it('with c and beta', async () => {
      await expectGradients(
        (t, a, b, c) => matmul(t, a, b, { c, beta: -0.5 }),
        [input([2, 3]), input([3, 4]), input([2, 4])],
      );
    });
  });

  describe('batchedMatmul', () => {
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        it(`transA=${transA} transB=${transB}`, async () => {
          const [b, m, k, n] = [2, 3, 2, 3];
          await expectGradients(
            (t, x, y) => batchedMatmul(t, x, y, { transA, transB, alpha: 1.3 }),
            [input(transA ? [b, k, m] : [b, m, k]), input(transB ? [b, n, k] : [b, k, n])],
          );
        });
      }
    }
  });

  it('flashAttention: grouped heads (4 of 1, batch 2, an explicit scale; 2 of 1, batch 1)', async () => {
    await expectGradients(
      (t, q, k, v) => flashAttention(t, q, k, v, { scale: 0.8 }),
      [input([5, 2, 4, 3], -1.5, 1.5), input([5, 2, 1, 3], -1.5, 1.5), input([5, 2, 1, 3])],
    );
    await expectGradients(
      (t, q, k, v) => flashAttention(t, q, k, v),
      [input([3, 1, 2, 4]), input([3, 1, 1, 4]), input([3, 1, 1, 4])],
    );
  });

  // The rule of a reduced-precision product, with 'tf32' (which the cpu computes exactly):
  // under 'half' the same rule runs on bf16 copies, checked against a rounded f64 reference in nn/precision.test.ts.
  it('reducedLinear (x · wᵀ, precision tf32)', async () => {
    await expectGradients((t, x, w) => reducedLinear(t, x, w, 'tf32'), [input([5, 7]), input([3, 7])]);
  });

  it('transpose and reshape', async () => {
    await expectGradients(
      (t, x, w) => mul(t, reshape(t, transpose(t, x), [2, 12]), w),
      [input([2, 3, 4]), input([2, 12])],
    );
  });

  describe('binary operations with broadcasting', () => {
    const cases: [string, Shape, Shape][] = [
      ['same shapes', [3, 4], [3, 4]],
      ['a row vector', [3, 4], [4]],
      ['a column', [3, 4], [3, 1]],
      ['a middle axis', [2, 3, 4], [3, 1]],
      ['outer and inner axes', [2, 3, 4], [1, 3, 1]],
      ['both sides', [2, 1, 4], [3, 1]],
      ['a scalar', [2, 3], []],
    ];
    const ops = { add, sub, mul } as const;
    for (const [name, op] of Object.entries(ops)) {
      for (const [label, a, b] of cases) {
        it(`${name}: ${label}`, async () => {
          await expectGradients((t, x, y) => op(t, x, y), [input(a), input(b)]);
        });
      }
    }
    it('div', async () => {
      await expectGradients((t, x, y) => div(t, x, y), [input([3, 4]), input([4], 0.5, 1.5)]);
    });
  });

  it('scale', async () => {
    await expectGradients((t, x) => scale(t, x, -1.5, 0.25), [input([5])]);
  });

  it('biasAdd: the bias gradient is the column sums', async () => {
    await expectGradients((t, x, b) => biasAdd(t, x, b), [input([2, 3, 4]), input([4])]);
  });

  it('clip', async () => {
    // Inside and outside the range, away from its edges.
    const data = [-0.9, -0.3, 0.1, 0.45, 0.8, -0.7, 0.2, 0.95];
    await expectGradients((t, x) => clip(t, x, -0.5, 0.5), [{ data, shape: [8] }]);
  });

  it('exp', async () => {
    await expectGradients((t, x) => exp(t, x), [input([6])]);
  });

  describe('activations', () => {
    const ops = { relu, gelu, silu, sigmoid, tanh } as const;
    for (const [name, op] of Object.entries(ops)) {
      it(name, async () => {
        await expectGradients((t, x) => op(t, x), [awayFromZero([3, 4])]);
      });
    }
    it('swiglu', async () => {
      await expectGradients((t, g, u) => swiglu(t, g, u), [input([3, 4]), input([3, 4])]);
    });
  });

  describe('linear: bias and activation in the product, one backward kernel and two products', () => {
    // Small x and w, and a bias in ±[1, 2]: z keeps its sign under the step, away from relu's kink.
    const bias = (n: number): GradCheckInput => {
      const { data } = awayFromZero([n]);
      return { shape: [n], data: Array.from(data, (v) => 2 * v) };
    };
    for (const activation of LINEAR_ACTIVATIONS) {
      it(activation, async () => {
        await expectGradients(
          (t, x, w, b) => linear(t, x, w, b, activation),
          [input([3, 4], -0.3, 0.3), input([5, 4], -0.3, 0.3), bias(5)],
        );
      });
    }
    it('gelu without a bias', async () => {
      await expectGradients((t, x, w) => linear(t, x, w, undefined, 'gelu'), [input([2, 6]), input([3, 6])]);
    });
  });

  it('softmax', async () => {
    await expectGradients((t, x) => softmax(t, x), [input([3, 5], -2, 2)]);
  });

  it('logSoftmax', async () => {
    await expectGradients((t, x) => logSoftmax(t, x), [input([3, 5], -2, 2)]);
  });

  it('rmsNorm', async () => {
    await expectGradients((t, x, w) => rmsNorm(t, x, w, 1e-5), [input([3, 6]), input([6], 0.5, 1.5)]);
  });

  it('layerNorm', async () => {
    await expectGradients(
      (t, x, g, b) => layerNorm(t, x, g, b),
      [input([3, 6], -2, 2), input([6], 0.5, 1.5), input([6])],
    );
  });

  describe('reductions', () => {
    it('sum over the last axis', async () => {
      await expectGradients((t, x) => sum(t, x, { axis: 'last' }), [input([2, 3, 4])]);
    });
    it('sum over everything', async () => {
      await expectGradients((t, x) => sum(t, x), [input([2, 3])]);
    });
    it('mean', async () => {
      await expectGradients((t, x) => mean(t, x, { axis: 'last' }), [input([3, 4])]);
      await expectGradients((t, x) => mean(t, x), [input([3, 4])]);
    });
    it('sumSquares', async () => {
      await expectGradients((t, x) => sumSquares(t, x, { axis: 'last' }), [input([3, 4])]);
      await expectGradients((t, x) => sumSquares(t, x), [input([3, 4])]);
    });
  });

  describe('losses', () => {
    it('crossEntropy', async () => {
      const targets = ids([2, 0, 4]);
      await expectGradients((t, x) => crossEntropy(t, x, targets), [input([3, 5], -2, 2)]);
      targets.dispose();
    });
    it('mseLoss', async () => {
      const target = backend.upload(rng.uniformArray(6, -1, 1), [2, 3]);
      await expectGradients((t, x) => mseLoss(t, x, target), [input([2, 3])]);
      target.dispose();
    });
  });

  it('embedding, with a repeated id', async () => {
    const rows = ids([1, 3, 1, 0, 3, 3], [2, 3]);
    await expectGradients((t, table) => embedding(t, table, rows), [input([4, 3])]);
    rows.dispose();
  });

  describe('rope', () => {
    for (const layout of ['half', 'interleaved'] as const) {
      it(layout, async () => {
        await expectGradients(
          (t, x) => rope(t, x, { layout, positionOffset: 3, theta: 100 }),
          [input([3, 2, 4])],
        );
      });
    }
  });

  it('a variable used twice accumulates both contributions', async () => {
    await expectGradients((t, x, w) => add(t, mul(t, x, x), matmul(t, x, w)), [input([2, 2]), input([2, 2])]);
  });
});
