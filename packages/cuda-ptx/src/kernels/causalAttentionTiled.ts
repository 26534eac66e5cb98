import type { KernelBuilder } from '../ptx/kernel.js';
import { type ParamHandles, PtxModule, type PtxModuleOptions } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type SharedVar } from '../ptx/operands.js';
import { sharedTiles } from './common.js';
import { loadParams } from './entryParams.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES, storageKey, storeFromF32 } from './storage.js';

// causalAttention without tensor cores: f32 caches, head dimensions the mma
// kernel does not take, devices before sm_80. A FlashAttention-shaped tile
// loop in f32 FMA: a block holds 32 query rows and walks the cache 32 keys
// at a time through shared memory with an online softmax, so every K and V
// row is read once per 32 rows rather than once per query.

/** Query rows of a block: (token, head) pairs of one kv head, packed as in the mma kernel. */
export const TILED_ROWS = 32;
/** Keys per step. */
export const TILED_KEYS = 32;
/** Four threads a row: thread (r, c) scores keys c, c + 4, … and owns dimensions c, c + 4, …. */
export const TILED_THREADS = 128;
/** Accumulators a thread holds are headDim / 4: beyond this they would spill. */
export const TILED_MAX_HEAD_DIM = 256;
export const TILED_ENTRY = 'causal_attention_tiled';

export interface TiledAttentionConfig {
  readonly headDim: number;
  readonly q: FloatStorage;
  readonly cache: FloatStorage;
  /** out's storage (attrs.out); q's when absent. */
  readonly out?: FloatStorage;
}

export function tiledAttentionKey(c: TiledAttentionConfig): string {
  const out = c.out !== undefined && c.out !== c.q ? `/out_${c.out}` : '';
  return `causalAttention/tiled/d${c.headDim}${storageKey([c.q, c.cache])}${out}`;
}

/** q, K and V tiles of rows padded by one word (no bank conflicts down a column), then the probabilities. */
export function tiledSharedBytes(headDim: number): number {
  return 4 * (3 * TILED_ROWS * (headDim + 1) + TILED_ROWS * (TILED_KEYS + 1));
}

/** The parameters both causalAttention kernels take. */
export const CAUSAL_PARAMS = {
  q: 'ptr',
  kCache: 'ptr',
  vCache: 'ptr',
  out: 'ptr',
  tokens: 'u32',
  nHeads: 'u32',
  group: 'u32',
  maxSeq: 'u32',
  position: 'u32',
  /** scale · log2(e): scores become base-2 exponents in one multiply. */
  scaleLog2: 'f32',
} as const;

/** Where packed row `row` of kv head `kvHead` lies: its token and the element index of its q (and out) row. */
export function rowOf(
  k: KernelBuilder,
  row: R32,
  kvHead: R32,
  dims: { group: R32; nHeads: R32 },
  headDim: number,
): { token: R32; element: R32 } {
  const token = k.div('u32', k.reg('u32'), row, dims.group);
  const g = k.sub('u32', k.reg('u32'), row, k.mulLo('u32', k.reg('u32'), token, dims.group));
  const head = k.madLo('u32', k.reg('u32'), kvHead, dims.group, g);
  const element = k.mulLo(
    'u32',
    k.reg('u32'),
    k.madLo('u32', k.reg('u32'), token, dims.nHeads, head),
    headDim,
  );
  return { token, element };
}

/**
 * The row tile and kv head of a block of the grid (kv heads, tiles): the kv
 * heads of a tile are launched side by side, and the longest tiles (the
 * last rows, which see the most keys) first.
 */
