import { expectInferErrors, expectThrows, runListed } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import type { DType } from '../dtype.js';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import type { AttrValues, KernelSpec, TensorMeta } from '../kernel.js';
import { inferKernel } from '../kernelChecks.js';
import type { Shape } from '../shape.js';
import { Rng } from '../testing/random.js';
import { adamwStep, clipByGlobalNorm, globalNorm, multiTensorAdamw, sgdStep } from './optimizer.js';

type SgdAttrs = Parameters<typeof sgdStep.infer>[1];
type In = readonly [values: readonly number[], shape: Shape];

/** Runs the reference on f32 inputs (see runListed): every output. */
const run = <A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly In[],
  attrs?: Partial<A>,
): number[][] => runListed(spec, inputs, attrs).values;

const meta = (...shape: number[]): TensorMeta => ({ shape, dtype: 'f32' });

const l2 = (...arrays: number[][]): number => Math.sqrt(arrays.flat().reduce((s, x) => s + x * x, 0));

describe('adamwStep', () => {
  it('matches one AdamW step computed by hand', () => {
    const [p, m, v] = run(
      adamwStep,
      [
        [[1, -2], [2]],
        [[0.5, 0.25], [2]],
        [[0.2, -0.1], [2]],
        [[0.1, 0.3], [2]],
      ],
      { lr: 0.1, weightDecay: 0.1, step: 1 },
    );
    // m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g².
    expect(m![0]).toBeCloseTo(0.9 * 0.2 + 0.1 * 0.5, 7);
    expect(m![1]).toBeCloseTo(0.9 * -0.1 + 0.1 * 0.25, 7);
    expect(v![0]).toBeCloseTo(0.999 * 0.1 + 0.001 * 0.25, 7);
    expect(v![1]).toBeCloseTo(0.999 * 0.3 + 0.001 * 0.0625, 7);
    // Decay 1 − 0.1 · 0.1 = 0.99; at step 1 the corrections divide by 0.1 and 0.001.
    expect(p![0]).toBeCloseTo(0.99 - (0.1 * (0.23 / 0.1)) / (Math.sqrt(0.10015 / 0.001) + 1e-8), 6);
    expect(p![1]).toBeCloseTo(-1.98 - (0.1 * (-0.065 / 0.1)) / (Math.sqrt(0.2997625 / 0.001) + 1e-8), 6);
  });

  it('applies both bias corrections at a later step', () => {
    const [p] = run(
      adamwStep,
      [
        [[0.5], [1]],
        [[-1], [1]],
        [[0.3], [1]],
        [[0.8], [1]],
      ],
      { lr: 0.01, beta1: 0.8, beta2: 0.9, eps: 0.01, weightDecay: 0, step: 3 },
    );
    const m = 0.8 * 0.3 + 0.2 * -1;
    const v = 0.9 * 0.8 + 0.1 * 1;
    const expected = 0.5 - (0.01 * (m / (1 - 0.8 ** 3))) / (Math.sqrt(v / (1 - 0.9 ** 3)) + 0.01);
    expect(p![0]).toBeCloseTo(expected, 7);
  });

  it('moves each element by about lr · sign(g) on a first step from zero moments', () => {
    const [p] = run(
      adamwStep,
      [
        [[0, 0, 0], [3]],
        [[3, -0.01, 1e-3], [3]],
        [[0, 0, 0], [3]],
        [[0, 0, 0], [3]],
      ],
      { lr: 0.5, weightDecay: 0, step: 1 },
    );
    expect(p![0]).toBeCloseTo(-0.5, 5);
    expect(p![1]).toBeCloseTo(0.5, 5);
    expect(p![2]).toBeCloseTo(-0.5, 4);
  });

  it('declares param, m and v as in-place outputs', () => {
    const { outputs } = inferKernel(adamwStep, [meta(3, 4), meta(3, 4), meta(3, 4), meta(3, 4)], {
      lr: 1e-3,
      step: 1,
    });
    expect(outputs.map((o) => [o.name, o.aliasOf, o.shape])).toEqual([
      ['param', 0, [3, 4]],
      ['m', 2, [3, 4]],
      ['v', 3, [3, 4]],
    ]);
    const attrs = inferKernel(adamwStep, [meta(1), meta(1), meta(1), meta(1)], { lr: 1e-3, step: 1 }).attrs;
    expect(attrs).toEqual({ lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, step: 1 });
  });

  it('names the argument and says expected against actual', () => {
    const four = [meta(4), meta(4), meta(4), meta(4)];
    const attrs = { lr: 0.1, step: 1 };
    expectInferErrors(adamwStep, [
      [[meta(4), meta(5), meta(4), meta(4)], attrs, ShapeError, 'grad', '[4]', '[5]'],
      [[meta(2, 3), meta(2, 3), meta(3, 2), meta(2, 3)], attrs, ShapeError, 'm', '[2, 3]', '[3, 2]'],
      [[meta(4), meta(4), meta(4), meta(1, 4)], attrs, ShapeError, 'v', '[4]', '[1, 4]'],
      [four, { lr: 0.1, step: 1, beta1: 1 }, InvalidArgumentError, 'attrs.beta1', '< 1', 'got 1'],
      [four, { lr: 0.1, step: 1, beta2: 1.5 }, InvalidArgumentError, 'attrs.beta2', '< 1', '1.5'],
      [four, { lr: 0.1, step: 0 }, InvalidArgumentError, 'attrs.step', '>= 1', 'got 0'],
      [four, { lr: 0.1, step: 2.5 }, InvalidArgumentError, 'attrs.step', 'an integer', '2.5'],
      [four, { step: 1 }, InvalidArgumentError, 'attrs.lr', 'a number', 'nothing'],
      [four, { lr: 0.1, step: 1, eps: 0 }, InvalidArgumentError, 'attrs.eps', '> 0', 'got 0'],
    ]);
  });
});

