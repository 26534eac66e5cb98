import { expectClose, expectInferErrors, numericGradient, runListed } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import type { DType } from '../dtype.js';
import { ShapeError } from '../errors.js';
import type { AttrValues, KernelSpec, TensorMeta } from '../kernel.js';
import { inferKernel } from '../kernelChecks.js';
import type { Shape } from '../shape.js';
import { Rng } from '../testing/random.js';
import { crossEntropy, crossEntropyBackward } from './loss.js';

type In = readonly [values: readonly number[], shape: Shape, dtype: DType];

/** Runs the reference (see runListed): every output. */
const run = <A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly In[],
  attrs?: Partial<A>,
): number[][] => runListed(spec, inputs, attrs).values;

const meta = (dtype: DType, ...shape: number[]): TensorMeta => ({ shape, dtype });

const loss = (logits: readonly number[], targets: readonly number[], c: number): number =>
  run(crossEntropy, [
    [logits, [targets.length, c], 'f32'],
    [targets, [targets.length], 'i32'],
  ])[0]![0]!;

describe('crossEntropy', () => {
  it('is the mean of −log softmax at the targets, by hand', () => {
    const e = Math.E;
    const row0 = -Math.log(e ** 3 / (e + e ** 2 + e ** 3));
    const row1 = -Math.log(1 / 3);
    expect(loss([1, 2, 3, 0, 0, 0], [2, 1], 3)).toBeCloseTo((row0 + row1) / 2, 6);
  });

  it('is 0 with a single class and finite for logits far beyond exp range', () => {
    expect(loss([5, -7, 0.25], [0, 0, 0], 1)).toBe(0);
    // −log softmax = 1000 − (−1000) for the lower logit; e^1000 overflows without the max shift.
    expect(loss([1000, -1000], [1], 2)).toBeCloseTo(2000, 2);
    expect(loss([1000, -1000], [0], 2)).toBe(0);
  });

  it('is NaN when any target is outside [0, C)', () => {
    for (const bad of [-1, 3, 2147483647, -2147483648]) {
      expect(loss([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0, bad], 3)).toBeNaN();
    }
  });

  it('infers a scalar loss and rejects bad shapes, naming the argument', () => {
    expect(inferKernel(crossEntropy, [meta('f32', 7, 10), meta('i32', 7)]).outputs).toEqual([
      { name: 'loss', shape: [], dtype: 'f32' },
    ]);
    expectInferErrors(crossEntropy, [
      [[meta('f32', 10), meta('i32', 10)], undefined, ShapeError, 'logits', 'rank 2 [N, C]', 'rank 1 [10]'],
      [[meta('f32', 4, 0), meta('i32', 4)], undefined, ShapeError, 'logits', '[N >= 1, C >= 1]', '[4, 0]'],
      [[meta('f32', 0, 3), meta('i32', 0)], undefined, ShapeError, 'logits', '[N >= 1, C >= 1]', '[0, 3]'],
      [
        [meta('f32', 4, 3), meta('i32', 4, 1)],
        undefined,
        ShapeError,
        'targets',
        'rank 1 [N]',
        'rank 2 [4, 1]',
      ],
      [[meta('f32', 4, 3), meta('i32', 3)], undefined, ShapeError, 'targets', 'dimension 0 = 4', '3 in [3]'],
    ]);
  });
});

describe('crossEntropyBackward', () => {
  const grad = (logits: readonly number[], targets: readonly number[], c: number, dloss: number) =>
    run(crossEntropyBackward, [
      [logits, [targets.length, c], 'f32'],
      [targets, [targets.length], 'i32'],
      [[dloss], [], 'f32'],
    ])[0]!;

  it('matches central finite differences of crossEntropy', () => {
    const rng = new Rng(17);
    const [n, c] = [3, 5];
    const logits = Array.from({ length: n * c }, () => rng.uniform(-2, 2));
    const targets = [4, 0, 2];
    const dloss = 0.7;
    const analytic = grad(logits, targets, c, dloss);
    const numeric = numericGradient(() => dloss * loss(logits, targets, c), logits, 1e-2);
    expectClose(analytic, numeric, 1e-3);
  });

  it('is dloss · (softmax − onehot) / N by hand, and each row sums to 0', () => {
    const d = grad([0, 0, 0, 0, Math.log(3), 0], [1, 0], 3, 2);
    // Row 0: softmax 1/3 each; row 1: softmax [1/5, 3/5, 1/5]; scale 2 / 2.
    const expected = [1 / 3, 1 / 3 - 1, 1 / 3, 1 / 5 - 1, 3 / 5, 1 / 5];
    d.forEach((v, i) => {
      expect(v).toBeCloseTo(expected[i]!, 6);
    });
    expect(d[0]! + d[1]! + d[2]!).toBeCloseTo(0, 6);
  });

  it('takes dloss as [] or [1] and makes only rows with an out-of-range target NaN', () => {
    const d = run(crossEntropyBackward, [
      [[1, 2, 3, 4, 5, 6], [3, 2], 'f32'],
      [[1, 2, -1], [3], 'i32'],
      [[1], [1], 'f32'],
    ])[0]!;
    expect(d.slice(0, 2).every(Number.isFinite)).toBe(true);
    expect(d.slice(2).every(Number.isNaN)).toBe(true);
  });

  it('rejects a dloss of more than one value and mismatched targets', () => {
    expect(
      inferKernel(crossEntropyBackward, [meta('f32', 4, 3), meta('i32', 4), meta('f32', 1)]).outputs,
    ).toEqual([{ name: 'dlogits', shape: [4, 3], dtype: 'f32' }]);
    expectInferErrors(crossEntropyBackward, [
      [
        [meta('f32', 4, 3), meta('i32', 4), meta('f32', 2)],
        undefined,
        ShapeError,
        'dloss',
        '[] or [1]',
        '[2]',
      ],
      [
        [meta('f32', 4, 3), meta('i32', 4), meta('f32', 1, 1)],
        undefined,
        ShapeError,
        'dloss',
        '[] or [1]',
        '[1, 1]',
      ],
      [
        [meta('f32', 4, 3), meta('i32', 5), meta('f32')],
        undefined,
        ShapeError,
        'targets',
        'dimension 0 = 4',
        '5 in [5]',
      ],
    ]);
  });
});
