import { dot, expectClose, expectError, numericGradient, random, run, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import type { Shape } from '../shape.js';
import { Rng } from '../testing/random.js';
import { logSoftmax, logSoftmaxBackward, softmax, softmaxBackward } from './softmax.js';

const row = (data: number[], shape: Shape = [data.length]) => ({ shape, data: Float32Array.from(data) });

describe('softmax', () => {
  it('refuses an axis, saying how to work over another one', () => {
    for (const spec of [softmax, logSoftmax, softmaxBackward, logSoftmaxBackward]) {
      const inputs = spec.inputs.map(() => ({ shape: [3, 4], dtype: 'f32' as const }));
      const error = thrown(() => inferKernel(spec, inputs, { axis: 0 } as never));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toMatch(
        new RegExp(
          `^${spec.name}: argument 'attrs.axis': the softmax kernels work over the last axis only .*transpose swaps the last two axes`,
        ),
      );
    }
  });

  it('normalizes a hand-computed row', () => {
    const { outputs, values } = run(softmax, [row([1, 2, 3])]);
    expect(outputs).toEqual([{ name: 'y', shape: [3], dtype: 'f32' }]);
    expectClose(values[0]!, [0.09003057, 0.24472847, 0.66524096], 1e-7);
  });

  it('works row by row over the last axis', () => {
    const { values } = run(softmax, [row([0, Math.log(3), 5, 5, 7, 7], [3, 2])]);
    expectClose(values[0]!, [0.25, 0.75, 0.5, 0.5, 0.5, 0.5], 1e-7);
  });

  it('subtracts the row max, so huge logits stay finite', () => {
    const { values } = run(softmax, [row([1000, 1001, -1000])]);
    expectClose(values[0]!, [0.26894142, 0.73105858, 0], 1e-7);
  });

  it('gives 1 for rows of one element', () => {
    expect([...run(softmax, [row([3, -8], [2, 1])]).values[0]!]).toEqual([1, 1]);
  });

  it('rejects a rank-0 x', () => {
    const e = thrown(() => inferKernel(softmax, [{ shape: [], dtype: 'f32' }]));
    expectError(e, ShapeError, 'softmax', 'x', 'rank >= 1 [..., N]', 'rank 0 []');
  });
});

describe('logSoftmax', () => {
  it('gives the log-probabilities of a hand-computed row', () => {
    const { values } = run(logSoftmax, [row([1, 2, 3])]);
    expectClose(values[0]!, [-2.40760596, -1.40760596, -0.40760596], 1e-6);
  });

  it('stays finite where log(softmax) would underflow', () => {
    const { values } = run(logSoftmax, [row([0, 200])]);
    expectClose(values[0]!, [-200, 0], 1e-6);
  });

  it('is the log of softmax', () => {
    const x = row([...random(new Rng(1), 35, -4, 4)], [5, 7]);
    const p = run(softmax, [x]).values[0]!;
    expectClose(run(logSoftmax, [x]).values[0]!, Array.from(p, Math.log), 1e-5);
  });

  it('rejects a rank-0 x', () => {
    const e = thrown(() => inferKernel(logSoftmax, [{ shape: [], dtype: 'f32' }]));
    expectError(e, ShapeError, 'logSoftmax', 'x', 'rank >= 1 [..., N]', 'rank 0 []');
  });
});

describe('softmax backward kernels', () => {
  it('softmaxBackward of a hand-computed row', () => {
    // Σ dy · y = 0.25, so dx = y · (dy − 0.25).
    const { outputs, values } = run(softmaxBackward, [row([1, 0]), row([0.25, 0.75])]);
    expect(outputs).toEqual([{ name: 'dx', shape: [2], dtype: 'f32' }]);
    expect([...values[0]!]).toEqual([0.1875, -0.1875]);
  });

  it('logSoftmaxBackward of a hand-computed row', () => {
    // Σ dy = 3, so dx = dy − 3 · exp(y).
    const { values } = run(logSoftmaxBackward, [row([1, 2]), row([Math.log(0.25), Math.log(0.75)])]);
    expectClose(values[0]!, [0.25, -0.25], 1e-7);
  });

  it('match finite differences of the forward references', () => {
    const rng = new Rng(7);
    const shape = [3, 5];
    const x = random(rng, 15, -2, 2);
    const dy = random(rng, 15);
    for (const [forward, backward] of [
      [softmax, softmaxBackward],
      [logSoftmax, logSoftmaxBackward],
    ] as const) {
      const y = () => run(forward, [{ shape, data: x }]).values[0]!;
      const numeric = numericGradient(() => dot(dy, y()), x);
      const [dx] = run(backward, [
        { shape, data: dy },
        { shape, data: y() as Float32Array },
      ]).values;
      expectClose(dx!, numeric, 1e-3);
    }
  });

  it('reject a y of another shape than dy, and a rank-0 dy', () => {
    for (const spec of [softmaxBackward, logSoftmaxBackward]) {
      let e = thrown(() =>
        inferKernel(spec, [
          { shape: [3, 4], dtype: 'f32' },
          { shape: [4, 3], dtype: 'f32' },
        ]),
      );
      expectError(e, ShapeError, spec.name, 'y', '[3, 4]', '[4, 3]');
      e = thrown(() =>
        inferKernel(spec, [
          { shape: [], dtype: 'f32' },
          { shape: [], dtype: 'f32' },
        ]),
      );
      expectError(e, ShapeError, spec.name, 'dy', 'rank >= 1 [..., N]', 'rank 0 []');
    }
  });
});

describe('softmax family scale and cost', () => {
  it('runs 67 rows of 4099 quickly', () => {
    const x = { shape: [67, 4099], data: random(new Rng(2), 67 * 4099) };
    const start = performance.now();
    const p = run(softmax, [x]).values[0]!;
    expect(performance.now() - start).toBeLessThan(1000);
    let total = 0;
    for (let i = 0; i < 4099; i++) total += p[i]!;
    expect(total).toBeCloseTo(1, 5);
  });

  it('counts one read of each input and one write', () => {
    const m = { shape: [4, 5], dtype: 'f32' as const };
    expect(softmax.cost!([m], {}).bytes).toBe(160);
    expect(softmaxBackward.cost!([m, m], {}).bytes).toBe(240);
  });
});