describe('sgdStep', () => {
  /** Two steps, feeding the first step's param and buffer into the second. */
  function twoSteps(a: Partial<SgdAttrs>) {
    const [p1, b1] = run(
      sgdStep,
      [
        [[1], [1]],
        [[0.5], [1]],
        [[0], [1]],
      ],
      a,
    );
    const [p2, b2] = run(
      sgdStep,
      [
        [p1!, [1]],
        [[-0.25], [1]],
        [b1!, [1]],
      ],
      a,
    );
    return { p1: p1![0]!, b1: b1![0]!, p2: p2![0]!, b2: b2![0]! };
  }

  it('takes two heavy-ball momentum steps like PyTorch', () => {
    const r = twoSteps({ lr: 0.1, momentum: 0.9 });
    // buf = 0.5, p = 1 − 0.05; buf = 0.45 − 0.25, p = 0.95 − 0.02.
    expect(r.b1).toBeCloseTo(0.5, 7);
    expect(r.p1).toBeCloseTo(0.95, 7);
    expect(r.b2).toBeCloseTo(0.2, 7);
    expect(r.p2).toBeCloseTo(0.93, 7);
  });

  it('takes two Nesterov steps like PyTorch', () => {
    const r = twoSteps({ lr: 0.1, momentum: 0.9, nesterov: true });
    // d = g + 0.9 buf: 0.5 + 0.45, then −0.25 + 0.18.
    expect(r.b1).toBeCloseTo(0.5, 7);
    expect(r.p1).toBeCloseTo(0.905, 7);
    expect(r.b2).toBeCloseTo(0.2, 7);
    expect(r.p2).toBeCloseTo(0.912, 7);
  });

  it('adds weight decay to the gradient and dampens what enters the buffer', () => {
    const r = twoSteps({ lr: 0.1, momentum: 0.5, dampening: 0.5, weightDecay: 0.1 });
    // g = 0.5 + 0.1 · 1 = 0.6; buf = 0.5 · 0.6 = 0.3; p = 1 − 0.03.
    expect(r.b1).toBeCloseTo(0.3, 7);
    expect(r.p1).toBeCloseTo(0.97, 7);
    // g = −0.25 + 0.097 = −0.153; buf = 0.15 − 0.0765; p = 0.97 − 0.00735.
    expect(r.b2).toBeCloseTo(0.0735, 6);
    expect(r.p2).toBeCloseTo(0.96265, 6);
  });

  it('is plain SGD without momentum: dampening ignored, buffer left as is', () => {
    const [p, b] = run(
      sgdStep,
      [
        [[1, 2], [2]],
        [[0.5, -1], [2]],
        [[0.75, -0.5], [2]],
      ],
      { lr: 0.1, dampening: 0.5 },
    );
    expect(p![0]).toBeCloseTo(0.95, 7);
    expect(p![1]).toBeCloseTo(2.1, 6);
    expect(b).toEqual([0.75, -0.5]);
  });

  it('rejects Nesterov without momentum or with dampening, and misshapen inputs', () => {
    const three = [meta(6), meta(6), meta(6)];
    expectInferErrors(sgdStep, [
      [
        three,
        { lr: 0.1, nesterov: true },
        InvalidArgumentError,
        'attrs.nesterov',
        'momentum > 0 and dampening = 0',
        'momentum 0, dampening 0',
      ],
      [
        three,
        { lr: 0.1, momentum: 0.9, dampening: 0.1, nesterov: true },
        InvalidArgumentError,
        'attrs.nesterov',
        'momentum > 0 and dampening = 0',
        'momentum 0.9, dampening 0.1',
      ],
      [three, { lr: 0.1, momentum: 1 }, InvalidArgumentError, 'attrs.momentum', '< 1', 'got 1'],
      [three, { lr: 0.1, dampening: 1.5 }, InvalidArgumentError, 'attrs.dampening', '<= 1', '1.5'],
      [[meta(6), meta(7), meta(6)], { lr: 0.1 }, ShapeError, 'grad', '[6]', '[7]'],
      [[meta(2, 3), meta(2, 3), meta(6)], { lr: 0.1 }, ShapeError, 'momentumBuffer', '[2, 3]', '[6]'],
    ]);
  });
});

