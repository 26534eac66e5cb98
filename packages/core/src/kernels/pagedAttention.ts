import { bytesPerElement, type HostArray } from '../dtype.js';
import { InvalidArgumentError } from '../errors.js';
import { defineKernel, runReference, type TensorMeta } from '../kernel.js';
import { formatShape, shapesEqual, sizeOf } from '../shape.js';
import { attendRows } from './attentionReference.js';
import { ArgCheck } from './check.js';
import { checkFusedQkv, splitFused } from './fusedQkv.js';
import { rope } from './rope.js';
import { checkFrequencies, FREQUENCIES_INPUT } from './ropeFrequencies.js';
import { bytesOf, CACHES, FLOAT } from './vocabulary.js';

// Batched decoding over a paged KV cache: the caches of every sequence live in
// fixed-size pages of one pool per layer, [numPages, kvHeads, pageSize,
// headDim] (head-first inside a page, so a head's rows of a page are
// contiguous), and a block table maps a sequence's page i (its rows
// i·pageSize … (i+1)·pageSize − 1) to a page of the pool. Slots, positions,
// block tables and lengths are device tensors, so a recorded step replays for
// new values; a negative slot or a length of 0 marks an idle row of a batch of
// fixed size.

const FAMILY = 'paged';

/** [numPages, kvHeads, pageSize, headDim] of a page pool. */
type PoolShape = [number, number, number, number];

const POOL_LAYOUT = '[numPages, kvHeads, pageSize, headDim]';

function invalidDeviceValue(kernel: string, argument: string, expected: string, actual: string): never {
  throw new InvalidArgumentError('device value out of range', {
    operation: kernel,
    argument,
    expected,
    actual,
  });
}

/** kPages of rank 4 and vPages of its shape; returns the pool's shape. */
function checkPools(check: ArgCheck, kPages: TensorMeta, vPages: TensorMeta): PoolShape {
  check.rank('kPages', kPages, 4, POOL_LAYOUT);
  check.sameShape('vPages', vPages, kPages.shape, "'kPages'");
  return kPages.shape as PoolShape;
}

/** k or v rows for R tokens: [R, kvHeads·headDim] or [R, kvHeads, headDim]. */
function checkRows(
  check: ArgCheck,
  argument: string,
  rows: TensorMeta,
  tokens: number,
  pool: PoolShape,
): void {
  const [, kvHeads, , headDim] = pool;
  const flat = [tokens, kvHeads * headDim];
  const byHead = [tokens, kvHeads, headDim];
  check.shape(
    shapesEqual(rows.shape, flat) || shapesEqual(rows.shape, byHead),
    argument,
    "shape must be the R rows of 'slots' by the kvHeads and headDim of 'kPages'",
    `${formatShape(flat)} or ${formatShape(byHead)}`,
    rows.shape,
  );
}

function checkSlots(check: ArgCheck, slots: TensorMeta): number {
  check.rank('slots', slots, 1, '[R]');
  return slots.shape[0]!;
}

/** Writes row r of k and v (heads interleaved) at slots[r]; slots outside the pool write nothing. */
function writeRows(
  pool: PoolShape,
  kPages: HostArray,
  vPages: HostArray,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  slots: ArrayLike<number>,
): [Float32Array, Float32Array] {
  const [numPages, kvHeads, pageSize, headDim] = pool;
  const kOut = Float32Array.from(kPages);
  const vOut = Float32Array.from(vPages);
  const width = kvHeads * headDim;
  for (let r = 0; r < slots.length; r++) {
    const slot = Number(slots[r]);
    if (!(slot >= 0 && slot < numPages * pageSize)) continue;
    const page = Math.floor(slot / pageSize);
    const offset = slot % pageSize;
    for (let h = 0; h < kvHeads; h++) {
      const dst = ((page * kvHeads + h) * pageSize + offset) * headDim;
      const src = r * width + h * headDim;
      for (let d = 0; d < headDim; d++) {
        kOut[dst + d] = k[src + d]!;
        vOut[dst + d] = v[src + d]!;
      }
    }
  }
  return [kOut, vOut];
}

/** Reads and writes of R rows: k and v read, written at the cache's dtype, and the slots. */
function writeBytes(k: TensorMeta, v: TensorMeta, pages: TensorMeta, slots: TensorMeta): number {
  return bytesOf(k) + bytesOf(v) + bytesPerElement(pages.dtype) * 2 * sizeOf(v.shape) + bytesOf(slots);
}

// ---- paged KV write ------------------------------------------------------------------

const SLOTS_INPUT = {
  name: 'slots',
  dtypes: ['i32'],
  doc: '[R]: the slot of each row, page · pageSize + offset, read on the device; a slot outside 0 … numPages·pageSize − 1 (−1 for an idle row) writes nothing; two rows must not share a slot',
} as const;

