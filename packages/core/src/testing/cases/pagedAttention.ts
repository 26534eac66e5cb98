import * as k from '../../kernels/pagedAttention.js';
import type { Shape } from '../../shape.js';
import {
  type FamilyCases,
  f32,
  type InputSample,
  i32,
  invalidCalls,
  newFamilyCases,
  valid,
} from '../cases.js';
import { distinctInts, type Rng } from '../random.js';
import { frequencyTable, ROPE_LAYOUTS, type RopeLayout, ropeTolerance } from '../ropeInputs.js';

const { cases, errors } = newFamilyCases();

// The pools start random, so a kernel that writes any other row, or reads a
// row past a sequence's length or a page of another sequence, changes the
// result. Block tables hold shuffled, non-consecutive pages, and their entries
// past a sequence's pages point outside the pool: reading one fails.

/** i32 values given in full. */
const values = (list: readonly number[]): InputSample => ({
  shape: [list.length],
  dtype: 'i32',
  init: () => list,
});

/** Block tables [B, maxPages] of distinct shuffled pages of a pool of numPages; unused entries outside it. */
function blockTables(
  seqLens: readonly number[],
  maxPages: number,
  pageSize: number,
  numPages: number,
): InputSample {
  const init = (rng: Rng) => {
    const pages = distinctInts(rng, numPages, seqLens.length * maxPages);
    return seqLens.flatMap((len, b) =>
      Array.from({ length: maxPages }, (_, i) =>
        i < Math.ceil(len / pageSize) ? pages[b * maxPages + i]! : i % 2 === 0 ? -1 : numPages + i,
      ),
    );
  };
  return { shape: [seqLens.length, maxPages], dtype: 'i32', init };
}

const pool = (numPages: number, kvHeads: number, pageSize: number, headDim: number): Shape => [
  numPages,
  kvHeads,
  pageSize,
  headDim,
];

// ---- pagedAttention --------------------------------------------------------------

/** Summing up to a few thousand weighted rows in f32: outputs are averages of values in [-1, 1). */
const ATTENTION_TOLERANCE = { rtol: 1e-4, atol: 2e-5 } as const;

// [heads, kvHeads, headDim, pageSize, maxPages, numPages, seqLens (B of them)]: B = 1, 3, 7;
// lengths of 1, of whole pages and not; an idle row (0); GQA 4:1, 3:1 and 1:1; head dims 64, 128, 80 and 7;
// pages of 16 (a power of two: a shift finds a token's page on cuda) and of 5 (a division).
const ATTENTION: readonly (readonly [number, number, number, number, number, number, readonly number[]])[] = [
  [4, 1, 64, 16, 4, 7, [1]],
  [8, 2, 64, 16, 5, 19, [1, 37, 80]],
  [8, 2, 64, 16, 9, 70, [1, 16, 17, 100, 5, 144, 0]],
  [8, 8, 128, 16, 4, 15, [64, 33, 2]],
  [4, 1, 80, 16, 3, 8, [47, 9]],
  [6, 2, 7, 5, 4, 13, [3, 20, 11]],
  [8, 2, 128, 16, 70, 80, [1100]],
  [4, 1, 64, 16, 260, 300, [4099]],
  [4, 4, 64, 16, 80, 250, [1000, 1, 1279]],
];

for (const [heads, kvHeads, headDim, pageSize, maxPages, numPages, seqLens] of ATTENTION) {
  const kv = f32(pool(numPages, kvHeads, pageSize, headDim));
  cases.push(
    valid(k.pagedAttention, {
      label: `${seqLens.length} seqs of [${seqLens.join(', ')}], ${heads} heads / ${kvHeads} kv heads, headDim ${headDim}, pages of ${pageSize}`,
      inputs: [
        f32([seqLens.length, heads, headDim]),
        kv,
        kv,
        blockTables(seqLens, maxPages, pageSize, numPages),
        values(seqLens),
      ],
      tolerance: ATTENTION_TOLERANCE,
    }),
  );
}
// Scores in the hundreds: exp overflows f32 unless the max is subtracted.
cases.push(
  valid(k.pagedAttention, {
    label: 'large scores (scale 4, wide q), 2 seqs of [67, 130], 8 heads / 2, headDim 64, pages of 16',
    inputs: [
      f32([2, 8, 64], 'wide'),
      f32(pool(20, 2, 16, 64)),
      f32(pool(20, 2, 16, 64)),
      blockTables([67, 130], 9, 16, 20),
      values([67, 130]),
    ],
    attrs: { scale: 4 },
    tolerance: { rtol: 1e-3, atol: 1e-4 },
  }),
);

