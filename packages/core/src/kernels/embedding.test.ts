import { expectClose, expectInferErrors, numericGradient, runListed } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import type { DType } from '../dtype.js';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import type { AttrValues, KernelSpec, TensorMeta } from '../kernel.js';
import { inferKernel } from '../kernelChecks.js';
import type { Shape } from '../shape.js';
import { Rng } from '../testing/random.js';
import { embedding, embeddingBackward } from './embedding.js';

type In = readonly [values: readonly number[], shape: Shape, dtype: DType];

/** Runs the reference (see runListed): its first output and that output's shape. */
function run<A extends AttrValues>(
  spec: KernelSpec<A>,
  inputs: readonly In[],
  attrs?: Partial<A>,
): { values: number[]; shape: Shape } {
  const { values, shapes } = runListed(spec, inputs, attrs);
  return { values: values[0]!, shape: shapes[0]! };
}

const meta = (dtype: DType, ...shape: number[]): TensorMeta => ({ shape, dtype });

// A [4, 2] table whose rows are easy to tell apart.
const TABLE: In = [[0.5, 1.5, 10, 11, 20, 21, 30, 31], [4, 2], 'f32'];

describe('embedding', () => {
  it('gathers rows into [...ids.shape, D]', () => {
    const y = run(embedding, [TABLE, [[1, 0, 3, 1], [2, 2], 'i32']]);
    expect(y.shape).toEqual([2, 2, 2]);
    expect(y.values).toEqual([10, 11, 0.5, 1.5, 30, 31, 10, 11]);
  });

  it('gives NaN rows for ids outside [0, V), never a clamped or wrapped row', () => {
    // 2^29 · 8 wraps to 0 in 32 bits.
    const table: In = [Array.from({ length: 4 * 8 }, (_, i) => i + 1), [4, 8], 'f32'];
    const y = run(embedding, [table, [[2, -1, 4, 2147483647, -2147483648, 536870912], [6], 'i32']]);
    expect(y.values.slice(0, 8)).toEqual([17, 18, 19, 20, 21, 22, 23, 24]);
    expect(y.values.slice(8).every(Number.isNaN)).toBe(true);
  });

  it('rejects a table that is not [V, D] and scalar ids', () => {
    expectInferErrors(embedding, [
      [[meta('f32', 13), meta('i32', 4)], undefined, ShapeError, 'table', 'rank 2 [V, D]', 'rank 1 [13]'],
      [[meta('f32', 13, 4), meta('i32')], undefined, ShapeError, 'ids', 'rank >= 1', 'rank 0 []'],
    ]);
  });
});

describe('embeddingBackward', () => {
  it('sums the dy rows of repeated ids, by hand', () => {
    const d = run(
      embeddingBackward,
      [
        [[1, 2, 3, 4, 5, 6, 7, 8], [2, 2, 2], 'f32'],
        [[2, 0, 2, 2], [2, 2], 'i32'],
      ],
      { vocabSize: 4 },
    );
    expect(d.shape).toEqual([4, 2]);
    // Row 2 collects positions 0, 2 and 3; row 1 and 3 are never referenced.
    expect(d.values).toEqual([3, 4, 0, 0, 1 + 5 + 7, 2 + 6 + 8, 0, 0]);
  });

  it('is the gradient of Σ w · embedding(table, ids), by finite differences', () => {
    const rng = new Rng(5);
    const [v, d] = [5, 3];
    const ids = [3, 1, 3, 0, 3, 1, 4];
    const table = Array.from({ length: v * d }, () => rng.uniform(-1, 1));
    const w = Array.from({ length: ids.length * d }, () => rng.uniform(-1, 1));
    const objective = (t: readonly number[]) => {
      const y = run(embedding, [
        [t, [v, d], 'f32'],
        [ids, [ids.length], 'i32'],
      ]).values;
      return y.reduce((s, yi, i) => s + yi * w[i]!, 0);
    };
    const analytic = run(
      embeddingBackward,
      [
        [w, [ids.length, d], 'f32'],
        [ids, [ids.length], 'i32'],
      ],
      { vocabSize: v },
    ).values;
    const numeric = numericGradient(() => objective(table), table, 1e-2);
    expectClose(analytic, numeric, 1e-3);
  });

  it('makes all of dtable NaN when any id is outside [0, vocabSize)', () => {
    for (const bad of [-1, 4, 2147483647]) {
      const d = run(
        embeddingBackward,
        [
          [[1, 2, 3, 4, 5, 6], [3, 2], 'f32'],
          [[0, bad, 1], [3], 'i32'],
        ],
        { vocabSize: 4 },
      );
      expect(d.values).toHaveLength(8);
      expect(d.values.every(Number.isNaN)).toBe(true);
    }
  });

  it('rejects dy that is not [...ids.shape, D], scalar ids and a bad vocabSize', () => {
    expect(
      inferKernel(embeddingBackward, [meta('f32', 2, 3, 7), meta('i32', 2, 3)], { vocabSize: 11 }).outputs,
    ).toEqual([{ name: 'dtable', shape: [11, 7], dtype: 'f32' }]);
    expectInferErrors(embeddingBackward, [
      [[meta('f32', 5, 4), meta('i32', 4)], { vocabSize: 13 }, ShapeError, 'dy', '[4, D]', '[5, 4]'],
      [[meta('f32', 2, 3), meta('i32', 2, 3)], { vocabSize: 13 }, ShapeError, 'dy', '[2, 3, D]', '[2, 3]'],
      [[meta('f32', 4), meta('i32')], { vocabSize: 13 }, ShapeError, 'ids', 'rank >= 1', 'rank 0 []'],
      [
        [meta('f32', 4, 3), meta('i32', 4)],
        { vocabSize: 0 },
        InvalidArgumentError,
        'attrs.vocabSize',
        '>= 1',
        'got 0',
      ],
      [
        [meta('f32', 4, 3), meta('i32', 4)],
        {},
        InvalidArgumentError,
        'attrs.vocabSize',
        'a number',
        'nothing',
      ],
    ]);
  });
});
