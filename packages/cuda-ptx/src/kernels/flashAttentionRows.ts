import type { KernelBuilder } from '../ptx/kernel.js';
import { type ParamHandles, PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';

// flashAttention and its backward in f32, four threads a row: thread (r, c)
// holds dimensions c, c + 4, … of its row, and dot products are summed over
// the four by two shuffles, so that a row's accumulators (up to four rows of
// headDim in the key pass) stay in registers. The rows of a block are 64
// consecutive tokens of one (batch, head): at each step of the loop over the
// other side's tokens they all read the same K/V (or q/dOut) row, a broadcast
// load, so every such row is read once per 64 rows rather than once per row,
// without shared memory or barriers.
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
const DIMS = {
  tokens: 'u32',
  batch: 'u32',
  nHeads: 'u32',
  group: 'u32',
  /** scale · log2(e): scores become base-2 exponents in one multiply. */
  scaleLog2: 'f32',
  scale: 'f32',
} as const;

const FORWARD_PARAMS = { q: 'ptr', k: 'ptr', v: 'ptr', out: 'ptr', lse: 'ptr', ...DIMS } as const;
const DQ_PARAMS = {
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
const DKDV_PARAMS = {
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

interface Dims {
  readonly tokens: R32;
  readonly batch: R32;
  readonly nHeads: R32;
  readonly group: R32;
  readonly scaleLog2: F32;
  readonly scale: F32;
  /** nHeads / group. */
  readonly nKvHeads: R32;
}

function loadDims(k: KernelBuilder, p: ParamHandles<typeof DIMS>): Dims {
  const tokens = k.ldParam(p.tokens);
  const batch = k.ldParam(p.batch);
  const nHeads = k.ldParam(p.nHeads);
  const group = k.ldParam(p.group);
  const scaleLog2 = k.ldParam(p.scaleLog2);
  const scale = k.ldParam(p.scale);
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

/** Σ_d regs[d] · row[d] over the row's four threads, for a row read from global memory. */
function dotRow(k: KernelBuilder, lanes: Lanes, regs: readonly F32[], at: R64): F32 {
  const sum = k.mov('f32', k.reg('f32'), 0);
  loadRow(k, lanes, at).forEach((x, i) => {
    k.fma('f32', sum, regs[i]!, x, sum);
  });
  for (const offset of [1, 2])
    k.add('f32', sum, sum, k.shflSync('bfly', k.reg('f32'), sum, offset), { rnd: 'rn' });
  return sum;
}

/** acc[d] += w · row[d] for a row read from global memory. */
function axpyRow(k: KernelBuilder, lanes: Lanes, acc: readonly F32[], w: F32, at: R64): void {
  loadRow(k, lanes, at).forEach((x, i) => {
    k.fma('f32', acc[i]!, w, x, acc[i]!);
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
 * The block's rows: tokens ctaid.x · 64 + tid of head ctaid.y % heads of
 * batch item ctaid.y / heads, where `heads` is nHeads (query rows) or
 * nKvHeads (key rows).
 */
function blockRows(k: KernelBuilder, dims: Dims, heads: R32) {
  const first = k.mulLo('u32', k.reg('u32'), k.ctaid('x'), FLASH_ROWS);
  const token = k.add('u32', k.reg('u32'), first, k.shr('u32', k.reg('u32'), k.tid(), 2));
  const bh = k.ctaid('y');
  const b = k.div('u32', k.reg('u32'), bh, heads);
  const head = k.sub('u32', k.reg('u32'), bh, k.mulLo('u32', k.reg('u32'), b, heads));
  const inside = k.setp('lt', 'u32', k.reg('pred'), token, dims.tokens);
  return { first, token, b, head, inside };
}

/** Query rows' loop over keys 0 … the block's last token, with each step's key row address and whether it is causal for this row. */
function forEachKey(
  k: KernelBuilder,
  dims: Dims,
  rows: ReturnType<typeof blockRows>,
  hd: number,
  lanes: Lanes,
  kv: readonly R64[],
  body: (at: readonly R64[], causal: Pred) => void,
): void {
  const g = k.div('u32', k.reg('u32'), rows.head, dims.group);
  const row0 = rowElement(k, k.mov('u32', k.reg('u32'), 0), rows.b, g, dims, dims.nKvHeads, hd);
  const start = k.add('u32', k.reg('u32'), row0, lanes.col);
  const at = kv.map((base) => k.elementAddress(base, start, 4));
  const stride = k.mulLo(
    'u32',
    k.reg('u32'),
    k.mulLo('u32', k.reg('u32'), dims.batch, dims.nKvHeads),
    4 * hd,
  );
  const stride64 = k.cvt('u64', 'u32', k.reg('u64'), stride);
  const end = k.min('u32', k.reg('u32'), dims.tokens, k.add('u32', k.reg('u32'), rows.first, FLASH_ROWS));
  const j = k.reg('u32');
  k.forRange(j, 0, end, 1, () => {
    body(at, k.setp('le', 'u32', k.reg('pred'), j, rows.token));
    for (const a of at) k.add('u64', a, a, stride64);
  });
}

export function flashForwardModule(hd: number): PtxModule {
  const m = new PtxModule();
  m.entry(
    FLASH_FORWARD_ENTRY,
    FORWARD_PARAMS,
    (k, p) => {
      const dims = loadDims(k, p);
      const lanes = lanesOf(k, hd);
      const rows = blockRows(k, dims, dims.nHeads);
      const element = mine(k, lanes, rowElement(k, rows.token, rows.b, rows.head, dims, dims.nHeads, hd));
      const q = loadRow(k, lanes, k.elementAddress(k.globalPointer(p.q), element, 4), rows.inside);
      const mRow = k.mov('f32', k.reg('f32'), Number.NEGATIVE_INFINITY);
      const l = k.mov('f32', k.reg('f32'), 0);
      const acc = zeros(k, lanes);
      forEachKey(
        k,
        dims,
        rows,
        hd,
        lanes,
        [k.globalPointer(p.k), k.globalPointer(p.v)],
        ([kAt, vAt], causal) => {
          const s = k.mul('f32', k.reg('f32'), dotRow(k, lanes, q, kAt!), dims.scaleLog2, { rnd: 'rn' });
          k.selp('f32', s, s, Number.NEGATIVE_INFINITY, causal);
          // Key 0 is every row's: from the first step on the max is finite.
          const top = k.max('f32', k.reg('f32'), mRow, s);
          const rescale = k.ex2(k.reg('f32'), k.sub('f32', k.reg('f32'), mRow, top, { rnd: 'rn' }));
          const w = k.ex2(k.reg('f32'), k.sub('f32', k.reg('f32'), s, top, { rnd: 'rn' }));
          k.fma('f32', l, l, rescale, w);
          k.mov('f32', mRow, top);
          for (const a of acc) k.mul('f32', a, a, rescale, { rnd: 'rn' });
          axpyRow(k, lanes, acc, w, vAt!);
        },
      );
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
    },
    { maxThreadsPerBlock: FLASH_THREADS },
  );
  return m;
}

export function flashDqModule(hd: number): PtxModule {
  const m = new PtxModule();
  m.entry(
    FLASH_DQ_ENTRY,
    DQ_PARAMS,
    (k, p) => {
      const dims = loadDims(k, p);
      const lanes = lanesOf(k, hd);
      const rows = blockRows(k, dims, dims.nHeads);
      const element = mine(k, lanes, rowElement(k, rows.token, rows.b, rows.head, dims, dims.nHeads, hd));
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
      forEachKey(
        k,
        dims,
        rows,
        hd,
        lanes,
        [k.globalPointer(p.k), k.globalPointer(p.v)],
        ([kAt, vAt], causal) => {
          const w = probability(k, dotRow(k, lanes, q, kAt!), dims.scaleLog2, lse2, causal);
          const dp = dotRow(k, lanes, dOut, vAt!);
          const ds = k.mul('f32', k.reg('f32'), w, k.sub('f32', k.reg('f32'), dp, delta, { rnd: 'rn' }), {
            rnd: 'rn',
          });
          axpyRow(k, lanes, dq, ds, kAt!);
        },
      );
      storeRow(
        k,
        lanes,
        at(p.dq),
        dq.map((x) => k.mul('f32', x, x, dims.scale, { rnd: 'rn' })),
        rows.inside,
      );
    },
    { maxThreadsPerBlock: FLASH_THREADS },
  );
  return m;
}

/** P = 2^(s · scaleLog2 − lse · log2 e), 0 where the pair is not causal. */
function probability(k: KernelBuilder, dot: F32, scaleLog2: F32, lse2: F32, causal: Pred): F32 {
  const s = k.fma('f32', k.reg('f32'), dot, scaleLog2, k.neg('f32', k.reg('f32'), lse2));
  const w = k.ex2(k.reg('f32'), s);
  return k.selp('f32', w, w, 0, causal);
}

export function flashDkdvModule(hd: number): PtxModule {
  const m = new PtxModule();
  m.entry(
    FLASH_DKDV_ENTRY,
    DKDV_PARAMS,
    (k, p) => {
      const dims = loadDims(k, p);
      const lanes = lanesOf(k, hd);
      const rows = blockRows(k, dims, dims.nKvHeads);
      const element = mine(k, lanes, rowElement(k, rows.token, rows.b, rows.head, dims, dims.nKvHeads, hd));
      const kRow = loadRow(k, lanes, k.elementAddress(k.globalPointer(p.k), element, 4), rows.inside);
      const vRow = loadRow(k, lanes, k.elementAddress(k.globalPointer(p.v), element, 4), rows.inside);
      const dk = zeros(k, lanes);
      const dv = zeros(k, lanes);
      const [qBase, dOutBase, lseBase, deltaBase] = [p.q, p.dOut, p.lse, p.delta].map((x) =>
        k.globalPointer(x),
      );
      // Queries before the block's first key see none of its keys.
      const i = k.reg('u32');
      k.forRange(i, rows.first, dims.tokens, 1, () => {
        const causal = k.setp('ge', 'u32', k.reg('pred'), i, rows.token);
        const hh = k.reg('u32');
        k.forRange(hh, 0, dims.group, 1, () => {
          const head = k.madLo('u32', k.reg('u32'), rows.head, dims.group, hh);
          const index = rowIndex(k, i, rows.b, head, dims);
          const qElement = k.madLo('u32', k.reg('u32'), index, hd, lanes.col);
          const qAt = k.elementAddress(qBase!, qElement, 4);
          const dOutAt = k.elementAddress(dOutBase!, qElement, 4);
          const lse2 = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(lseBase!, index, 4), { nc: true });
          k.mul('f32', lse2, lse2, Math.LOG2E, { rnd: 'rn' });
          const delta = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(deltaBase!, index, 4));
          const w = probability(k, dotRow(k, lanes, kRow, qAt), dims.scaleLog2, lse2, causal);
          const dp = dotRow(k, lanes, vRow, dOutAt);
          const ds = k.mul('f32', k.reg('f32'), w, k.sub('f32', k.reg('f32'), dp, delta, { rnd: 'rn' }), {
            rnd: 'rn',
          });
          axpyRow(k, lanes, dv, w, dOutAt);
          axpyRow(k, lanes, dk, ds, qAt);
        });
      });
      for (const x of dk) k.mul('f32', x, x, dims.scale, { rnd: 'rn' });
      storeRow(k, lanes, k.elementAddress(k.globalPointer(p.dk), element, 4), dk, rows.inside);
      storeRow(k, lanes, k.elementAddress(k.globalPointer(p.dv), element, 4), dv, rows.inside);
    },
    { maxThreadsPerBlock: FLASH_THREADS },
  );
  return m;
}
