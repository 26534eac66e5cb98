import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { type ParamHandles, PtxModule } from '../ptx/module.js';
import { addr, type F32, type R32, type R64, type SharedVar } from '../ptx/operands.js';
import type { EntryParamType } from '../ptx/types.js';
import { sharedTiles } from './common.js';
import { type DIMS, type Dims, FORWARD_PARAMS, loadDims } from './flashAttentionRows.js';
import {
  accumulatorsAsA,
  ldmatrixRoles,
  maskColumns,
  mmaProduct,
  onlineSoftmax,
  swizzled,
  TileFragments,
} from './mmaTiles.js';
import { loadAsF32 } from './storage.js';

// flashAttention under precision 'half' on tensor cores (sm_80 mma.sync
// m16n8k16, bf16 operands, f32 accumulators), FlashAttention-2 shaped: a
// block takes 64 consecutive tokens of one (batch, head) in 4 warps of 16
// rows and walks the keys of its kv head 64 at a time. q, k and v are f32 in
// global memory: each tile is rounded to bf16 as it is copied into shared
// memory (so the precision attribute costs no cast launches), and read back
// through ldmatrix. S = q·Kᵀ, the online softmax on S's accumulators, P
// rounded to bf16 as the A operand of O += P·V (V through ldmatrix.trans).
// Only the tile on the diagonal masks.

/** Tokens a block and a tile: 4 warps of 16. */
export const FLASH_MMA_ROWS = 64;
export const FLASH_MMA_THREADS = 128;
export const FLASH_MMA_HEAD_DIMS: readonly number[] = [64, 128];
export const FLASH_MMA_FORWARD_ENTRY = 'flash_attention_mma_forward';
/** The operand type of every product: precision 'half' rounds to bf16. */
export const FLASH_MMA_TYPE = 'bf16';

/** The lane's place in its block and the tile copies' and fragments' addressing, shared by the three kernels. */
export interface MmaBlock {
  readonly tid: R32;
  readonly warp: R32;
  /** The lane's rows in its warp's 16: groupId and groupId + 8. */
  readonly groupId: R32;
  /** Its first accumulator column: 2 · (lane & 3). */
  readonly colPair: R32;
  /** Row and chunk half of an A operand's x4 loads (16 rows a warp). */
  readonly aRow: R32;
  readonly aHalf: R32;
  /** Of a B operand stored as n rows of k, and as k rows of n (.trans). */
  readonly bRow: R32;
  readonly bHalf: R32;
  readonly bTransRow: R32;
  readonly bTransHalf: R32;
  readonly tile: TileFragments;
  /** The 16-byte chunks of a 64-row tile this thread copies: row, chunk, swizzled offset. */
  readonly chunks: readonly { row: R32; chunk: R32; shared: R32 }[];
}

export function mmaBlock(k: KernelBuilder, hd: number): MmaBlock {
  const rowBytes = hd * 2;
  const chunksPerRow = hd / 8;
  const tid = k.tid();
  const lane = k.and('b32', k.reg('u32'), tid, 31);
  const warp = k.shr('u32', k.reg('u32'), tid, 5);
  const { mj, lowBit, highBit } = ldmatrixRoles(k, lane);
  const chunks = Array.from({ length: (FLASH_MMA_ROWS * chunksPerRow) / FLASH_MMA_THREADS }, (_, i) => {
    const s = k.add('u32', k.reg('u32'), tid, i * FLASH_MMA_THREADS);
    const row = k.shr('u32', k.reg('u32'), s, Math.log2(chunksPerRow));
    const chunk = k.and('b32', k.reg('u32'), s, chunksPerRow - 1);
    return { row, chunk, shared: swizzled(k, rowBytes, row, chunk) };
  });
  const lowRow = k.madLo('u32', k.reg('u32'), lowBit, 8, mj);
  return {
    tid,
    warp,
    groupId: k.shr('u32', k.reg('u32'), lane, 2),
    colPair: k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), lane, 3), 1),
    aRow: k.madLo('u32', k.reg('u32'), warp, 16, lowRow),
    aHalf: highBit,
    bRow: k.madLo('u32', k.reg('u32'), highBit, 8, mj),
    bHalf: lowBit,
    bTransRow: lowRow,
    bTransHalf: highBit,
    tile: new TileFragments(k, rowBytes, hd / 16),
    chunks,
  };
}