const PAGE_INPUTS = [
  {
    name: 'kPages',
    dtypes: FLOAT,
    dtypeGroup: CACHES,
    doc: `${POOL_LAYOUT}, head-first inside a page; written in place; may be half under f32 rows`,
  },
  {
    name: 'vPages',
    dtypes: FLOAT,
    dtypeGroup: CACHES,
    doc: "the shape and type of 'kPages'; written in place",
  },
] as const;

export const pagedKvWrite = defineKernel<Record<string, never>>({
  name: 'pagedKvWrite',
  family: FAMILY,
  summary:
    'kPages[p, h, o, :] = k[r, h, :] and vPages[p, h, o, :] = v[r, h, :] for slots[r] = p·pageSize + o, in place',
  inputs: [
    { name: 'k', dtypes: FLOAT, doc: '[R, kvHeads·headDim] or [R, kvHeads, headDim]: one row per token' },
    { name: 'v', dtypes: FLOAT, doc: "the shape of 'k'" },
    ...PAGE_INPUTS,
    SLOTS_INPUT,
  ],
  attributes: {},
  infer([k, v, kPages, vPages, slots]) {
    const check = new ArgCheck('pagedKvWrite');
    const pool = checkPools(check, kPages!, vPages!);
    const tokens = checkSlots(check, slots!);
    checkRows(check, 'k', k!, tokens, pool);
    check.sameShape('v', v!, k!.shape, "'k'");
    return [
      { name: 'kPages', shape: kPages!.shape, dtype: kPages!.dtype, aliasOf: 2 },
      { name: 'vPages', shape: vPages!.shape, dtype: vPages!.dtype, aliasOf: 3 },
    ];
  },
  reference([k, v, kPages, vPages, slots], _attrs, io) {
    return writeRows(io.inputs[2]!.shape as PoolShape, kPages!, vPages!, k!, v!, slots!);
  },
  // Reads the rows and the slots and writes the rows; the rest of the pool is not touched.
  cost: ([k, v, kPages, , slots]) => ({ flops: 0, bytes: writeBytes(k!, v!, kPages!, slots!) }),
});

// ---- RoPE fused with the paged KV write -------------------------------------------------

type RopePagedKvWriteAttrs = { theta: number; layout: 'half' | 'interleaved' };

/**
 * A batched decode step's rope of q and k, each row at its own position, and
 * the paged writes of k and v, in one kernel. q is rotated for every row,
 * idle ones too; only the writes depend on the slot. With k and v left out,
 * q is a fused projection's output [R, heads + 2·kvHeads, headDim], read in
 * place, as ropeKvScatter reads it.
 */