const Q = f32([2, 4, 8]);
const POOL = f32(pool(6, 2, 4, 8));
const TABLES = i32([2, 3], 0, 6);
const LENS = values([5, 12]);
errors.push(
  ...invalidCalls(k.pagedAttention, [
    ['q of rank 2', [f32([2, 32]), POOL, POOL, TABLES, LENS], 'shape', 'q'],
    ['kPages of rank 3', [Q, f32([6, 8, 8]), f32([6, 8, 8]), TABLES, LENS], 'shape', 'kPages'],
    [
      'a headDim other than q’s',
      [Q, f32(pool(6, 2, 4, 6)), f32(pool(6, 2, 4, 6)), TABLES, LENS],
      'shape',
      'kPages',
    ],
    [
      '3 kv heads under 4 heads',
      [Q, f32(pool(6, 3, 4, 8)), f32(pool(6, 3, 4, 8)), TABLES, LENS],
      'shape',
      'kPages',
    ],
    ['vPages of another page size', [Q, POOL, f32(pool(6, 2, 5, 8)), TABLES, LENS], 'shape', 'vPages'],
    ['block tables of rank 1', [Q, POOL, POOL, i32([6], 0, 6), LENS], 'shape', 'blockTables'],
    ['block tables of 3 sequences under 2', [Q, POOL, POOL, i32([3, 3], 0, 6), LENS], 'shape', 'blockTables'],
    ['block tables of no pages', [Q, POOL, POOL, i32([2, 0], 0, 6), LENS], 'shape', 'blockTables'],
    ['seqLens of 3 sequences under 2', [Q, POOL, POOL, TABLES, values([1, 2, 3])], 'shape', 'seqLens'],
    [
      'u32 seqLens',
      [Q, POOL, POOL, TABLES, { shape: [2], dtype: 'u32', init: () => [1, 2] }],
      'dtype',
      'seqLens',
    ],
    ['f32 block tables', [Q, POOL, POOL, { shape: [2, 3], dtype: 'f32' }, LENS], 'dtype', 'blockTables'],
    ['negative scale', [Q, POOL, POOL, TABLES, LENS], 'argument', 'attrs.scale', { scale: -1 }],
  ]),
);

// ---- pagedKvWrite -------------------------------------------------------------------

/** `rows` slots of distinct rows of a pool of `capacity` rows; every third row idle (−1 or past the pool). */
function slots(rows: number, capacity: number): InputSample {
  const init = (rng: Rng) =>
    distinctInts(rng, capacity, rows).map((s, r) => (r % 3 === 2 ? (r % 2 === 0 ? -1 : capacity + r) : s));
  return { shape: [rows], dtype: 'i32', init };
}

// [R, kvHeads, headDim, pageSize, numPages, k and v as [R, kvHeads, headDim]]
const WRITES: readonly (readonly [number, number, number, number, number, boolean])[] = [
  [1, 1, 1, 1, 1, false],
  [1, 8, 64, 16, 5, false],
  [3, 2, 7, 5, 4, true],
  [7, 8, 64, 16, 9, false],
  [7, 8, 128, 16, 20, true],
  [16, 2, 80, 16, 3, false],
];
for (const [rows, kvHeads, headDim, pageSize, numPages, byHead] of WRITES) {
  const shape = byHead ? [rows, kvHeads, headDim] : [rows, kvHeads * headDim];
  const kv = f32(pool(numPages, kvHeads, pageSize, headDim));
  cases.push(
    valid(k.pagedKvWrite, {
      label: `${rows} row(s) [${shape.join(', ')}] into pools [${numPages}, ${kvHeads}, ${pageSize}, ${headDim}]`,
      inputs: [f32(shape), f32(shape), kv, kv, slots(rows, numPages * pageSize)],
    }),
  );
}

const ROWS = f32([3, 16]);
errors.push(
  ...invalidCalls(k.pagedKvWrite, [
    ['kPages of rank 3', [ROWS, ROWS, f32([6, 8, 8]), f32([6, 8, 8]), values([0, 1, 2])], 'shape', 'kPages'],
    [
      'vPages of another shape',
      [ROWS, ROWS, POOL, f32(pool(7, 2, 4, 8)), values([0, 1, 2])],
      'shape',
      'vPages',
    ],
    ['k rows of headDim only', [f32([3, 8]), f32([3, 8]), POOL, POOL, values([0, 1, 2])], 'shape', 'k'],
    ['k of 4 rows under 3 slots', [f32([4, 16]), f32([4, 16]), POOL, POOL, values([0, 1, 2])], 'shape', 'k'],
    ['v of another shape than k', [ROWS, f32([3, 2, 8]), POOL, POOL, values([0, 1, 2])], 'shape', 'v'],
    ['slots of rank 2', [ROWS, ROWS, POOL, POOL, i32([3, 1], 0, 24)], 'shape', 'slots'],
    ['f32 slots', [ROWS, ROWS, POOL, POOL, { shape: [3], dtype: 'f32' }], 'dtype', 'slots'],
  ]),
);

// ---- ropePagedKvWrite ------------------------------------------------------------

/** Positions of `rows` rows: distinct, up to `limit`. */
const positions = (rows: number, limit: number): InputSample => ({
  shape: [rows],
  dtype: 'i32',
  init: (rng) => distinctInts(rng, limit, rows),
});