/** One head of a [T, B, heads, headDim] f32 tensor: row t at element t · stride + head. */
export interface HeadRows {
  readonly base: R64;
  readonly head: R32;
  readonly stride: R32;
}

/**
 * Copies rows r0 … r0 + 63 of `src` into the swizzled tile at shared
 * address `dst`, rounded to bf16 (nearest even); rows from `count` on are
 * zeros. `visit` sees each chunk's f32 values (zeros past `count`) and its
 * row, for sums the caller needs of the rows.
 */
export function loadHalfTile(
  k: KernelBuilder,
  block: MmaBlock,
  dst: R32,
  src: HeadRows,
  r0: R32,
  count: R32,
  visit?: (values: readonly F32[], element: R32, row: R32, ok: ReturnType<KernelBuilder['setp']>) => void,
): void {
  for (const ch of block.chunks) {
    const r = k.add('u32', k.reg('u32'), r0, ch.row);
    const ok = k.setp('lt', 'u32', k.reg('pred'), r, count);
    const element = k.madLo(
      'u32',
      k.reg('u32'),
      r,
      src.stride,
      k.madLo('u32', k.reg('u32'), ch.chunk, 8, src.head),
    );
    const values = k.regs('f32', 8);
    loadAsF32(k, 'f32', values, k.elementAddress(src.base, element, 4), { ok });
    visit?.(values, element, ch.row, ok);
    const words = [0, 1, 2, 3].map((w) =>
      k.cvtPack(FLASH_MMA_TYPE, k.reg('u32'), values[2 * w]!, values[2 * w + 1]!),
    );
    k.stShared('b32', k.add('u32', k.reg('u32'), dst, ch.shared), words as unknown as Vec4<R32>);
  }
}

/**
 * The x4 A fragments of a warp's 16 rows of the tile at `tileBase`, by k
 * step: read now and held in registers where `hold`, else read at each use
 * (wide heads, whose accumulators need the registers).
 */
export function aOperand(
  k: KernelBuilder,
  block: MmaBlock,
  tileBase: R32,
  kSteps: number,
  hold = true,
): (kk: number) => Vec4<R32> {
  const bases = block.tile.bases(tileBase, block.aRow, block.aHalf);
  const read = (kk: number) => k.ldmatrix(4, k.regs('u32', 4), block.tile.at(bases, 0, kk));
  if (!hold) return read;
  const held = Array.from({ length: kSteps }, (_, kk) => read(kk));
  return (kk) => held[kk]!;
}

