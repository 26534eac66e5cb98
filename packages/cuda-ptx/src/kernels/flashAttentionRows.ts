import type { KernelBuilder } from '../ptx/kernel.js';
import { type ParamHandles, PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import type { EntryParamType } from '../ptx/types.js';
import { loadParams } from './entryParams.js';

// flashAttention and its backward in f32, four threads a row: thread (r, c)
// holds dimensions c, c + 4, … of its row, and dot products are summed over
// the four by two shuffles, so that a row's accumulators (up to four rows of
// headDim in the key pass) stay in registers. The rows of a block are 64
// consecutive tokens of one (batch, head); it walks the other side's rows
// (K and V, or q and dOut) 32 at a time through shared memory, each row read
// from global memory once per block, and every row of the block reads the
// same tile row at each step (a broadcast).
// The backward is FlashAttention-2's: a pass per query row gives dq (and
// D = rowsum(dOut ∘ out), which it needs anyway), then a pass per key row
// loops over the later queries of its kv head's query heads for dk and dv.
// dq in a pass of its own rather than by atomics from the key pass: every
// key row would add into every later query row, T²/2 f32 atomics a head
// whose order, and so whose rounding, changes from run to run.

/** Rows (tokens) a block. */
export const FLASH_ROWS = 64;
/** Threads a row. */
const LANES = 4;
export const FLASH_THREADS = FLASH_ROWS * LANES;
/** Accumulators a thread holds grow with headDim: past this they spill to local memory. */
export const FLASH_MAX_HEAD_DIM = 128;

export const FLASH_FORWARD_ENTRY = 'flash_attention_forward';
export const FLASH_DQ_ENTRY = 'flash_attention_dq';
export const FLASH_DKDV_ENTRY = 'flash_attention_dkdv';

/** Shapes every flash entry takes. */
export const DIMS = {
  tokens: 'u32',
  batch: 'u32',
  nHeads: 'u32',
  group: 'u32',
  /** scale · log2(e): scores become base-2 exponents in one multiply. */
  scaleLog2: 'f32',
  scale: 'f32',
} as const;

export const FORWARD_PARAMS = { q: 'ptr', k: 'ptr', v: 'ptr', out: 'ptr', lse: 'ptr', ...DIMS } as const;
export const DQ_PARAMS = {
  q: 'ptr',
  k: 'ptr',
  v: 'ptr',
  out: 'ptr',
  dOut: 'ptr',
  lse: 'ptr',
  dq: 'ptr',
  delta: 'ptr',
  ...DIMS,
} as const;
export const DKDV_PARAMS = {
  q: 'ptr',
  k: 'ptr',
  v: 'ptr',
  dOut: 'ptr',
  lse: 'ptr',
  delta: 'ptr',
  dk: 'ptr',
  dv: 'ptr',
  ...DIMS,
} as const;

export function flashKey(entry: string, headDim: number): string {
  return `flashAttention/${entry}/d${headDim}`;
}

export interface Dims {
  readonly tokens: R32;
  readonly batch: R32;
  readonly nHeads: R32;
  readonly group: R32;
  readonly scaleLog2: F32;
  readonly scale: F32;
  /** nHeads / group. */
  readonly nKvHeads: R32;
}

export function loadDims(k: KernelBuilder, p: ParamHandles<typeof DIMS>): Dims {
  const { tokens, batch, nHeads } = loadParams(k, p, 'tokens', 'batch', 'nHeads');
  const { group, scaleLog2, scale } = loadParams(k, p, 'group', 'scaleLog2', 'scale');
  const nKvHeads = k.div('u32', k.reg('u32'), nHeads, group);
  return { tokens, batch, nHeads, group, scaleLog2, scale, nKvHeads };
}

/** The element index of row `token` of head `head` in a [T, B, heads, headDim] tensor. */
function rowElement(
  k: KernelBuilder,
  token: R32,
  b: R32,
  head: R32,
  dims: Dims,
  heads: R32,
  hd: number,
): R32 {
  const row = k.madLo('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), token, dims.batch, b), heads, head);
  return k.mulLo('u32', k.reg('u32'), row, hd);
}

/** The index of (token, b, head) in lse and delta [T, B, nHeads]. */
function rowIndex(k: KernelBuilder, token: R32, b: R32, head: R32, dims: Dims): R32 {
  return k.madLo('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), token, dims.batch, b), dims.nHeads, head);
}

/** The dimensions a thread holds: c + 4i for i < count, where `inside[i]` (undefined: always) holds. */
interface Lanes {
  readonly col: R32;
  readonly inside: readonly (Pred | undefined)[];
}

function lanesOf(k: KernelBuilder, hd: number): Lanes {
  const col = k.and('b32', k.reg('u32'), k.tid(), LANES - 1);
  const inside = Array.from({ length: Math.ceil(hd / LANES) }, (_, i) =>
    LANES * i + LANES - 1 < hd
      ? undefined
      : k.setp('lt', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), col, LANES * i), hd),
  );
  return { col, inside };
}

/** Runs `body` where `a` and `b` (either may be absent) both hold. */
function where(k: KernelBuilder, a: Pred | undefined, b: Pred | undefined, body: () => void): void {
  const p = a && b ? k.and('pred', k.reg('pred'), a, b) : (a ?? b);
  if (p) k.predicated(p, body);
  else body();
}

/** This thread's dimensions of a row (`at` is the row's address plus the thread's column), zeros where `ok` fails. */
function loadRow(k: KernelBuilder, lanes: Lanes, at: R64, ok?: Pred): F32[] {
  return lanes.inside.map((inside, i) => {
    const r = k.mov('f32', k.reg('f32'), 0);
    where(k, ok, inside, () => k.ldGlobal('f32', r, addr(at, 4 * LANES * i), { nc: true }));
    return r;
  });
}

/** Σ_d regs[d] · row[d] over the row's four threads, for a tile row at shared address `at` (plus the thread's column). */
function dotTile(k: KernelBuilder, regs: readonly F32[], at: R32): F32 {
  const sum = k.mov('f32', k.reg('f32'), 0);
  regs.forEach((x, i) => {
    k.fma('f32', sum, x, k.ldShared('f32', k.reg('f32'), addr(at, 4 * LANES * i)), sum);
  });
  for (const offset of [1, 2])
    k.add('f32', sum, sum, k.shflSync('bfly', k.reg('f32'), sum, offset), { rnd: 'rn' });
  return sum;
}

/** acc[d] += w · row[d] for a tile row at shared address `at` (plus the thread's column). */
function axpyTile(k: KernelBuilder, acc: readonly F32[], w: F32, at: R32): void {
  acc.forEach((a, i) => {
    k.fma('f32', a, w, k.ldShared('f32', k.reg('f32'), addr(at, 4 * LANES * i)), a);
  });
}

function storeRow(k: KernelBuilder, lanes: Lanes, at: R64, values: readonly F32[], ok: Pred): void {
  values.forEach((x, i) => {
    where(k, ok, lanes.inside[i], () => k.stGlobal('f32', addr(at, 4 * LANES * i), x));
  });
}

/** This thread's first element of the row at `element`. */
function mine(k: KernelBuilder, lanes: Lanes, element: R32): R32 {
  return k.add('u32', k.reg('u32'), element, lanes.col);
}

function zeros(k: KernelBuilder, lanes: Lanes): F32[] {
  return lanes.inside.map(() => k.mov('f32', k.reg('f32'), 0));
}

/**
 * The block's rows: 64 tokens of head ctaid.y % heads of
 * batch item ctaid.y / heads, where `heads` is nHeads (query rows) or
 * nKvHeads (key rows).
 */
function blockRows(k: KernelBuilder, dims: Dims, heads: R32, queries: boolean) {
  // Query blocks of later tokens see more keys, key blocks of earlier tokens more queries: the longest start first.
  const tile = queries
    ? k.sub('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), k.nctaid('x'), 1), k.ctaid('x'))
    : k.ctaid('x');
  const first = k.mulLo('u32', k.reg('u32'), tile, FLASH_ROWS);
  const token = k.add('u32', k.reg('u32'), first, k.shr('u32', k.reg('u32'), k.tid(), 2));
  const bh = k.ctaid('y');
  const b = k.div('u32', k.reg('u32'), bh, heads);
  const head = k.sub('u32', k.reg('u32'), bh, k.mulLo('u32', k.reg('u32'), b, heads));
  const inside = k.setp('lt', 'u32', k.reg('pred'), token, dims.tokens);
  return { first, token, b, head, inside };
}

/** Other-side rows a shared tile holds. */
const TILE = 32;

/** Where a tile walk reads its rows: two global arrays, and per row its element index there (its dimension 0). */
interface TileSource {
  readonly a: R64;
  readonly b: R64;
  readonly element: (r: R32) => R32;
  /** The dk/dv pass's lse and D of each row, by their index in [T, B, nHeads]. */
  readonly values?: { readonly lse: R64; readonly delta: R64; readonly index: (r: R32) => R32 };
}

/**
 * Walks rows 0 … count − 1 of `source` TILE at a time: the block copies a
 * tile of both arrays into shared memory (zeros past `count`), then `body`
 * runs for each of its rows with the row's shared addresses (this thread's
 * column added) and, where `values` are given, its lse and D.
 */
function forEachTile(
  k: KernelBuilder,
  lanes: Lanes,
  hd: number,
  count: R32,
  source: TileSource,
  body: (a: R32, b: R32, r: R32, values: { lse: F32; delta: F32 } | undefined) => void,
): void {
  // Padding past each array: the last row's lanes read up to three words past its headDim.
  const words = TILE * hd;
  const [ta, tb] = ['flash_a', 'flash_b'].map((name) =>
    k.sharedAddress(k.sharedArray(name, 'f32', words + LANES)),
  );
  const tv = source.values ? k.sharedAddress(k.sharedArray('flash_values', 'f32', 2 * TILE)) : undefined;
  const tid = k.tid();
  const r0 = k.reg('u32');
  k.forRange(r0, 0, count, TILE, () => {
    k.barSync();
    for (let i = 0; i < Math.ceil(words / FLASH_THREADS); i++) {
      const e = k.add('u32', k.reg('u32'), tid, i * FLASH_THREADS);
      const row = k.div('u32', k.reg('u32'), e, hd);
      const r = k.add('u32', k.reg('u32'), r0, row);
      let ok = k.setp('lt', 'u32', k.reg('pred'), r, count);
      const inside =
        (i + 1) * FLASH_THREADS > words ? k.setp('lt', 'u32', k.reg('pred'), e, words) : undefined;
      if (inside) ok = k.and('pred', k.reg('pred'), ok, inside);
      const at = k.add(
        'u32',
        k.reg('u32'),
        source.element(r),
        k.sub('u32', k.reg('u32'), e, k.mulLo('u32', k.reg('u32'), row, hd)),
      );
      const [va, vb] = [source.a, source.b].map((base) => {
        const v = k.mov('f32', k.reg('f32'), 0);
        k.predicated(ok, () => k.ldGlobal('f32', v, k.elementAddress(base, at, 4), { nc: true }));
        return v;
      });
      where(k, inside, undefined, () => {
        k.stShared('f32', k.madLo('u32', k.reg('u32'), e, 4, ta!), va!);
        k.stShared('f32', k.madLo('u32', k.reg('u32'), e, 4, tb!), vb!);
      });
    }
    if (source.values && tv) {
      const values = source.values;
      const r = k.add('u32', k.reg('u32'), r0, tid);
      const mine = k.setp('lt', 'u32', k.reg('pred'), tid, TILE);
      const ok = k.and('pred', k.reg('pred'), mine, k.setp('lt', 'u32', k.reg('pred'), r, count));
      const index = values.index(r);
      const [lse, delta] = [values.lse, values.delta].map((base) => {
        const v = k.mov('f32', k.reg('f32'), 0);
        k.predicated(ok, () => k.ldGlobal('f32', v, k.elementAddress(base, index, 4)));
        return v;
      });
      k.predicated(mine, () => {
        k.stShared('f32', k.madLo('u32', k.reg('u32'), tid, 4, tv), lse!);
        k.stShared('f32', addr(k.madLo('u32', k.reg('u32'), tid, 4, tv), 4 * TILE), delta!);
      });
    }
    k.barSync();
    const colBytes = k.shl('b32', k.reg('u32'), lanes.col, 2);
    const a = k.add('u32', k.reg('u32'), ta!, colBytes);
    const b = k.add('u32', k.reg('u32'), tb!, colBytes);
    const v = tv ? k.mov('u32', k.reg('u32'), tv) : undefined;
    const x = k.reg('u32');
    k.forRange(x, 0, TILE, 1, () => {
      const r = k.add('u32', k.reg('u32'), r0, x);
      const values = v
        ? {
            lse: k.ldShared('f32', k.reg('f32'), v),
            delta: k.ldShared('f32', k.reg('f32'), addr(v, 4 * TILE)),
          }
        : undefined;
      body(a, b, r, values);
      k.add('u32', a, a, 4 * hd);
      k.add('u32', b, b, 4 * hd);
      if (v) k.add('u32', v, v, 4);
    });
  });
}

/** The query passes' walk: keys 0 … the block's last token of the row's kv head, with whether each is causal for this row. */
function forEachKey(
  k: KernelBuilder,
  dims: Dims,
  rows: ReturnType<typeof blockRows>,
  hd: number,
  lanes: Lanes,
  [a, b]: readonly [R64, R64],
  body: (kAt: R32, vAt: R32, causal: Pred) => void,
): void {
  const g = k.div('u32', k.reg('u32'), rows.head, dims.group);
  const row0 = rowElement(k, k.mov('u32', k.reg('u32'), 0), rows.b, g, dims, dims.nKvHeads, hd);
  const stride = k.mulLo('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), dims.batch, dims.nKvHeads), hd);
  const end = k.min('u32', k.reg('u32'), dims.tokens, k.add('u32', k.reg('u32'), rows.first, FLASH_ROWS));
  const element = (r: R32) => k.madLo('u32', k.reg('u32'), r, stride, row0);
  forEachTile(k, lanes, hd, end, { a, b, element }, (kAt, vAt, j) =>
    body(kAt, vAt, k.setp('le', 'u32', k.reg('pred'), j, rows.token)),
  );
}

/** What every flash entry's body starts from: its shapes, lanes, rows and first element. */
interface RowBlock {
  readonly dims: Dims;
  readonly lanes: Lanes;
  readonly rows: ReturnType<typeof blockRows>;
  readonly element: R32;
}

/**
 * A module of one flash entry over FLASH_ROWS-token blocks: query rows of
 * the nHeads heads (`queries`), else key rows of the nKvHeads heads.
 */
function rowsModule<P extends typeof DIMS & Record<string, EntryParamType>>(
  entry: string,
  params: P,
  hd: number,
  queries: boolean,
  body: (k: KernelBuilder, p: ParamHandles<P>, block: RowBlock) => void,
): PtxModule {
  const m = new PtxModule();
  m.entry(
    entry,
    params,
    (k, p) => {
      const dims = loadDims(k, p);
      const lanes = lanesOf(k, hd);
      const heads = queries ? dims.nHeads : dims.nKvHeads;
      const rows = blockRows(k, dims, heads, queries);
      const element = mine(k, lanes, rowElement(k, rows.token, rows.b, rows.head, dims, heads, hd));
      body(k, p, { dims, lanes, rows, element });
    },
    { maxThreadsPerBlock: FLASH_THREADS },
  );
  return m;
}

export function flashForwardModule(hd: number): PtxModule {
  return rowsModule(FLASH_FORWARD_ENTRY, FORWARD_PARAMS, hd, true, (k, p, { dims, lanes, rows, element }) => {
    const q = loadRow(k, lanes, k.elementAddress(k.globalPointer(p.q), element, 4), rows.inside);
    const mRow = k.mov('f32', k.reg('f32'), Number.NEGATIVE_INFINITY);
    const l = k.mov('f32', k.reg('f32'), 0);
    const acc = zeros(k, lanes);
    forEachKey(k, dims, rows, hd, lanes, [k.globalPointer(p.k), k.globalPointer(p.v)], (kAt, vAt, causal) => {
      const s = k.mul('f32', k.reg('f32'), dotTile(k, q, kAt), dims.scaleLog2, { rnd: 'rn' });
      k.selp('f32', s, s, Number.NEGATIVE_INFINITY, causal);
      // Key 0 is every row's: from the first step on the max is finite.
      const top = k.max('f32', k.reg('f32'), mRow, s);
      const rescale = k.ex2(k.reg('f32'), k.sub('f32', k.reg('f32'), mRow, top, { rnd: 'rn' }));
      const w = k.ex2(k.reg('f32'), k.sub('f32', k.reg('f32'), s, top, { rnd: 'rn' }));
      k.fma('f32', l, l, rescale, w);
      k.mov('f32', mRow, top);
      for (const a of acc) k.mul('f32', a, a, rescale, { rnd: 'rn' });
      axpyTile(k, acc, w, vAt);
    });
    const inv = k.rcp(k.reg('f32'), l, 'rn');
    storeRow(
      k,
      lanes,
      k.elementAddress(k.globalPointer(p.out), element, 4),
      acc.map((a) => k.mul('f32', a, a, inv, { rnd: 'rn' })),
      rows.inside,
    );
    // lse = ln(l) + max, the max back in natural units.
    const lse = k.mul(
      'f32',
      k.reg('f32'),
      k.add('f32', k.reg('f32'), k.lg2(k.reg('f32'), l), mRow),
      Math.LN2,
      {
        rnd: 'rn',
      },
    );
    const index = rowIndex(k, rows.token, rows.b, rows.head, dims);
    const first = k.setp('eq', 'u32', k.reg('pred'), lanes.col, 0);
    where(k, rows.inside, first, () =>
      k.stGlobal('f32', k.elementAddress(k.globalPointer(p.lse), index, 4), lse),
    );
  });
}

export function flashDqModule(hd: number): PtxModule {
  return rowsModule(FLASH_DQ_ENTRY, DQ_PARAMS, hd, true, (k, p, { dims, lanes, rows, element }) => {
    const at = (ptr: Parameters<typeof k.globalPointer>[0]) =>
      k.elementAddress(k.globalPointer(ptr), element, 4);
    const q = loadRow(k, lanes, at(p.q), rows.inside);
    const dOut = loadRow(k, lanes, at(p.dOut), rows.inside);
    const index = rowIndex(k, rows.token, rows.b, rows.head, dims);
    // D = rowsum(dOut ∘ out), kept for the key pass (out past the last row is never read: dOut is 0 there).
    const out = loadRow(k, lanes, at(p.out), rows.inside);
    const delta = k.mov('f32', k.reg('f32'), 0);
    out.forEach((o, i) => {
      k.fma('f32', delta, o, dOut[i]!, delta);
    });
    for (const offset of [1, 2])
      k.add('f32', delta, delta, k.shflSync('bfly', k.reg('f32'), delta, offset), { rnd: 'rn' });
    const lse2 = k.mov('f32', k.reg('f32'), 0);
    k.predicated(rows.inside, () => {
      k.ldGlobal('f32', lse2, k.elementAddress(k.globalPointer(p.lse), index, 4));
    });
    const first = k.setp('eq', 'u32', k.reg('pred'), lanes.col, 0);
    where(k, rows.inside, first, () =>
      k.stGlobal('f32', k.elementAddress(k.globalPointer(p.delta), index, 4), delta),
    );
    k.mul('f32', lse2, lse2, Math.LOG2E, { rnd: 'rn' });
    const dq = zeros(k, lanes);
    forEachKey(k, dims, rows, hd, lanes, [k.globalPointer(p.k), k.globalPointer(p.v)], (kAt, vAt, causal) => {
      const w = probability(k, dotTile(k, q, kAt), dims.scaleLog2, lse2, causal);
      const dp = dotTile(k, dOut, vAt);
      const ds = k.mul('f32', k.reg('f32'), w, k.sub('f32', k.reg('f32'), dp, delta, { rnd: 'rn' }), {
        rnd: 'rn',
      });
      axpyTile(k, dq, ds, kAt);
    });
    storeRow(
      k,
      lanes,
      at(p.dq),
      dq.map((x) => k.mul('f32', x, x, dims.scale, { rnd: 'rn' })),
      rows.inside,
    );
  });
}

/** P = 2^(s · scaleLog2 − lse · log2 e), 0 where the pair is not causal. */
function probability(k: KernelBuilder, dot: F32, scaleLog2: F32, lse2: F32, causal: Pred): F32 {
  const s = k.fma('f32', k.reg('f32'), dot, scaleLog2, k.neg('f32', k.reg('f32'), lse2));
  const w = k.ex2(k.reg('f32'), s);
  return k.selp('f32', w, w, 0, causal);
}

export function flashDkdvModule(hd: number): PtxModule {
  return rowsModule(FLASH_DKDV_ENTRY, DKDV_PARAMS, hd, false, (k, p, { dims, lanes, rows, element }) => {
    const kRow = loadRow(k, lanes, k.elementAddress(k.globalPointer(p.k), element, 4), rows.inside);
    const vRow = loadRow(k, lanes, k.elementAddress(k.globalPointer(p.v), element, 4), rows.inside);
    const dk = zeros(k, lanes);
    const dv = zeros(k, lanes);
    // Packed rows r = (i − first) · group + h of the queries i = first … T − 1 (queries before the
    // block's first key see none of its keys) and the kv head's query heads h.
    const count = k.mulLo(
      'u32',
      k.reg('u32'),
      k.sub('u32', k.reg('u32'), dims.tokens, rows.first),
      dims.group,
    );
    const place = (r: R32) => {
      const step = k.div('u32', k.reg('u32'), r, dims.group);
      const hh = k.sub('u32', k.reg('u32'), r, k.mulLo('u32', k.reg('u32'), step, dims.group));
      const token = k.add('u32', k.reg('u32'), rows.first, step);
      const head = k.madLo('u32', k.reg('u32'), rows.head, dims.group, hh);
      return { token, index: rowIndex(k, token, rows.b, head, dims) };
    };
    const source: TileSource = {
      a: k.globalPointer(p.q),
      b: k.globalPointer(p.dOut),
      element: (r) => k.mulLo('u32', k.reg('u32'), place(r).index, hd),
      values: {
        lse: k.globalPointer(p.lse),
        delta: k.globalPointer(p.delta),
        index: (r) => place(r).index,
      },
    };
    forEachTile(k, lanes, hd, count, source, (qAt, dOutAt, r, values) => {
      const later = k.setp('ge', 'u32', k.reg('pred'), place(r).token, rows.token);
      const causal = k.and('pred', k.reg('pred'), later, k.setp('lt', 'u32', k.reg('pred'), r, count));
      const lse2 = k.mul('f32', k.reg('f32'), values!.lse, Math.LOG2E, { rnd: 'rn' });
      const w = probability(k, dotTile(k, kRow, qAt), dims.scaleLog2, lse2, causal);
      const dp = dotTile(k, vRow, dOutAt);
      const ds = k.mul('f32', k.reg('f32'), w, k.sub('f32', k.reg('f32'), dp, values!.delta, { rnd: 'rn' }), {
        rnd: 'rn',
      });
      axpyTile(k, dv, w, dOutAt);
      axpyTile(k, dk, ds, qAt);
    });
    for (const x of dk) k.mul('f32', x, x, dims.scale, { rnd: 'rn' });
    storeRow(k, lanes, k.elementAddress(k.globalPointer(p.dk), element, 4), dk, rows.inside);
    storeRow(k, lanes, k.elementAddress(k.globalPointer(p.dv), element, 4), dv, rows.inside);
  });
}