/** [R, heads, kvHeads, headDim, pageSize, numPages, largest position] of a ropePagedKvWrite case. */
type RopeWrite = readonly [number, number, number, number, number, number, number];

/** A ropePagedKvWrite case: q, k and v apart, or `fused` in one input [R, heads + 2·kvHeads, headDim]. */
function ropeWriteCase(
  [rows, heads, kvHeads, headDim, pageSize, numPages, limit]: RopeWrite,
  layout: RopeLayout,
  table: boolean,
  fused: boolean,
) {
  const kv = f32(pool(numPages, kvHeads, pageSize, headDim));
  const qkv = fused
    ? [f32([rows, heads + 2 * kvHeads, headDim]), undefined, undefined]
    : [f32([rows, heads, headDim]), f32([rows, kvHeads * headDim]), f32([rows, kvHeads, headDim])];
  const inputs = [...qkv, kv, kv, slots(rows, numPages * pageSize), positions(rows, limit)];
  const q = fused
    ? `fused q, k, v [${rows}, ${heads} + 2·${kvHeads}, ${headDim}]`
    : `q [${rows}, ${heads}, ${headDim}]`;
  return valid(k.ropePagedKvWrite, {
    label: `${layout}${table ? ' with a frequency table' : ''}: ${q} into pools [${numPages}, ${kvHeads}, ${pageSize}, ${headDim}] at positions below ${limit}`,
    inputs: table ? [...inputs, frequencyTable(headDim)] : inputs,
    attrs: { layout, theta: 500000 },
    tolerance: ropeTolerance(limit),
  });
}

// [shape, frequency table], each in both layouts.
const ROPE_WRITES: readonly (readonly [RopeWrite, boolean])[] = [
  [[1, 1, 1, 2, 1, 1, 1], false],
  [[3, 4, 1, 6, 5, 4, 20], false],
  [[7, 32, 8, 64, 16, 9, 4096], false],
  [[5, 8, 8, 128, 16, 4, 2048], true],
  [[3, 6, 2, 80, 16, 3, 100], true],
];
for (const layout of ROPE_LAYOUTS) {
  for (const [shape, table] of ROPE_WRITES) cases.push(ropeWriteCase(shape, layout, table, false));
}

// q, k and v fused in one input, as one product of a layer writes them: [shape, layout, frequency table].
const FUSED_ROPE_WRITES: readonly (readonly [RopeWrite, RopeLayout, boolean])[] = [
  [[1, 1, 1, 2, 1, 1, 1], 'half', false],
  [[5, 3, 1, 6, 5, 4, 20], 'interleaved', false],
  [[7, 4, 2, 14, 3, 6, 300], 'half', true],
  [[3, 32, 8, 64, 16, 3, 4096], 'interleaved', true],
];
for (const [shape, layout, table] of FUSED_ROPE_WRITES) cases.push(ropeWriteCase(shape, layout, table, true));

const RQ = f32([3, 4, 8]);
errors.push(
  ...invalidCalls(k.ropePagedKvWrite, [
    [
      'odd headDim',
      [
        f32([3, 4, 7]),
        f32([3, 14]),
        f32([3, 14]),
        f32(pool(6, 2, 4, 7)),
        f32(pool(6, 2, 4, 7)),
        values([0, 1, 2]),
        values([0, 1, 2]),
      ],
      'shape',
      'q',
    ],
    [
      'kPages of another headDim',
      [RQ, ROWS, ROWS, f32(pool(6, 4, 4, 4)), f32(pool(6, 4, 4, 4)), values([0, 1, 2]), values([0, 1, 2])],
      'shape',
      'kPages',
    ],
    [
      'positions of 2 rows under 3',
      [RQ, ROWS, ROWS, POOL, POOL, values([0, 1, 2]), values([0, 1])],
      'shape',
      'positions',
    ],
    [
      'slots of 4 rows under 3',
      [RQ, ROWS, ROWS, POOL, POOL, values([0, 1, 2, 3]), values([0, 1, 2])],
      'shape',
      'slots',
    ],
    ['v of 2 rows', [RQ, ROWS, f32([2, 16]), POOL, POOL, values([0, 1, 2]), values([0, 1, 2])], 'shape', 'v'],
    ['k without v', [RQ, ROWS, undefined, POOL, POOL, values([0, 1, 2]), values([0, 1, 2])], 'shape', 'v'],
    ['v without k', [RQ, undefined, ROWS, POOL, POOL, values([0, 1, 2]), values([0, 1, 2])], 'shape', 'k'],
    [
      'fused q, k, v without a q head',
      [RQ, undefined, undefined, POOL, POOL, values([0, 1, 2]), values([0, 1, 2])],
      'shape',
      'q',
    ],
    [
      'a frequency table of headDim entries',
      [RQ, ROWS, ROWS, POOL, POOL, values([0, 1, 2]), values([0, 1, 2]), f32([8])],
      'shape',
      'frequencies',
    ],
  ]),
);

export const pagedAttentionCases: FamilyCases = { cases, errors };
