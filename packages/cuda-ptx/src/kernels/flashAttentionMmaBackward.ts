import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { PtxModule } from '../ptx/module.js';
import { addr, type F32, type R32, type R64 } from '../ptx/operands.js';
import { sharedTiles } from './common.js';
import {
  aOperand,
  blockHead,
  FLASH_MMA_ROWS,
  FLASH_MMA_TYPE,
  flashMmaModule,
  forEachKeyTile,
  type HeadRows,
  laneRows,
  loadHalfTile,
  queryBlock,
  storeRows,
} from './flashAttentionMma.js';
import { DKDV_PARAMS, DQ_PARAMS } from './flashAttentionRows.js';
import { accumulatorsAsA, maskColumns, mmaProduct, type TileFragments } from './mmaTiles.js';
import { loadAsF32 } from './storage.js';

// flashAttentionBackward under precision 'half' on tensor cores, in
// FlashAttention-2's two passes as the f32 kernels (no atomics): a block of
// 64 query tokens of one (batch, head) walks its keys for dq, writing
// D = rowsum(dOut ∘ out) (f32, from the unrounded values) for the second
// pass; a block of 64 keys of one (batch, kv head) walks the later queries
// of its query heads for dk and dv. Both recompute P = exp2(S · scale·log2e
// − lse · log2e) from S = q·Kᵀ on mma.sync; dP = dOut·Vᵀ likewise;
// dS = P ∘ (dP − D) and P are rounded to bf16 as A operands of the second
// products (dq += dS·K, dv += Pᵀ·dOut, dk += dSᵀ·q), which read their B
// operand through ldmatrix.trans from the same tiles. The key pass computes
// Sᵀ = K·qᵀ directly, so P and dS come out with keys as rows: the A layout
// those products need. Products sum in f32; dq and dk are scaled once at the
// end. Head dim 128 reads its A fragments from shared memory at each use
// rather than holding them, to keep its accumulators in registers.

export const FLASH_MMA_DQ_ENTRY = 'flash_attention_mma_dq';
export const FLASH_MMA_DKDV_ENTRY = 'flash_attention_mma_dkdv';

const ROWS = FLASH_MMA_ROWS;
const STEPS = ROWS / 16;

/** Four 64-row tiles and 64 f32 pairs (D, or lse and D). */
export function flashMmaBackwardSharedBytes(hd: number): number {
  return 4 * ROWS * hd * 2 + 2 * 4 * ROWS;
}

function zeroed(k: KernelBuilder, tiles: number): Vec4<F32>[] {
  const acc = Array.from({ length: tiles }, () => k.regs('f32', 4));
  for (const r of acc) for (const x of r) k.mov('f32', x, 0);
  return acc;
}

function clear(k: KernelBuilder, acc: readonly Vec4<F32>[]): void {
  for (const r of acc) for (const x of r) k.mov('f32', x, 0);
}

/** An accumulator tile pair's product: the accumulators, the A operand, and B's fragment bases. */
type TileProduct = readonly [acc: readonly Vec4<F32>[], a: (kk: number) => Vec4<R32>, bBases: readonly R32[]];

/** S (or Sᵀ) and dP (or dPᵀ) of one tile pair, added into their accumulators, B read as rows of k. */
function scoreProducts(
  k: KernelBuilder,
  frags: TileFragments,
  kSteps: number,
  ...products: readonly TileProduct[]
): void {
  const steps = { nBlocks: STEPS, kSteps };
  for (const [acc, a, bBases] of products) {
    mmaProduct(k, FLASH_MMA_TYPE, acc, a, { at: (nb, kk) => frags.at(bBases, nb, kk) }, steps);
  }
}

/** A product's accumulators as the A operands (one a 16-key step) of a product that follows it. */
function packedA(k: KernelBuilder, acc: readonly Vec4<F32>[]): Vec4<R32>[] {
  return Array.from({ length: STEPS }, (_, kk) => accumulatorsAsA(k, FLASH_MMA_TYPE, acc, kk));
}