export const ropePagedKvWrite = defineKernel<RopePagedKvWriteAttrs>({
  name: 'ropePagedKvWrite',
  family: FAMILY,
  summary:
    'rope(q) returned and rope(k), v written into kPages, vPages at slots, row r rotated by positions[r] (frequencies: scaled RoPE)',
  inputs: [
    {
      name: 'q',
      dtypes: FLOAT,
      doc: '[R, heads, headDim], headDim even; without k and v, [R, heads + 2·kvHeads, headDim]: q, k and v of each row in a row',
    },
    {
      name: 'k',
      dtypes: FLOAT,
      optional: true,
      doc: '[R, kvHeads·headDim] or [R, kvHeads, headDim]; left out with v where q holds both',
    },
    {
      name: 'v',
      dtypes: FLOAT,
      optional: true,
      doc: '[R, kvHeads·headDim] or [R, kvHeads, headDim]; left out with k',
    },
    ...PAGE_INPUTS,
    SLOTS_INPUT,
    {
      name: 'positions',
      dtypes: ['i32'],
      doc: '[R]: the position of each row, read on the device; a negative position leaves that row of q and its written k unspecified',
    },
    FREQUENCIES_INPUT,
  ],
  attributes: {
    theta: rope.attributes.theta,
    layout: rope.attributes.layout,
  },
  infer([q, k, v, kPages, vPages, slots, positions, frequencies]) {
    const check = new ArgCheck('ropePagedKvWrite');
    check.rank('q', q!, 3, '[R, heads, headDim]');
    const [tokens, , headDim] = q!.shape as [number, number, number];
    check.shape(headDim % 2 === 0, 'q', 'headDim must be even', 'an even last dimension', q!.shape);
    if (frequencies) checkFrequencies(check, frequencies.shape, headDim);
    const pool = checkPools(check, kPages!, vPages!);
    check.dim('kPages', kPages!, 3, headDim, "headDim of 'q'");
    check.sameShape('slots', slots!, [tokens], "[R] of 'q'");
    check.sameShape('positions', positions!, [tokens], "[R] of 'q'");
    const { fused, heads } = checkFusedQkv(check, [q, k, v], pool[1], "'kPages'");
    if (!fused) {
      checkRows(check, 'k', k!, tokens, pool);
      checkRows(check, 'v', v!, tokens, pool);
    }
    return [
      { name: 'q', shape: [tokens, heads, headDim], dtype: q!.dtype },
      { name: 'kPages', shape: kPages!.shape, dtype: kPages!.dtype, aliasOf: 3 },
      { name: 'vPages', shape: vPages!.shape, dtype: vPages!.dtype, aliasOf: 4 },
    ];
  },
  // The unfused chain in f32: rope of each row of q and k at its position, then the paged write.
  reference([q, k, v, kPages, vPages, slots, positions, frequencies], { theta, layout }, io) {
    const [tokens, heads, headDim] = io.outputs[0]!.shape as [number, number, number];
    const pool = io.inputs[3]!.shape as PoolShape;
    const kvHeads = pool[1];
    const [qRows, kRows, vRows] = k
      ? [q!, k, v!]
      : splitFused(q!, tokens, [heads, kvHeads, kvHeads], headDim);
    const ropeRows = (x: HostArray, rowHeads: number) => {
      const out = new Float32Array(tokens * rowHeads * headDim);
      const shape = [1, rowHeads, headDim];
      const size = rowHeads * headDim;
      for (let r = 0; r < tokens; r++) {
        const position = Number(positions![r]);
        if (!(position >= 0))
          invalidDeviceValue(
            'ropePagedKvWrite',
            'positions',
            `0 … ${2 ** 31 - 1}`,
            `${position} at row ${r}`,
          );
        const [y] = runReference(
          rope,
          [x.slice(r * size, (r + 1) * size), undefined, frequencies],
          { positionOffset: position, theta, inverse: false, layout },
          {
            inputs: [{ shape, dtype: 'f32' }, undefined, io.inputs[7]],
            outputs: [{ name: 'y', shape, dtype: 'f32' }],
          },
        );
        out.set(y as Float32Array, r * size);
      }
      return out;
    };
    const [kOut, vOut] = writeRows(pool, kPages!, vPages!, ropeRows(kRows, kvHeads), vRows, slots!);
    return [ropeRows(qRows, heads), kOut, vOut];
  },
  // Reads q, k, v, slots, positions (and the frequencies), writes q and the rows; rope's flops for q and k.
  cost([q, k, v, kPages, , slots, positions, frequencies]) {
    const [tokens, , headDim] = q!.shape as [number, number, number];
    // A fused q's k and v: its rows past q's own heads.
    const rows = k ? undefined : { shape: [tokens, kPages!.shape[1]! * headDim], dtype: q!.dtype };
    const [kRows, vRows] = rows ? [rows, rows] : [k!, v!];
    const qOwn = { shape: [sizeOf(q!.shape) - (rows ? 2 * sizeOf(rows.shape) : 0)], dtype: q!.dtype };
    return {
      flops: 3 * (sizeOf(qOwn.shape) + sizeOf(kRows.shape)),
      bytes:
        2 * bytesOf(qOwn) +
        writeBytes(kRows, vRows, kPages!, slots!) +
        bytesOf(positions) +
        bytesOf(frequencies),
    };
  },
});

// ---- paged attention (decode) -----------------------------------------------------------

type PagedAttentionAttrs = { scale: number };

/** Checks q, the pools, the block tables and the lengths; returns [B, heads, headDim] and the pool. */
function checkPagedAttention(
  [q, kPages, vPages, blockTables, seqLens]: readonly (TensorMeta | undefined)[],
  check: ArgCheck,
): { pool: PoolShape; maxPages: number } {
  check.rank('q', q!, 3, '[B, heads, headDim]');
  const [batch, heads, headDim] = q!.shape as [number, number, number];
  const pool = checkPools(check, kPages!, vPages!);
  check.dim('kPages', kPages!, 3, headDim, "headDim of 'q'");
  check.kvHeads('kPages', kPages!, 1, 'kvHeads', heads);
  check.shape(pool[2] >= 1, 'kPages', 'a page must hold at least one row', 'pageSize >= 1', kPages!.shape);
  check.rank('blockTables', blockTables!, 2, '[B, maxPagesPerSeq]');
  check.dim('blockTables', blockTables!, 0, batch, "B of 'q'");
  const maxPages = blockTables!.shape[1]!;
  check.shape(
    maxPages >= 1,
    'blockTables',
    'a sequence must have room for at least one page',
    'maxPagesPerSeq >= 1',
    blockTables!.shape,
  );
  check.sameShape('seqLens', seqLens!, [batch], "[B] of 'q'");
  return { pool, maxPages };
}

