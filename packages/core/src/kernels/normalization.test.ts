import {
  dot,
  expectClose,
  expectError,
  type Input,
  meta,
  numericGradient,
  random,
  run,
  thrown,
} from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import type { Shape } from '../shape.js';
import { Rng } from '../testing/random.js';
import { layerNorm, layerNormBackward, rmsNorm, rmsNormBackward } from './normalization.js';

const f32 = (data: number[], shape: Shape = [data.length]) => ({ shape, data: Float32Array.from(data) });
describe('rmsNorm', () => {
  it('normalizes a hand-computed row', () => {
    // mean(x²) = 4, + eps = 9, so x is divided by 3.
    const { outputs, values } = run(rmsNorm, [f32([2, -2, 2, -2]), f32([3, 1, 0.5, -3])], { eps: 5 });
    expect(outputs).toEqual([{ name: 'y', shape: [4], dtype: 'f32' }]);
    expectClose(values[0]!, [2, -2 / 3, 1 / 3, 2], 1e-7);
  });

  it('normalizes each row on its own, with eps 1e-6 by default', () => {
    const { values } = run(rmsNorm, [f32([3, 4, 0.03, 0.04], [2, 2]), f32([1, 2])]);
    const s = 1 / Math.sqrt(12.5 + 1e-6);
    const t = 1 / Math.sqrt(0.00125 + 1e-6);
    expectClose(values[0]!, [3 * s, 8 * s, 0.03 * t, 0.08 * t], 1e-6);
  });

  it('rejects a weight that does not match the last axis of x', () => {
    let e = thrown(() => inferKernel(rmsNorm, [meta([3, 4]), meta([3])]));
    expectError(e, ShapeError, 'rmsNorm', 'weight', 'dimension 0 = 4', '3 in [3]');
    e = thrown(() => inferKernel(rmsNorm, [meta([3, 4]), meta([1, 4])]));
    expectError(e, ShapeError, 'rmsNorm', 'weight', 'rank 1 [N]', 'rank 2 [1, 4]');
  });

  it('rejects a rank-0 x and an empty last axis', () => {
    let e = thrown(() => inferKernel(rmsNorm, [meta([]), meta([1])]));
    expectError(e, ShapeError, 'rmsNorm', 'x', 'rank >= 1 [..., N]', 'rank 0 []');
    e = thrown(() => inferKernel(rmsNorm, [meta([3, 0]), meta([0])]));
    expectError(e, ShapeError, 'rmsNorm', 'x', 'a last dimension of at least 1', '[3, 0]');
  });

  it('rejects eps <= 0', () => {
    for (const eps of [0, -1e-6]) {
      const e = thrown(() => inferKernel(rmsNorm, [meta([3, 4]), meta([4])], { eps }));
      expectError(e, InvalidArgumentError, 'rmsNorm', 'attrs.eps', '> 0', `got ${eps}`);
    }
  });
});

describe('layerNorm', () => {
  it('normalizes a hand-computed row with the biased variance', () => {
    // mean 3, variance (4 + 1 + 0 + 9) / 4 = 3.5, + eps = 4, so (x − 3) / 2.
    const { outputs, values } = run(layerNorm, [f32([1, 2, 3, 6]), f32([2, 2, 1, 1]), f32([0, 1, 0, -1])], {
      eps: 0.5,
    });
    expect(outputs).toEqual([{ name: 'y', shape: [4], dtype: 'f32' }]);
    expectClose(values[0]!, [-2, 0, 0, 0.5], 1e-7);
  });

  it('subtracts the mean of rows far from zero without cancelling', () => {
    const x = f32([10000.5, 10001.5], [1, 2]);
    const { values } = run(layerNorm, [x, f32([1, 1]), f32([0, 0])], { eps: 1e-5 });
    const s = 1 / Math.sqrt(0.25 + 1e-5);
    expectClose(values[0]!, [-0.5 * s, 0.5 * s], 1e-6);
  });

  it('gives beta for rows of one element', () => {
    const { values } = run(layerNorm, [f32([5, -7], [2, 1]), f32([3]), f32([0.25])]);
    expect([...values[0]!]).toEqual([0.25, 0.25]);
  });

  it('rejects gamma or beta that do not match the last axis of x', () => {
    let e = thrown(() => inferKernel(layerNorm, [meta([3, 4]), meta([5]), meta([4])]));
    expectError(e, ShapeError, 'layerNorm', 'gamma', 'dimension 0 = 4', '5 in [5]');
    e = thrown(() => inferKernel(layerNorm, [meta([3, 4]), meta([4]), meta([4, 1])]));
    expectError(e, ShapeError, 'layerNorm', 'beta', 'rank 1 [N]', 'rank 2 [4, 1]');
  });

  it('rejects eps <= 0', () => {
    const e = thrown(() => inferKernel(layerNorm, [meta([3, 4]), meta([4]), meta([4])], { eps: 0 }));
    expectError(e, InvalidArgumentError, 'layerNorm', 'attrs.eps', '> 0', 'got 0');
  });
});