describe('clipByGlobalNorm', () => {
  it('scales by maxNorm / norm when the norm is larger, and returns the norm before clipping', () => {
    const [a, b, norm] = run(
      clipByGlobalNorm,
      [
        [[3, 4], [2]],
        [[12], [1, 1]],
      ],
      { maxNorm: 6.5, eps: 0 },
    );
    expect(norm).toEqual([13]);
    expect(a).toEqual([1.5, 2]);
    expect(b).toEqual([6]);
  });

  it('leaves the result at norm maxNorm when clipped, and untouched when not', () => {
    const rng = new Rng(3);
    const grads = [[17], [3, 5], [], [61]].map(
      (shape) =>
        [Array.from({ length: shape.reduce((n, d) => n * d, 1) }, () => rng.uniform(-1, 1)), shape] as const,
    );
    const before = l2(...grads.map(([g]) => Array.from(Float32Array.from(g))));
    const clipped = run(clipByGlobalNorm, grads, { maxNorm: 0.75 });
    expect(clipped).toHaveLength(5);
    expect(clipped[4]![0]).toBeCloseTo(before, 5);
    expect(l2(...clipped.slice(0, 4))).toBeCloseTo(0.75, 5);
    const kept = run(clipByGlobalNorm, grads, { maxNorm: 1e6 });
    kept.slice(0, 4).forEach((g, i) => {
      expect(g).toEqual(Array.from(Float32Array.from(grads[i]![0])));
    });
  });

  it('names one in-place output per gradient, then the norm', () => {
    const { outputs, attrs } = inferKernel(clipByGlobalNorm, [meta(3), meta(), meta(2, 5)], { maxNorm: 1 });
    expect(outputs.map((o) => [o.name, o.aliasOf, o.shape])).toEqual([
      ['grads[0]', 0, [3]],
      ['grads[1]', 1, []],
      ['grads[2]', 2, [2, 5]],
      ['norm', undefined, []],
    ]);
    expect(attrs.eps).toBe(1e-6);
  });

  it('rejects a maxNorm that is not positive and a negative eps', () => {
    expectInferErrors(clipByGlobalNorm, [
      [[meta(3)], { maxNorm: 0 }, InvalidArgumentError, 'attrs.maxNorm', '> 0', 'got 0'],
      [[meta(3)], { maxNorm: 1, eps: -1 }, InvalidArgumentError, 'attrs.eps', '>= 0', '-1'],
    ]);
  });
});

describe('globalNorm', () => {
  it('is the norm clipByGlobalNorm returns, without outputs for the tensors', () => {
    const grads: In[] = [
      [[3, 4], [2]],
      [[12], [1, 1]],
      [[], [0]],
    ];
    expect(run(globalNorm, grads)).toEqual([[13]]);
    expect(inferKernel(globalNorm, [meta(3), meta()]).outputs).toEqual([
      { name: 'norm', shape: [], dtype: 'f32' },
    ]);
  });
});

