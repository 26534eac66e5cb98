import { random, runFirst, run as runSpec, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { incrementalAttention, ropeKvScatter } from './decoding.js';
import { pagedAttention, pagedKvWrite, ropePagedKvWrite } from './pagedAttention.js';

const i32 = (values: readonly number[], shape = [values.length]) => ({
  shape,
  data: Int32Array.from(values),
  dtype: 'i32' as const,
});

// Sequence 0 of 11 rows in pages 4, 1, 3 (pages of 4 rows); sequence 1 of 2 rows in page 0.
const [numPages, kvHeads, pageSize, headDim, heads] = [6, 2, 4, 3, 4];
const TABLES = [4, 1, 3, 0, -1, 99];
const LENS = [11, 2];

describe('pagedAttention reference', () => {
  const rng = new Rng(7);
  const kPages = random(rng, numPages * kvHeads * pageSize * headDim);
  const vPages = random(rng, kPages.length);
  const q = random(rng, 2 * heads * headDim);
  const pool = { shape: [numPages, kvHeads, pageSize, headDim], data: kPages };
  const vPool = { shape: pool.shape, data: vPages };

  /** A sequence's rows gathered into a contiguous [kvHeads, rows, headDim] cache. */
  function gathered(pages: Float32Array, table: readonly number[], rows: number): Float32Array {
    const out = new Float32Array(kvHeads * rows * headDim);
    for (let g = 0; g < kvHeads; g++) {
      for (let t = 0; t < rows; t++) {
        const page = table[Math.floor(t / pageSize)]!;
        const src = ((page * kvHeads + g) * pageSize + (t % pageSize)) * headDim;
        out.set(pages.subarray(src, src + headDim), (g * rows + t) * headDim);
      }
    }
    return out;
  }

  it("is incrementalAttention over each sequence's rows in block-table order", () => {
    const out = runFirst(pagedAttention, [
      { shape: [2, heads, headDim], data: q },
      pool,
      vPool,
      i32(TABLES, [2, 3]),
      i32(LENS),
    ]);
    LENS.forEach((rows, b) => {
      const table = TABLES.slice(3 * b, 3 * b + 3);
      const cache = (pages: Float32Array) => ({
        shape: [kvHeads, rows, headDim],
        data: gathered(pages, table, rows),
      });
      const expected = runFirst(
        incrementalAttention,
        [
          { shape: [heads, headDim], data: q.slice(b * heads * headDim, (b + 1) * heads * headDim) },
          cache(kPages),
          cache(vPages),
        ],
        { seqLen: rows },
      );
      expect(out.subarray(b * heads * headDim, (b + 1) * heads * headDim)).toEqual(expected);
    });
  });

  it('leaves an idle row (length 0) zero and reads none of its block table', () => {
    const out = runFirst(pagedAttention, [
      { shape: [2, heads, headDim], data: q },
      pool,
      vPool,
      i32([4, 1, 3, -5, -5, -5], [2, 3]),
      i32([11, 0]),
    ]);
    expect([...out.subarray(heads * headDim)]).toEqual(new Array(heads * headDim).fill(0));
  });

  it('refuses a length past the block table and a page outside the pool, naming them', () => {
    const call = (tables: number[], lens: number[]) =>
      thrown(() =>
        runFirst(pagedAttention, [
          { shape: [2, heads, headDim], data: q },
          pool,
          vPool,
          i32(tables, [2, 3]),
          i32(lens),
        ]),
      );
    const long = call(TABLES, [13, 2]);
    expect(long).toBeInstanceOf(InvalidArgumentError);
    expect([long.operation, long.argument]).toEqual(['pagedAttention', 'seqLens']);
    expect(long.message).toContain('0 … 12');
    const outside = call([4, 1, 6, 0, 0, 0], [11, 2]);
    expect([outside.operation, outside.argument]).toEqual(['pagedAttention', 'blockTables']);
    expect(outside.message).toContain('6 at [0, 2]');
  });
});

describe('pagedKvWrite and ropePagedKvWrite references', () => {
  const rng = new Rng(11);
  const width = kvHeads * headDim;
  const kPages = random(rng, numPages * kvHeads * pageSize * headDim);
  const pool = { shape: [numPages, kvHeads, pageSize, headDim], data: kPages };
  const k = random(rng, 3 * width);
  const v = random(rng, 3 * width);
  // Row 1 idle (−1), row 2 past the pool: only row 0 is written, at page 5, offset 2.
  const slots = i32([22, -1, numPages * pageSize]);

  it('writes only the rows whose slot lies in the pool, head-first inside the page', () => {
    const [kOut, vOut] = runSpec(pagedKvWrite, [
      { shape: [3, width], data: k },
      { shape: [3, width], data: v },
      pool,
      { shape: pool.shape, data: kPages },
      slots,
    ]).values as Float32Array[];
    const expected = (rows: Float32Array) => {
      const e = kPages.slice();
      for (let g = 0; g < kvHeads; g++)
        e.set(rows.subarray(g * headDim, (g + 1) * headDim), ((5 * kvHeads + g) * pageSize + 2) * headDim);
      return e;
    };
    expect(kOut).toEqual(expected(k));
    expect(vOut).toEqual(expected(v));
  });

  it('rotates each row at its own position as ropeKvScatter does at that position', () => {
    const q = random(rng, 3 * heads * 4);
    const qRows = { shape: [3, heads, 4], data: q };
    const rows = random(rng, 3 * kvHeads * 4);
    const pages4 = random(rng, numPages * kvHeads * pageSize * 4);
    const pool4 = { shape: [numPages, kvHeads, pageSize, 4], data: pages4 };
    const positions = [5, 0, 17];
    const [qOut, kOut] = runSpec(ropePagedKvWrite, [
      qRows,
      { shape: [3, kvHeads * 4], data: rows },
      { shape: [3, kvHeads * 4], data: rows },
      pool4,
      pool4,
      i32([9, 0, 3]),
      i32(positions),
    ]).values as Float32Array[];
    positions.forEach((position, r) => {
      const cache = {
        shape: [kvHeads, position + 1, 4],
        data: new Float32Array(kvHeads * (position + 1) * 4),
      };
      const [qRow, kCache] = runSpec(
        ropeKvScatter,
        [
          { shape: [1, heads, 4], data: q.slice(r * heads * 4, (r + 1) * heads * 4) },
          { shape: [1, kvHeads * 4], data: rows.slice(r * kvHeads * 4, (r + 1) * kvHeads * 4) },
          { shape: [1, kvHeads * 4], data: rows.slice(r * kvHeads * 4, (r + 1) * kvHeads * 4) },
          cache,
          cache,
        ],
        { position },
      ).values as Float32Array[];
      expect(qOut!.subarray(r * heads * 4, (r + 1) * heads * 4)).toEqual(qRow);
      const slot = [9, 0, 3][r]!;
      const at = (g: number) =>
        ((Math.floor(slot / pageSize) * kvHeads + g) * pageSize + (slot % pageSize)) * 4;
      for (let g = 0; g < kvHeads; g++) {
        const row = (g * (position + 1) + position) * 4;
        expect(kOut!.subarray(at(g), at(g) + 4)).toEqual(kCache!.subarray(row, row + 4));
      }
    });
  });

  it('reads a fused q, k, v row as the same q, k and v given apart', () => {
    const [d, tokens] = [4, 3];
    const width = (heads + 2 * kvHeads) * d;
    const fused = random(rng, tokens * width);
    const part = (from: number, n: number) => {
      const out = new Float32Array(tokens * n * d);
      for (let t = 0; t < tokens; t++)
        out.set(fused.subarray(t * width + from * d, t * width + (from + n) * d), t * n * d);
      return out;
    };
    const pool4 = {
      shape: [numPages, kvHeads, pageSize, d],
      data: random(rng, numPages * kvHeads * pageSize * d),
    };
    const tail = [pool4, pool4, i32([9, -1, 3]), i32([5, 0, 17])];
    const apart = runSpec(ropePagedKvWrite, [
      { shape: [tokens, heads, d], data: part(0, heads) },
      { shape: [tokens, kvHeads * d], data: part(heads, kvHeads) },
      { shape: [tokens, kvHeads * d], data: part(heads + kvHeads, kvHeads) },
      ...tail,
    ]);
    const metas = [
      { shape: [tokens, heads + 2 * kvHeads, d], dtype: 'f32' as const },
      undefined,
      undefined,
      ...tail.map((x) => ({
        shape: x.shape,
        dtype: x.data instanceof Int32Array ? ('i32' as const) : ('f32' as const),
      })),
    ];
    const io = inferKernel(ropePagedKvWrite, metas, {});
    expect(io.outputs[0]!.shape).toEqual([tokens, heads, d]);
    const together = {
      values: ropePagedKvWrite.reference(
        [fused, undefined, undefined, ...tail.map((x) => x.data)],
        io.attrs,
        {
          inputs: metas,
          outputs: io.outputs,
        },
      ),
    };
    expect(together.values).toEqual(apart.values);
    expect(together.values[1]).not.toEqual(pool4.data);
  });

  it('refuses a negative position, naming it', () => {
    const e = thrown(() =>
      runSpec(ropePagedKvWrite, [
        { shape: [1, 1, 2], data: random(rng, 2) },
        { shape: [1, 2], data: random(rng, 2) },
        { shape: [1, 2], data: random(rng, 2) },
        { shape: [1, 1, 1, 2], data: random(rng, 2) },
        { shape: [1, 1, 1, 2], data: random(rng, 2) },
        i32([0]),
        i32([-3]),
      ]),
    );
    expect([e.operation, e.argument]).toEqual(['ropePagedKvWrite', 'positions']);
  });
});