export const pagedAttention = defineKernel<PagedAttentionAttrs>({
  name: 'pagedAttention',
  family: FAMILY,
  summary:
    'out[b, h] = softmax(scale · q[b, h] · K_b[g]ᵀ) · V_b[g] over the seqLens[b] rows of sequence b, read through its block table; g = kv head of h',
  inputs: [
    { name: 'q', dtypes: FLOAT, doc: '[B, heads, headDim]: one query token per sequence' },
    {
      name: 'kPages',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: `${POOL_LAYOUT}; kvHeads divides heads; may be half under f32 'q'`,
    },
    { name: 'vPages', dtypes: FLOAT, dtypeGroup: CACHES, doc: "the shape and type of 'kPages'" },
    {
      name: 'blockTables',
      dtypes: ['i32'],
      doc: "[B, maxPagesPerSeq]: sequence b's row t lies in page blockTables[b, ⌊t / pageSize⌋] at offset t mod pageSize; entries past the length are not read",
    },
    {
      name: 'seqLens',
      dtypes: ['i32'],
      doc: "[B]: the rows each sequence attends to (its new token's included), read on the device; 0 (an idle row) leaves out[b] zero; a length past maxPagesPerSeq·pageSize or a page outside the pool reads nothing outside the pool and leaves out[b] unspecified",
    },
  ],
  attributes: {
    scale: { kind: 'number', default: 0, min: 0, finite: true, doc: 'score scale; 0 means 1/sqrt(headDim)' },
  },
  infer(inputs) {
    checkPagedAttention(inputs, new ArgCheck('pagedAttention'));
    const q = inputs[0]!;
    return [{ name: 'out', shape: q.shape, dtype: q.dtype }];
  },
  reference([q, kPages, vPages, blockTables, seqLens], attrs, io) {
    const [batch, heads, headDim] = io.outputs[0]!.shape as [number, number, number];
    const [numPages, kvHeads, pageSize] = io.inputs[1]!.shape as PoolShape;
    const maxPages = io.inputs[3]!.shape[1]!;
    const group = heads / kvHeads;
    const scale = attrs.scale === 0 ? 1 / Math.sqrt(headDim) : attrs.scale;
    const out = new Float32Array(batch * heads * headDim);
    const acc = new Float64Array(headDim);
    for (let b = 0; b < batch; b++) {
      const rows = Number(seqLens![b]);
      if (!(rows >= 0 && rows <= maxPages * pageSize))
        invalidDeviceValue('pagedAttention', 'seqLens', `0 … ${maxPages * pageSize}`, `${rows} at ${b}`);
      if (rows === 0) continue;
      // Gathers the sequence's rows of each kv head, then attends as over a contiguous cache.
      const pages = Math.ceil(rows / pageSize);
      const kRows = new Float64Array(kvHeads * rows * headDim);
      const vRows = new Float64Array(kvHeads * rows * headDim);
      for (let i = 0; i < pages; i++) {
        const page = Number(blockTables![b * maxPages + i]);
        if (!(page >= 0 && page < numPages))
          invalidDeviceValue(
            'pagedAttention',
            'blockTables',
            `0 … ${numPages - 1}`,
            `${page} at [${b}, ${i}]`,
          );
        const count = Math.min(pageSize, rows - i * pageSize);
        for (let g = 0; g < kvHeads; g++) {
          const src = (page * kvHeads + g) * pageSize * headDim;
          const dst = (g * rows + i * pageSize) * headDim;
          kRows.set(kPages!.subarray(src, src + count * headDim) as ArrayLike<number>, dst);
          vRows.set(vPages!.subarray(src, src + count * headDim) as ArrayLike<number>, dst);
        }
      }
      const weights = new Float64Array(rows);
      for (let h = 0; h < heads; h++) {
        const kv = Math.floor(h / group) * rows * headDim;
        attendRows(q!, (b * heads + h) * headDim, kRows, vRows, kv, rows, headDim, scale, out, weights, acc);
      }
    }
    return [out];
  },
  cost([q, kPages, , blockTables, seqLens]) {
    const [batch, heads, headDim] = q!.shape as [number, number, number];
    const [, kvHeads, pageSize] = kPages!.shape as PoolShape;
    // Lengths on the device are unknown here: count every page of the block tables, their bound.
    const rows = batch * blockTables!.shape[1]! * pageSize;
    return {
      // q·k and the weighted sum of v (2 flops per multiply-add each), plus max, exp and sum per score.
      flops: heads * rows * (4 * headDim + 3),
      bytes:
        2 * bytesOf(q) +
        bytesOf(blockTables) +
        bytesOf(seqLens) +
        2 * bytesPerElement(kPages!.dtype) * kvHeads * rows * headDim,
    };
  },
});