describe('multiTensorAdamw', () => {
  type MultiAttrs = Parameters<typeof multiTensorAdamw.infer>[1];
  const rng = new Rng(41);
  const random = (shape: Shape, positive = false): In => [
    Array.from({ length: shape.reduce((n, d) => n * d, 1) }, () =>
      positive ? rng.uniform(0.5, 1.5) : rng.uniform(-1, 1),
    ),
    shape,
  ];
  const shapes: Shape[] = [[3], [2, 5], [1], []];
  const quads = shapes.map((s) => [random(s), random(s), random(s), random(s, true)] as const);
  const f32Of = ([values, shape]: In) => ({
    data: Float32Array.from(values),
    meta: { shape, dtype: 'f32' as DType },
  });

  /** The reference with no device step or lr and an optional norm. */
  function multi(attrs: Partial<MultiAttrs>, norm?: number): number[][] {
    const tensors = quads.flat().map(f32Of);
    const normIn = norm === undefined ? undefined : f32Of([[norm], [1]]);
    const metas = [undefined, undefined, normIn?.meta, undefined, ...tensors.map((t) => t.meta)];
    const io = inferKernel(multiTensorAdamw, metas, attrs);
    return multiTensorAdamw
      .reference([undefined, undefined, normIn?.data, undefined, ...tensors.map((t) => t.data)], io.attrs, {
        inputs: metas,
        outputs: io.outputs,
      })
      .map((o) => Array.from(o));
  }

  it('equals one adamwStep per tensor, each with its own weight decay', () => {
    const decays = [0.1, 0, 0.5, 0.01];
    const out = multi({ lr: 0.05, step: 3, weightDecay: decays });
    expect(out).toHaveLength(12);
    quads.forEach((q, j) => {
      const one = run(adamwStep, q, { lr: 0.05, step: 3, weightDecay: decays[j] });
      expect(out.slice(3 * j, 3 * j + 3)).toEqual(one);
    });
    // One value decays every tensor alike.
    const same = multi({ lr: 0.05, step: 3, weightDecay: [0.2] });
    quads.forEach((q, j) => {
      expect(same.slice(3 * j, 3 * j + 3)).toEqual(
        run(adamwStep, q, { lr: 0.05, step: 3, weightDecay: 0.2 }),
      );
    });
  });

  it('equals clipByGlobalNorm then adamwStep, and leaves the gradients alone under maxNorm', () => {
    const grads = quads.map((q) => q[1]);
    const norm = run(globalNorm, grads)[0]![0]!;
    const attrs = { lr: 0.05, step: 2, weightDecay: [0.1] };
    const clipped = run(clipByGlobalNorm, grads, { maxNorm: norm / 4 });
    const fused = multi({ ...attrs, maxNorm: norm / 4 }, norm);
    quads.forEach((q, j) => {
      const expected = run(adamwStep, [q[0], [clipped[j]!, q[1][1]], q[2], q[3]], {
        lr: 0.05,
        step: 2,
        weightDecay: 0.1,
      });
      expected.forEach((e, r) => {
        fused[3 * j + r]!.forEach((x, i) => {
          expect(x).toBeCloseTo(e[i]!, 6);
        });
      });
    });
    expect(multi({ ...attrs, maxNorm: norm * 2 }, norm)).toEqual(multi(attrs));
  });

  it('names param, m and v of every tensor as in-place outputs after the four fixed inputs', () => {
    const { outputs } = inferKernel(
      multiTensorAdamw,
      [
        undefined,
        undefined,
        undefined,
        undefined,
        meta(3),
        meta(3),
        meta(3),
        meta(3),
        meta(2, 2),
        meta(2, 2),
        meta(2, 2),
        meta(2, 2),
      ],
      { lr: 0.1, step: 1 },
    );
    expect(outputs.map((o) => [o.name, o.aliasOf, o.shape])).toEqual([
      ['param[0]', 4, [3]],
      ['m[0]', 6, [3]],
      ['v[0]', 7, [3]],
      ['param[1]', 8, [2, 2]],
      ['m[1]', 10, [2, 2]],
      ['v[1]', 11, [2, 2]],
    ]);
  });

  it('checks a list attribute element by element and keeps a frozen copy of it', () => {
    const four = [undefined, undefined, undefined, undefined, meta(4), meta(4), meta(4), meta(4)];
    const given = [0.5];
    const { attrs } = inferKernel(multiTensorAdamw, four, { lr: 0.1, step: 1, weightDecay: given });
    given[0] = 7;
    expect(attrs.weightDecay).toEqual([0.5]);
    expect(Object.isFrozen(attrs.weightDecay)).toBe(true);
    expect(inferKernel(multiTensorAdamw, four, { lr: 0.1, step: 1 }).attrs.weightDecay).toEqual([0.01]);
    const bad = (weightDecay: unknown) => () =>
      inferKernel(multiTensorAdamw, four, { lr: 0.1, step: 1, weightDecay: weightDecay as number[] });
    expectThrows(
      bad(0.1),
      InvalidArgumentError,
      'multiTensorAdamw',
      'attrs.weightDecay',
      'an array of numbers',
      '0.1',
    );
    expectThrows(
      bad([Number.NaN]),
      InvalidArgumentError,
      'multiTensorAdamw',
      'attrs.weightDecay[0]',
      'a number',
      'NaN',
    );
    expectThrows(
      bad(['x']),
      InvalidArgumentError,
      'multiTensorAdamw',
      'attrs.weightDecay[0]',
      'a number',
      '"x"',
    );
  });

  it('names the argument and says expected against actual', () => {
    const four = [meta(4), meta(4), meta(4), meta(4)];
    const none = [undefined, undefined, undefined, undefined];
    const attrs = { lr: 0.1, step: 1 };
    expectInferErrors(multiTensorAdamw, [
      [[...none, ...four, meta(2), meta(3), meta(2), meta(2)], attrs, ShapeError, 'tensors[5]', '[2]', '[3]'],
      [[...none, ...four, meta(4)], attrs, ShapeError, 'tensors', 'a multiple of 4', '5 tensors'],
      [
        [...none, ...four, ...four],
        { ...attrs, weightDecay: [0.1, 0, 0] },
        InvalidArgumentError,
        'attrs.weightDecay',
        '1 or 2 values',
        '3 values',
      ],
      [
        [...none, ...four],
        { ...attrs, weightDecay: [0.1, -1] },
        InvalidArgumentError,
        'attrs.weightDecay[1]',
        '>= 0',
        '-1',
      ],
      [
        [...none, ...four],
        { ...attrs, weightDecay: [] },
        InvalidArgumentError,
        'attrs.weightDecay',
        'an array of numbers',
        'an empty array',
      ],
      [
        [...none, ...four],
        { ...attrs, maxNorm: 1 },
        InvalidArgumentError,
        'attrs.maxNorm',
        'no maxNorm',
        '1',
      ],
      [
        [undefined, undefined, meta(2), undefined, ...four],
        { ...attrs, maxNorm: 1 },
        ShapeError,
        'gradNorm',
        '[] or [1]',
        '[2]',
      ],
      [[...none, ...four], { ...attrs, beta2: 1 }, InvalidArgumentError, 'attrs.beta2', '< 1', '1'],
    ]);
  });
});

