import { describe, expect, it } from 'vitest';
import type { HostArray } from '../dtype.js';
import { type InvalidArgumentError, type RayoError, ShapeError } from '../errors.js';
import { type AttrValues, inferKernel, type KernelSpec, type OutputMeta } from '../kernel.js';
import type { Shape } from '../shape.js';
import { Rng } from '../testing/random.js';
import { logSoftmax, logSoftmaxBackward, softmax, softmaxBackward } from './softmax.js';

interface Input {
  readonly shape: Shape;
  readonly data: Float32Array;
}

/** Runs the reference with the io metadata `inferKernel` derives, and checks it left its inputs alone. */
function run<A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly Input[],
  attrs?: Partial<A>,
): { outputs: OutputMeta[]; values: HostArray[] } {
  const metas = inputs.map((x) => ({ shape: x.shape, dtype: 'f32' as const }));
  const io = inferKernel(spec, metas, attrs);
  const before = inputs.map((x) => x.data.slice());
  const values = spec.reference(
    inputs.map((x) => x.data),
    io.attrs,
    { inputs: metas, outputs: io.outputs },
  );
  inputs.forEach((x, i) => {
    expect(unchanged(x.data, before[i]!), `input ${i} was written`).toBe(true);
  });
  return { outputs: io.outputs, values };
}

function unchanged(a: HostArray, b: HostArray): boolean {
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return a.length === b.length;
}

function thrown(call: () => unknown): RayoError {
  try {
    call();
  } catch (error) {
    return error as RayoError;
  }
  throw new Error('expected the call to throw');
}

function expectError(
  error: RayoError,
  cls: typeof ShapeError | typeof InvalidArgumentError,
  kernel: string,
  argument: string,
  expected: string,
  actual: string,
): void {
  expect(error).toBeInstanceOf(cls);
  expect(error.kernel).toBe(kernel);
  expect(error.argument).toBe(argument);
  expect(error.message).toContain(expected);
  expect(error.message).toContain(actual);
}

function random(rng: Rng, n: number, lo = -1, hi = 1): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform(lo, hi));
}

/**
 * Central differences of `loss` with respect to each element of `x` (changed
 * in place and restored), dividing by the step float32 actually took.
 */
function numericGradient(loss: () => number, x: Float32Array, h = 1e-3): Float64Array {
  const grad = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    x[i] = v + h;
    const up = loss();
    const stepUp = x[i]!;
    x[i] = v - h;
    const down = loss();
    grad[i] = (up - down) / (stepUp - x[i]!);
    x[i] = v;
  }
  return grad;
}

function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < a.length; i++) total += a[i]! * b[i]!;
  return total;
}

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < actual.length; i++) expect(Math.abs(actual[i]! - expected[i]!)).toBeLessThan(tolerance);
}

const row = (data: number[], shape: Shape = [data.length]) => ({ shape, data: Float32Array.from(data) });

describe('softmax', () => {
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