/** acc += A·B over a tile's keys, A from packedA, B read with ldmatrix.trans at `bTransBases`. */
function transProduct(
  k: KernelBuilder,
  frags: TileFragments,
  kSteps: number,
  acc: readonly Vec4<F32>[],
  a: readonly Vec4<R32>[],
  bTransBases: readonly R32[],
): void {
  const steps = { nBlocks: kSteps, kSteps: STEPS, kOuter: true };
  mmaProduct(
    k,
    FLASH_MMA_TYPE,
    acc,
    (kk) => a[kk]!,
    { at: (dn, kb) => frags.at(bTransBases, kb, dn), trans: true },
    steps,
  );
}

export function flashMmaDqModule(hd: number): PtxModule {
  const tileBytes = ROWS * hd * 2;
  const kSteps = hd / 16;
  const chunksPerRow = hd / 8;
  const hold = hd <= 64;
  return flashMmaModule(FLASH_MMA_DQ_ENTRY, DQ_PARAMS, hd, (k, p, { dims, block, smem }) => {
    const { t0, qh, kvHead, kvStride, end } = queryBlock(k, hd, dims);
    const rowsOf = k.mulLo('u32', k.reg('u32'), dims.batch, dims.nHeads);

    const [qS, dOS, kS, vS, deltaS] = sharedTiles(k, smem, tileBytes, 5);
    const head = (param: typeof p.q): HeadRows => ({
      base: k.globalPointer(param),
      head: qh.at,
      stride: qh.stride,
    });
    loadHalfTile(k, block, qS, head(p.q), t0, dims.tokens);
    // D of each row from its f32 dOut and out: a chunk's 8 products, summed over the row's consecutive threads.
    const out = k.globalPointer(p.out);
    const deltaOut = k.globalPointer(p.delta);
    loadHalfTile(k, block, dOS, head(p.dOut), t0, dims.tokens, (values, element, row, ok) => {
      const o = k.regs('f32', 8);
      loadAsF32(k, 'f32', o, k.elementAddress(out, element, 4), { ok });
      const sum = k.mul('f32', k.reg('f32'), values[0]!, o[0]!, { rnd: 'rn' });
      for (let i = 1; i < 8; i++) k.fma('f32', sum, values[i]!, o[i]!, sum);
      for (let offset = 1; offset < chunksPerRow; offset *= 2)
        k.add('f32', sum, sum, k.shflSync('bfly', k.reg('f32'), sum, offset), { rnd: 'rn' });
      const leader = k.setp(
        'eq',
        'u32',
        k.reg('pred'),
        k.and('b32', k.reg('u32'), block.tid, chunksPerRow - 1),
        0,
      );
      k.predicated(leader, () => k.stShared('f32', k.madLo('u32', k.reg('u32'), row, 4, deltaS), sum));
      const index = k.madLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), t0, row), rowsOf, qh.bh);
      k.predicated(k.and('pred', k.reg('pred'), leader, ok), () =>
        k.stGlobal('f32', k.elementAddress(deltaOut, index, 4), sum),
      );
    });
    k.barSync();

    const tokens = laneRows(k, block, t0);
    const ok = tokens.map((t) => k.setp('lt', 'u32', k.reg('pred'), t, dims.tokens));
    const lse = k.globalPointer(p.lse);
    const negLse2 = tokens.map((t, h) => {
      const r = k.mov('f32', k.reg('f32'), 0);
      const index = k.madLo('u32', k.reg('u32'), t, rowsOf, qh.bh);
      k.predicated(ok[h]!, () => k.ldGlobal('f32', r, k.elementAddress(lse, index, 4)));
      return k.mul('f32', r, r, -Math.LOG2E, { rnd: 'rn' });
    });
    const delta = [0, 8].map((h) => {
      const row = k.madLo('u32', k.reg('u32'), block.warp, 16, block.groupId);
      return k.ldShared('f32', k.reg('f32'), addr(k.madLo('u32', k.reg('u32'), row, 4, deltaS), 4 * h));
    });
    const qA = aOperand(k, block, qS, kSteps, hold);
    const dOA = aOperand(k, block, dOS, kSteps, hold);
    const frags = block.tile;
    const kBases = frags.bases(kS, block.bRow, block.bHalf);
    const vBases = frags.bases(vS, block.bRow, block.bHalf);
    const kTBases = frags.bases(kS, block.bTransRow, block.bTransHalf);
    const kvSrc = (param: typeof p.k): HeadRows => ({
      base: k.globalPointer(param),
      head: kvHead,
      stride: kvStride,
    });
    const [kSrc, vSrc] = [kvSrc(p.k), kvSrc(p.v)];

    const dq = zeroed(k, hd / 8);
    const s = zeroed(k, ROWS / 8);
    const dp = zeroed(k, ROWS / 8);
    forEachKeyTile(k, block, { kS, vS, kSrc, vSrc }, end, dims.tokens, (j0) => {
      clear(k, s);
      clear(k, dp);
      scoreProducts(k, frags, kSteps, [s, qA, kBases], [dp, dOA, vBases]);
      k.ifThen(k.setp('ge', 'u32', k.reg('pred'), j0, t0), () =>
        maskColumns(k, s, k.add('u32', k.reg('u32'), j0, block.colPair), 'le', tokens),
      );
      // dS = P ∘ (dP − D), into s.
      s.forEach((r, j) => {
        r.forEach((x, e) => {
          const h = e >> 1;
          k.ex2(x, k.fma('f32', k.reg('f32'), x, dims.scaleLog2, negLse2[h]!), { ftz: true });
          k.mul('f32', x, x, k.sub('f32', k.reg('f32'), dp[j]![e]!, delta[h]!, { rnd: 'rn' }), {
            rnd: 'rn',
          });
        });
      });
      transProduct(k, frags, kSteps, dq, packedA(k, s), kTBases);
    });
    const element = tokens.map((t) => k.madLo('u32', k.reg('u32'), t, qh.stride, qh.at));
    storeRows(k, dq, k.globalPointer(p.dq), element, ok, [dims.scale, dims.scale], block.colPair);
  });
}