describe('optimizer costs', () => {
  it('counts bytes of every read and write', () => {
    const m = meta(1000);
    expect(
      adamwStep.cost!([m, m, m, m], { lr: 0, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, step: 1 })
        .bytes,
    ).toBe(28000);
    const sgd = { lr: 0.1, momentum: 0, dampening: 0, weightDecay: 0, nesterov: false };
    expect(sgdStep.cost!([m, m, m], sgd).bytes).toBe(12000);
    expect(sgdStep.cost!([m, m, m], { ...sgd, momentum: 0.9 }).bytes).toBe(20000);
    expect(clipByGlobalNorm.cost!([m, meta(10, 10)], { maxNorm: 1, eps: 0 }).bytes).toBe(8804);
    expect(globalNorm.cost!([m, meta(10, 10)], {}).bytes).toBe(4404);
    const multi = {
      lr: 0,
      beta1: 0.9,
      beta2: 0.999,
      eps: 1e-8,
      weightDecay: [0],
      step: 1,
      maxNorm: 1,
      clipEps: 0,
    };
    expect(
      multiTensorAdamw.cost!(
        [undefined, undefined, meta(1), undefined, m, m, m, m, meta(10), meta(10), meta(10), meta(10)],
        multi,
      ).bytes,
    ).toBe(28280);
  });
});