describe('normalization backward kernels', () => {
  const shape = [3, 5];
  const rng = new Rng(11);
  const x = random(rng, 15);
  const dy = random(rng, 15);
  const w = random(rng, 5, 0.5, 1.5);
  const b = random(rng, 5);

  const [X, W, B, DY] = [
    { shape, data: x },
    { shape: [5], data: w },
    { shape: [5], data: b },
    { shape, data: dy },
  ];
  /** Σ dy · y of a forward kernel: its gradients are what the backward kernel returns for dy. */
  const lossOf = (spec: typeof layerNorm, inputs: readonly Input[], eps: number) => () =>
    dot(dy, run(spec, inputs, { eps }).values[0]!);

  for (const eps of [1e-6, 0.1]) {
    it(`rmsNormBackward matches finite differences (eps ${eps})`, () => {
      const loss = lossOf(rmsNorm, [X, W], eps);
      const [dx, dw] = run(rmsNormBackward, [DY, X, W], { eps }).values;
      expectClose(dx!, numericGradient(loss, x), 1e-3);
      expectClose(dw!, numericGradient(loss, w), 1e-3);
    });

    it(`layerNormBackward matches finite differences (eps ${eps})`, () => {
      const loss = lossOf(layerNorm, [X, W, B], eps);
      const [dx, dgamma, dbeta] = run(layerNormBackward, [DY, X, W], { eps }).values;
      expectClose(dx!, numericGradient(loss, x), 1e-3);
      expectClose(dgamma!, numericGradient(loss, w), 1e-3);
      expectClose(dbeta!, numericGradient(loss, b), 1e-3);
    });
  }

  it('sum the per-feature gradients over every row', () => {
    // With x = 1 everywhere and eps tiny, the row scale is ~1, so dweight[j] = Σ_rows dy[j].
    const { outputs, values } = run(
      rmsNormBackward,
      [f32([1, 2, 3, 4, 5, 6], [3, 2]), f32([1, 1, 1, 1, 1, 1], [3, 2]), f32([1, 1])],
      { eps: 1e-12 },
    );
    expect(outputs.map((o) => [o.name, o.shape])).toEqual([
      ['dx', [3, 2]],
      ['dweight', [2]],
    ]);
    expectClose(values[1]!, [9, 12], 1e-5);
    const ln = run(layerNormBackward, [
      f32([1, 2, 3, 4, 5, 6], [3, 2]),
      f32([1, 3, 1, 3, 1, 3], [3, 2]),
      f32([1, 1]),
    ]);
    expect(ln.outputs.map((o) => [o.name, o.shape])).toEqual([
      ['dx', [3, 2]],
      ['dgamma', [2]],
      ['dbeta', [2]],
    ]);
    expectClose(ln.values[2]!, [9, 12], 1e-6);
  });

  it('reject an x of another shape than dy, and a misfit weight', () => {
    let e = thrown(() => inferKernel(rmsNormBackward, [meta([3, 4]), meta([4, 3]), meta([4])]));
    expectError(e, ShapeError, 'rmsNormBackward', 'x', '[3, 4]', '[4, 3]');
    e = thrown(() => inferKernel(rmsNormBackward, [meta([3, 4]), meta([3, 4]), meta([5])]));
    expectError(e, ShapeError, 'rmsNormBackward', 'weight', 'dimension 0 = 4', '5 in [5]');
    e = thrown(() => inferKernel(layerNormBackward, [meta([3, 4]), meta([3, 5]), meta([4])]));
    expectError(e, ShapeError, 'layerNormBackward', 'x', '[3, 4]', '[3, 5]');
    e = thrown(() => inferKernel(layerNormBackward, [meta([3, 4]), meta([3, 4]), meta([2])]));
    expectError(e, ShapeError, 'layerNormBackward', 'gamma', 'dimension 0 = 4', '2 in [2]');
    e = thrown(() => inferKernel(layerNormBackward, [meta([3, 4]), meta([3, 4]), meta([4])], { eps: 0 }));
    expectError(e, InvalidArgumentError, 'layerNormBackward', 'attrs.eps', '> 0', 'got 0');
  });
});

describe('normalization scale and cost', () => {
  it('runs 33 rows of 4099 quickly', () => {
    const rng = new Rng(4);
    const x = { shape: [33, 4099], data: random(rng, 33 * 4099) };
    const w = { shape: [4099], data: random(rng, 4099) };
    const start = performance.now();
    run(layerNorm, [x, w, w]);
    run(layerNormBackward, [x, x, w]);
    expect(performance.now() - start).toBeLessThan(1000);
  });

  it('counts one read of each input and one write of each output', () => {
    expect(rmsNorm.cost!([meta([4, 5]), meta([5])], { eps: 1e-6, out: 'auto' }).bytes).toBe(4 * (40 + 5));
    expect(layerNormBackward.cost!([meta([4, 5]), meta([4, 5]), meta([5])], { eps: 1e-5 }).bytes).toBe(
      4 * (60 + 15),
    );
  });
});