export function flashMmaDkdvModule(hd: number): PtxModule {
  const tileBytes = ROWS * hd * 2;
  const kSteps = hd / 16;
  const hold = hd <= 64;
  return flashMmaModule(FLASH_MMA_DKDV_ENTRY, DKDV_PARAMS, hd, (k, p, { dims, block, smem }) => {
    // Earlier keys see more queries: tile 0 starts first.
    const j0 = k.mulLo('u32', k.reg('u32'), k.ctaid('x'), ROWS);
    const kvh = blockHead(k, hd, dims.batch, dims.nKvHeads);
    const qStride = k.mulLo('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), dims.batch, dims.nHeads), hd);
    const rowsOf = k.mulLo('u32', k.reg('u32'), dims.batch, dims.nHeads);

    const [kS, vS, qS, dOS, valS] = sharedTiles(k, smem, tileBytes, 5);
    for (const [dst, param] of [
      [kS, p.k],
      [vS, p.v],
    ] as const) {
      loadHalfTile(
        k,
        block,
        dst,
        { base: k.globalPointer(param), head: kvh.at, stride: kvh.stride },
        j0,
        dims.tokens,
      );
    }
    k.barSync();
    const kA = aOperand(k, block, kS, kSteps, hold);
    const vA = aOperand(k, block, vS, kSteps, hold);
    const frags = block.tile;
    const keys = laneRows(k, block, j0);
    const ok = keys.map((t) => k.setp('lt', 'u32', k.reg('pred'), t, dims.tokens));
    // This lane's columns of the lse · log2e and D rows: colPair + 8j, + 1.
    const valAt = k.madLo('u32', k.reg('u32'), block.colPair, 4, valS);
    const tid = block.tid;
    const valueRow = k.setp('lt', 'u32', k.reg('pred'), tid, ROWS);

    const dk = zeroed(k, hd / 8);
    const dv = zeroed(k, hd / 8);
    const s = zeroed(k, ROWS / 8);
    const dp = zeroed(k, ROWS / 8);
    const hh = k.reg('u32');
    k.forRange(hh, 0, dims.group, 1, () => {
      const headIndex = k.madLo(
        'u32',
        k.reg('u32'),
        kvh.b,
        dims.nHeads,
        k.madLo('u32', k.reg('u32'), kvh.head, dims.group, hh),
      );
      const qHead = k.mulLo('u32', k.reg('u32'), headIndex, hd);
      const i0 = k.reg('u32');
      k.forRange(i0, j0, dims.tokens, ROWS, () => {
        // Pointers read here, not held across the loop: head dim 128 needs the registers.
        const [q, dOut, lse, deltaIn] = [p.q, p.dOut, p.lse, p.delta].map((x) => k.globalPointer(x)) as [
          R64,
          R64,
          R64,
          R64,
        ];
        k.barSync();
        loadHalfTile(k, block, qS, { base: q, head: qHead, stride: qStride }, i0, dims.tokens);
        loadHalfTile(k, block, dOS, { base: dOut, head: qHead, stride: qStride }, i0, dims.tokens);
        // lse · log2e and D of the tile's queries; past the last, +inf and 0, so that P is 0 there.
        k.ifThen(valueRow, () => {
          const t = k.add('u32', k.reg('u32'), i0, tid);
          const inside = k.setp('lt', 'u32', k.reg('pred'), t, dims.tokens);
          const index = k.madLo('u32', k.reg('u32'), t, rowsOf, headIndex);
          const l2 = k.mov('f32', k.reg('f32'), Number.POSITIVE_INFINITY);
          const d = k.mov('f32', k.reg('f32'), 0);
          k.predicated(inside, () => {
            k.ldGlobal('f32', l2, k.elementAddress(lse, index, 4));
            k.mul('f32', l2, l2, Math.LOG2E, { rnd: 'rn' });
            k.ldGlobal('f32', d, k.elementAddress(deltaIn, index, 4));
          });
          const at = k.madLo('u32', k.reg('u32'), tid, 4, valS);
          k.stShared('f32', at, l2);
          k.stShared('f32', addr(at, 4 * ROWS), d);
        });
        k.barSync();
        clear(k, s);
        clear(k, dp);
        // The tiles' fragment addresses are computed where they are used: held, they cost head dim 128 a spill.
        const qBases = frags.bases(qS, block.bRow, block.bHalf);
        const dOBases = frags.bases(dOS, block.bRow, block.bHalf);
        scoreProducts(k, frags, kSteps, [s, kA, qBases], [dp, vA, dOBases]);
        // Only the first tile (i0 = j0) holds queries before these keys.
        k.ifThen(k.setp('eq', 'u32', k.reg('pred'), i0, j0), () =>
          maskColumns(k, s, k.add('u32', k.reg('u32'), i0, block.colPair), 'ge', keys),
        );
        // Pᵀ into s, dSᵀ = Pᵀ ∘ (dPᵀ − D) into dp, column by column.
        s.forEach((r, j) => {
          const l2 = k.ldShared('f32', k.regs('f32', 2), addr(valAt, 32 * j)) as unknown as Vec2<F32>;
          const d = k.ldShared(
            'f32',
            k.regs('f32', 2),
            addr(valAt, 4 * ROWS + 32 * j),
          ) as unknown as Vec2<F32>;
          r.forEach((x, e) => {
            k.ex2(x, k.fma('f32', k.reg('f32'), x, dims.scaleLog2, k.neg('f32', k.reg('f32'), l2[e & 1]!)), {
              ftz: true,
            });
            const y = dp[j]![e]!;
            k.mul('f32', y, x, k.sub('f32', k.reg('f32'), y, d[e & 1]!, { rnd: 'rn' }), { rnd: 'rn' });
          });
        });
        // Both packed before either product: the f32 tiles are dead by then.
        const qTBases = frags.bases(qS, block.bTransRow, block.bTransHalf);
        const dOTBases = frags.bases(dOS, block.bTransRow, block.bTransHalf);
        const [pA, dsA] = [packedA(k, s), packedA(k, dp)];
        transProduct(k, frags, kSteps, dv, pA, dOTBases);
        transProduct(k, frags, kSteps, dk, dsA, qTBases);
      });
    });
    const element = keys.map((t) => k.madLo('u32', k.reg('u32'), t, kvh.stride, kvh.at));
    storeRows(k, dk, k.globalPointer(p.dk), element, ok, [dims.scale, dims.scale], block.colPair);
    storeRows(k, dv, k.globalPointer(p.dv), element, ok, [undefined, undefined], block.colPair);
  });
}