function blockTile(k: KernelBuilder): { tile: R32; kvHead: R32 } {
  const tile = k.sub('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), k.nctaid('y'), 1), k.ctaid('y'));
  return { tile, kvHead: k.ctaid('x') };
}

/** The parameters and rows of a causalAttention block, loaded and derived the same way by both kernels. */
export interface CausalBlock {
  readonly maxSeq: R32;
  readonly position: R32;
  readonly scaleLog2: F32;
  readonly rowDims: { group: R32; nHeads: R32 };
  readonly kvHead: R32;
  /** The block's first packed row. */
  readonly row0: R32;
  /** Packed rows in all: tokens · group. */
  readonly rows: R32;
  /** Keys 0 … end − 1 serve some row of the block. */
  readonly end: R32;
}

/** Loads the scalar parameters and places a block of `tileRows` packed rows (see blockTile). */
export function causalBlock(
  k: KernelBuilder,
  p: ParamHandles<typeof CAUSAL_PARAMS>,
  tileRows: number,
): CausalBlock {
  const { tokens, nHeads, group } = loadParams(k, p, 'tokens', 'nHeads', 'group');
  const { maxSeq, position, scaleLog2 } = loadParams(k, p, 'maxSeq', 'position', 'scaleLog2');
  const { tile, kvHead } = blockTile(k);
  const row0 = k.mulLo('u32', k.reg('u32'), tile, tileRows);
  const rows = k.mulLo('u32', k.reg('u32'), tokens, group);
  const lastRow = k.min(
    'u32',
    k.reg('u32'),
    k.add('u32', k.reg('u32'), row0, tileRows - 1),
    k.sub('u32', k.reg('u32'), rows, 1),
  );
  const end = k.add(
    'u32',
    k.reg('u32'),
    k.add('u32', k.reg('u32'), position, k.div('u32', k.reg('u32'), lastRow, group)),
    1,
  );
  return { maxSeq, position, scaleLog2, rowDims: { group, nHeads }, kvHead, row0, rows, end };
}

/**
 * A module of one causalAttention entry of `threads`-thread blocks, whose
 * body gets the module's dynamic shared memory (`sharedAlign`-aligned).
 */
export function causalModule(
  entry: string,
  options: PtxModuleOptions,
  block: { readonly sharedAlign: number; readonly threads: number },
  body: (k: KernelBuilder, p: ParamHandles<typeof CAUSAL_PARAMS>, smem: SharedVar) => void,
): PtxModule {
  const m = new PtxModule(options);
  const smem = m.dynamicShared('smem', block.sharedAlign);
  m.entry(entry, CAUSAL_PARAMS, (k, p) => body(k, p, smem), { maxThreadsPerBlock: block.threads });
  return m;
}

export function tiledAttentionModule(c: TiledAttentionConfig): PtxModule {
  const hd = c.headDim;
  const pitch = 4 * (hd + 1);
  const tileBytes = TILED_ROWS * pitch;
  const qBytes = STORAGE_BYTES[c.q];
  const cacheBytes = STORAGE_BYTES[c.cache];
  const outType = c.out ?? c.q;
  const outBytes = STORAGE_BYTES[outType];
  const perThread = Math.ceil((TILED_ROWS * hd) / TILED_THREADS);
  const dims = Math.ceil(hd / 4);
  return causalModule(TILED_ENTRY, {}, { sharedAlign: 16, threads: TILED_THREADS }, (k, p, smem) => {
    const tid = k.tid();
    const r = k.shr('u32', k.reg('u32'), tid, 2);
    const col = k.and('b32', k.reg('u32'), tid, 3);
    const { maxSeq, position, scaleLog2, rowDims, kvHead, row0, rows, end } = causalBlock(k, p, TILED_ROWS);

    const [qS, kS, vS, pS] = sharedTiles(k, smem, tileBytes, 4);

    // Element e = row · hd + d of a tile is thread (e mod 128)'s, at shared word e + row (the padding).
    const tileElements = TILED_ROWS * hd;
    const eachElement = (body: (e: R32, row: R32, inside: Pred | undefined) => void) => {
      for (let i = 0; i < perThread; i++) {
        const e = k.add('u32', k.reg('u32'), tid, i * TILED_THREADS);
        const row = k.div('u32', k.reg('u32'), e, hd);
        const inside =
          (i + 1) * TILED_THREADS > tileElements
            ? k.setp('lt', 'u32', k.reg('pred'), e, tileElements)
            : undefined;
        body(e, row, inside);
      }
    };
    const sharedWord = (at: R32, e: R32, row: R32) =>
      k.madLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), e, row), 4, at);

    // The block's q rows (zeros past the last).
    const q = k.globalPointer(p.q);
    eachElement((e, row, inside) => {
      const packed = k.add('u32', k.reg('u32'), row0, row);
      const d = k.sub('u32', k.reg('u32'), e, k.mulLo('u32', k.reg('u32'), row, hd));
      const { element } = rowOf(k, packed, kvHead, rowDims, hd);
      let ok = k.setp('lt', 'u32', k.reg('pred'), packed, rows);
      if (inside) ok = k.and('pred', k.reg('pred'), ok, inside);
      const at = k.elementAddress(q, k.add('u32', k.reg('u32'), element, d), qBytes);
      const value = loadOneAsF32(k, c.q, at, ok);
      const store = () => k.stShared('f32', sharedWord(qS, e, row), value);
      if (inside) k.predicated(inside, store);
      else store();
    });

    // This thread's row.
    const myRow = k.add('u32', k.reg('u32'), row0, r);
    const mine = rowOf(k, myRow, kvHead, rowDims, hd);
    const limit = k.add('u32', k.reg('u32'), position, mine.token);
    const mRow = k.mov('f32', k.reg('f32'), Number.NEGATIVE_INFINITY);
    const lPart = k.mov('f32', k.reg('f32'), 0);
    const acc = Array.from({ length: dims }, () => k.mov('f32', k.reg('f32'), 0));

    const kvElement = k.mulLo('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), kvHead, maxSeq), hd);
    const kTile = k.elementAddress(k.globalPointer(p.kCache), kvElement, cacheBytes);
    const vTile = k.elementAddress(k.globalPointer(p.vCache), kvElement, cacheBytes);
    const endElements = k.mulLo('u32', k.reg('u32'), end, hd);
    const left = k.mov('u32', k.reg('u32'), endElements);
    const qRow = k.madLo('u32', k.reg('u32'), r, pitch, qS);
    const kRow = k.madLo('u32', k.reg('u32'), col, pitch, kS);
    const vCol = k.madLo('u32', k.reg('u32'), col, 4, vS);
    const pRow = k.madLo('u32', k.reg('u32'), r, 4 * (TILED_KEYS + 1), pS);
    const pMine = k.madLo('u32', k.reg('u32'), col, 4, pRow);
    const perKey = TILED_KEYS / 4;

    const j0 = k.reg('u32');
    k.forRange(j0, 0, end, TILED_KEYS, () => {
      // Every thread is done with the last step's tiles.
      k.barSync();
      eachElement((e, row, inside) => {
        // Rows past `end` read nothing: zeros, never the cache's next head or past its end.
        const ok = k.setp('lt', 'u32', k.reg('pred'), e, left);
        const kv = [kTile, vTile].map((t) =>
          loadOneAsF32(k, c.cache, k.elementAddress(t, e, cacheBytes), ok),
        );
        const store = () => {
          k.stShared('f32', sharedWord(kS, e, row), kv[0]!);
          k.stShared('f32', sharedWord(vS, e, row), kv[1]!);
        };
        if (inside) k.predicated(inside, store);
        else store();
      });
      k.barSync();

      // Scores of keys col + 4j, in base-2 units, masked past the row's last key.
      const s: F32[] = Array.from({ length: perKey }, () => k.mov('f32', k.reg('f32'), 0));
      for (let d = 0; d < hd; d++) {
        const qd = k.ldShared('f32', k.reg('f32'), addr(qRow, 4 * d));
        for (let j = 0; j < perKey; j++) {
          const kd = k.ldShared('f32', k.reg('f32'), addr(kRow, 4 * j * pitch + 4 * d));
          k.fma('f32', s[j]!, qd, kd, s[j]!);
        }
      }
      const key0 = k.add('u32', k.reg('u32'), j0, col);
      let top = mRow;
      s.forEach((x, j) => {
        const valid = k.setp('le', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), key0, 4 * j), limit);
        k.mul('f32', x, x, scaleLog2, { rnd: 'rn' });
        k.selp('f32', x, x, Number.NEGATIVE_INFINITY, valid);
        top = k.max('f32', k.reg('f32'), top, x);
      });
      for (const offset of [1, 2]) k.max('f32', top, top, k.shflSync('bfly', k.reg('f32'), top, offset));
      // Key 0 is every row's: from the first step on the max is finite.
      const rescale = k.ex2(k.reg('f32'), k.sub('f32', k.reg('f32'), mRow, top, { rnd: 'rn' }));
      k.mul('f32', lPart, lPart, rescale, { rnd: 'rn' });
      s.forEach((x, j) => {
        const w = k.ex2(k.reg('f32'), k.sub('f32', k.reg('f32'), x, top, { rnd: 'rn' }));
        k.add('f32', lPart, lPart, w, { rnd: 'rn' });
        k.stShared('f32', addr(pMine, 16 * j), w);
      });
      k.mov('f32', mRow, top);
      for (const a of acc) k.mul('f32', a, a, rescale, { rnd: 'rn' });
      // The row's four threads are one warp's: its barrier orders their P stores and loads.
      k.warpSync();
      for (let key = 0; key < TILED_KEYS; key++) {
        const w = k.ldShared('f32', k.reg('f32'), addr(pRow, 4 * key));
        // Past headDim the loads read padding (or the next tile): those sums are never stored.
        acc.forEach((a, i) => {
          const v = k.ldShared('f32', k.reg('f32'), addr(vCol, key * pitch + 16 * i));
          k.fma('f32', a, w, v, a);
        });
      }
      k.sub('u32', left, left, TILED_KEYS * hd);
      k.add('u64', kTile, kTile, TILED_KEYS * hd * cacheBytes);
      k.add('u64', vTile, vTile, TILED_KEYS * hd * cacheBytes);
    });

    for (const offset of [1, 2])
      k.add('f32', lPart, lPart, k.shflSync('bfly', k.reg('f32'), lPart, offset), { rnd: 'rn' });
    const out = k.globalPointer(p.out);
    const rowOk = k.setp('lt', 'u32', k.reg('pred'), myRow, rows);
    const outAt = k.elementAddress(out, k.add('u32', k.reg('u32'), mine.element, col), outBytes);
    acc.forEach((a, i) => {
      const value = k.div('f32', k.reg('f32'), a, lPart, 'rn');
      let ok = rowOk;
      if (4 * i + 3 >= hd) {
        const inside = k.setp('lt', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), col, 4 * i), hd);
        ok = k.and('pred', k.reg('pred'), rowOk, inside);
      }
      k.predicated(ok, () => storeFromF32(k, outType, addr(outAt, 4 * i * outBytes), value));
    });
  });
}