/** The block's (batch, head) of ctaid.y and its heads' strides and offsets. */
export function blockHead(k: KernelBuilder, hd: number, batch: R32, heads: R32) {
  const bh = k.ctaid('y');
  const b = k.div('u32', k.reg('u32'), bh, heads);
  const head = k.sub('u32', k.reg('u32'), bh, k.mulLo('u32', k.reg('u32'), b, heads));
  const stride = k.mulLo('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), batch, heads), hd);
  return { bh, b, head, stride, at: k.mulLo('u32', k.reg('u32'), bh, hd) };
}

/** Stores a warp's [16, headDim] accumulators × `factor` (undefined: 1) as f32 rows, row h at `element[h]` where `ok[h]`. */
export function storeRows(
  k: KernelBuilder,
  acc: readonly Vec4<F32>[],
  base: R64,
  element: readonly R32[],
  ok: readonly ReturnType<KernelBuilder['setp']>[],
  factor: readonly (F32 | undefined)[],
  colPair: R32,
): void {
  element.forEach((el, h) => {
    const at = k.elementAddress(base, k.add('u32', k.reg('u32'), el, colPair), 4);
    acc.forEach((r, j) => {
      const pair = [r[2 * h]!, r[2 * h + 1]!].map((x) =>
        factor[h] ? k.mul('f32', k.reg('f32'), x, factor[h]!, { rnd: 'rn' }) : x,
      );
      k.predicated(ok[h]!, () => k.stGlobal('f32', addr(at, 32 * j), pair as unknown as Vec2<F32>));
    });
  });
}

/** The lane's two rows of a 64-row tile from `r0`: r0 + 16 · warp + groupId, and 8 rows down. */
export function laneRows(k: KernelBuilder, block: MmaBlock, r0: R32): R32[] {
  const first = k.add('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), block.warp, 16, block.groupId), r0);
  return [first, k.add('u32', k.reg('u32'), first, 8)];
}

/**
 * A query block's tokens t0 … t0 + 63 (the last tokens see the most keys:
 * their blocks start first), its (batch, head), its kv head's offset and
 * stride, and the end of its keys.
 */
export function queryBlock(k: KernelBuilder, hd: number, dims: Dims) {
  const tile = k.sub('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), k.nctaid('x'), 1), k.ctaid('x'));
  const t0 = k.mulLo('u32', k.reg('u32'), tile, FLASH_MMA_ROWS);
  const qh = blockHead(k, hd, dims.batch, dims.nHeads);
  const g = k.div('u32', k.reg('u32'), qh.head, dims.group);
  const kvHead = k.mulLo('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), qh.b, dims.nKvHeads, g), hd);
  const kvStride = k.mulLo('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), dims.batch, dims.nKvHeads), hd);
  const end = k.min('u32', k.reg('u32'), dims.tokens, k.add('u32', k.reg('u32'), t0, FLASH_MMA_ROWS));
  return { t0, qh, kvHead, kvStride, end };
}

/** Where the key walk copies K's and V's tiles from, and to in shared memory. */
export interface KeyTiles {
  readonly kS: R32;
  readonly vS: R32;
  readonly kSrc: HeadRows;
  readonly vSrc: HeadRows;
}

/**
 * Walks the keys FLASH_MMA_ROWS at a time, j0 = 0 … end − 1: once every
 * warp is done with the last step's tiles, copies K's and V's tiles of rows
 * j0 … (zeros from `count` on), then runs `body`.
 */
export function forEachKeyTile(
  k: KernelBuilder,
  block: MmaBlock,
  tiles: KeyTiles,
  end: R32,
  count: R32,
  body: (j0: R32) => void,
): void {
  const j0 = k.reg('u32');
  k.forRange(j0, 0, end, FLASH_MMA_ROWS, () => {
    k.barSync();
    loadHalfTile(k, block, tiles.kS, tiles.kSrc, j0, count);
    loadHalfTile(k, block, tiles.vS, tiles.vSrc, j0, count);
    k.barSync();
    body(j0);
  });
}

/** q's tile and one K and one V tile. */
export function flashMmaForwardSharedBytes(hd: number): number {
  return 3 * FLASH_MMA_ROWS * hd * 2;
}

export function flashMmaKey(entry: string, hd: number): string {
  return `flashAttention/${entry}/d${hd}/bf16`;
}

/** What every tensor-core flash entry's body starts from. */
export interface MmaEntry {
  readonly dims: Dims;
  readonly block: MmaBlock;
  /** The module's dynamic shared memory, which holds the tiles. */
  readonly smem: SharedVar;
}

/** An sm_80 module of one tensor-core flash entry, of FLASH_MMA_THREADS-thread blocks. */
export function flashMmaModule<P extends typeof DIMS & Record<string, EntryParamType>>(
  entry: string,
  params: P,
  hd: number,
  body: (k: KernelBuilder, p: ParamHandles<P>, start: MmaEntry) => void,
): PtxModule {
  const m = new PtxModule({ target: 'sm_80' });
  const smem = m.dynamicShared('smem', 128);
  m.entry(entry, params, (k, p) => body(k, p, { dims: loadDims(k, p), block: mmaBlock(k, hd), smem }), {
    maxThreadsPerBlock: FLASH_MMA_THREADS,
  });
  return m;
}

export function flashMmaForwardModule(hd: number): PtxModule {
  const tileBytes = FLASH_MMA_ROWS * hd * 2;
  const kSteps = hd / 16;
  const keySteps = FLASH_MMA_ROWS / 16;
  return flashMmaModule(FLASH_MMA_FORWARD_ENTRY, FORWARD_PARAMS, hd, (k, p, { dims, block, smem }) => {
    const { t0, qh, kvHead, kvStride, end } = queryBlock(k, hd, dims);

    const [qS, kS, vS] = sharedTiles(k, smem, tileBytes, 3);
    loadHalfTile(
      k,
      block,
      qS,
      { base: k.globalPointer(p.q), head: qh.at, stride: qh.stride },
      t0,
      dims.tokens,
    );
    k.barSync();
    const qFrag = aOperand(k, block, qS, kSteps);
    const kSrc: HeadRows = { base: k.globalPointer(p.k), head: kvHead, stride: kvStride };
    const vSrc: HeadRows = { base: k.globalPointer(p.v), head: kvHead, stride: kvStride };
    const { tile: frags } = block;
    const kBases = frags.bases(kS, block.bRow, block.bHalf);
    const vBases = frags.bases(vS, block.bTransRow, block.bTransHalf);

    const tokens = laneRows(k, block, t0);
    const mRow = tokens.map(() => k.mov('f32', k.reg('f32'), Number.NEGATIVE_INFINITY));
    const lRow = tokens.map(() => k.mov('f32', k.reg('f32'), 0));
    const o = Array.from({ length: hd / 8 }, () => k.regs('f32', 4));
    for (const r of o) for (const x of r) k.mov('f32', x, 0);
    const s = Array.from({ length: FLASH_MMA_ROWS / 8 }, () => k.regs('f32', 4));

    forEachKeyTile(k, block, { kS, vS, kSrc, vSrc }, end, dims.tokens, (j0) => {
      for (const r of s) for (const x of r) k.mov('f32', x, 0);
      mmaProduct(
        k,
        FLASH_MMA_TYPE,
        s,
        qFrag,
        { at: (nb, kk) => frags.at(kBases, nb, kk) },
        {
          nBlocks: keySteps,
          kSteps,
        },
      );
      // Tiles are aligned to the block's: only the diagonal one (j0 = t0) holds later keys.
      k.ifThen(k.setp('ge', 'u32', k.reg('pred'), j0, t0), () =>
        maskColumns(k, s, k.add('u32', k.reg('u32'), j0, block.colPair), 'le', tokens),
      );
      const rescale = onlineSoftmax(k, s, mRow, lRow, dims.scaleLog2);
      for (const r of o) {
        for (let e = 0; e < 4; e++) k.mul('f32', r[e]!, r[e]!, rescale[e >> 1]!, { rnd: 'rn' });
      }
      const pFrag = Array.from({ length: keySteps }, (_, kk) => accumulatorsAsA(k, FLASH_MMA_TYPE, s, kk));
      mmaProduct(
        k,
        FLASH_MMA_TYPE,
        o,
        (kk) => pFrag[kk]!,
        { at: (dn, kb) => frags.at(vBases, kb, dn), trans: true },
        { nBlocks: kSteps, kSteps: keySteps, kOuter: true },
      );
    });

    // out = O / l; lse = m · scale + ln(l), written by the first lane of each quad.
    const rowsOf = k.mulLo('u32', k.reg('u32'), dims.batch, dims.nHeads);
    const ok = tokens.map((t) => k.setp('lt', 'u32', k.reg('pred'), t, dims.tokens));
    const inv = lRow.map((l, h) => {
      for (const offset of [1, 2])
        k.add('f32', l, l, k.shflSync('bfly', k.reg('f32'), l, offset), { rnd: 'rn' });
      const lse = k.mul(
        'f32',
        k.reg('f32'),
        k.fma('f32', k.reg('f32'), mRow[h]!, dims.scaleLog2, k.lg2(k.reg('f32'), l)),
        Math.LN2,
        { rnd: 'rn' },
      );
      const first = k.setp('eq', 'u32', k.reg('pred'), block.colPair, 0);
      const index = k.madLo('u32', k.reg('u32'), tokens[h]!, rowsOf, qh.bh);
      k.predicated(k.and('pred', k.reg('pred'), first, ok[h]!), () =>
        k.stGlobal('f32', k.elementAddress(k.globalPointer(p.lse), index, 4), lse),
      );
      return k.rcp(k.reg('f32'), l, 'rn');
    });
    const element = tokens.map((t) => k.madLo('u32', k.reg('u32'), t, qh.stride, qh.at));
    storeRows(k, o, k.globalPointer(p.out), element, ok, inv, block.colPair);
  });
}
