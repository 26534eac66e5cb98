import type { KernelEncoder, LaunchValue, Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type R32 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { mergeInLastBlock, splitScratch, splitTokensFor } from './attentionLastBlock.js';
import {
  DECODE_MMA_ROUND,
  DECODE_MMA_TILE,
  DECODE_MMA_WARPS,
  type DecodeMmaConfig,
  type DecodeMmaSource,
  decodeMmaKey,
  decodeMmaSharedBytes,
  planDecodeMma,
} from './attentionMmaPlan.js';
import { contiguousTileRow, kvTileRing, pagedTileRow, ringBytes, tileBytes } from './attentionMmaRing.js';
import { newRowWriter, rotateQ, warpAngles } from './attentionMmaRope.js';
import { attendedLength, normalised, PAGED_PARAMS } from './attentionRows.js';
import { LOWEST } from './attentionStates.js';
import { loadPointer, loadU32 } from './common.js';
import { mmaBlock } from './flashAttentionMma.js';
import { mmaProduct, onlineSoftmax } from './mmaTiles.js';
import { loadRopeFrequencies, ropeFrequencyParams } from './rope.js';
import { halfToF32, loadAsF32, STORAGE_BYTES, storageOf, storeFromF32 } from './storage.js';

// One query token's attention over a bf16 or f16 KV cache on tensor cores
// (sm_80 mma.sync m16n8k16), for grouped heads: the G ≤ 8 query heads of a kv
// head are the rows of one 16-row A operand, so K and V are read once for
// all of them and no lane reduces a dot product by shuffles. The 8 rows G
// does not fill carry the f32 q's remainder after rounding to the cache's
// half type (row g + 8 holds q − half(q) of row g), and the softmax weights
// go in the same way, so the products keep about 16 (bf16) or 22 (f16) bits
// of q and of the weights: close to the CUDA-core kernel's f32. Row g's and
// g + 8's accumulators sit in the same lane, which adds them. f16 ends at
// 65504: each row of q is first brought under 2^15 by a power of two, which
// the row's scores take back exactly.
//
// Each warp streams its own 16-token tiles of K and V through a ring of
// shared-memory stages with cp.async (no block barrier in the loop), the
// warps of a block taking every fourth tile of its split. The warps' states
// are merged through shared memory at the end into the normalised output
// (one pass) or the split's state, which the last block of the kv head to
// finish merges with the others' (attentionLastBlock.ts).
// Over page pools each tile lies in one page, found through the sequence's
// block table. The plan and where the kernel applies: attentionMmaPlan.ts.

/** x ≈ hi + lo, each pair packed as the half type: hi = half(x), lo = half(x − hi). */
function splitPair(k: KernelBuilder, type: 'f16' | 'bf16', x0: F32, x1: F32): { hi: R32; lo: R32 } {
  const hi = k.cvtPack(type, k.reg('u32'), x0, x1);
  const h0 = halfToF32(k, type, hi, false);
  const h1 = halfToF32(k, type, hi, true);
  const r0 = k.sub('f32', k.reg('f32'), x0, h0, { rnd: 'rn' });
  const r1 = k.sub('f32', k.reg('f32'), x1, h1, { rnd: 'rn' });
  return { hi, lo: k.cvtPack(type, k.reg('u32'), r0, r1) };
}

/** The largest f32 exponent (biased) a row of q keeps in f16: |q| < 2^15, under f16's 65504. */
const F16_ROW_EXPONENT = 127 + 14;

/**
 * f16 products: the power of two 2^-s that brings row groupId of q (its
 * values in `xs`, spread over the quad of lanes that holds the row) under
 * 2^15, and 2^s, which undoes it exactly on the row's scores; 1 and 1 for a
 * row already in range.
 */
function f16RowScale(k: KernelBuilder, xs: readonly F32[]): { down: F32; up: F32 } {
  const top = k.mov('f32', k.reg('f32'), 0);
  for (const x of xs) k.max('f32', top, top, k.abs('f32', k.reg('f32'), x));
  for (const offset of [1, 2]) k.max('f32', top, top, k.shflSync('bfly', k.reg('f32'), top, offset));
  const exponent = k.and(
    'b32',
    k.reg('u32'),
    k.shr('u32', k.reg('u32'), k.mov('b32', k.reg('u32'), top), 23),
    0xff,
  );
  // s = exponent − (127 + 14) where positive, at most 126 (2^-126 is still a normal f32).
  const over = k.sub(
    'u32',
    k.reg('u32'),
    k.max('u32', k.reg('u32'), exponent, F16_ROW_EXPONENT),
    F16_ROW_EXPONENT,
  );
  const s = k.min('u32', k.reg('u32'), over, 126);
  const down = k.mov('b32', k.reg('f32'), k.shl('b32', k.reg('u32'), k.sub('u32', k.reg('u32'), 127, s), 23));
  const up = k.mov('b32', k.reg('f32'), k.shl('b32', k.reg('u32'), k.add('u32', k.reg('u32'), s, 127), 23));
  return { down, up };
}

/**
 * Attention of the `group` query heads of kv head ctaid.y over the tokens
 * [ctaid.x · splitTokens, +splitTokens) ∩ [0, seqLen) of a [nKvHeads, maxSeq,
 * headDim] bf16 cache pair, grid (splits, nKvHeads); or, paged, of sequence
 * ctaid.z over its pages, grid (splits, nKvHeads, B).
 */
export function decodeMmaModule(c: DecodeMmaConfig): PtxModule {
  const { headDim: hd, group: G, act, cache } = c;
  const kSteps = hd / 16;
  const actBytes = STORAGE_BYTES[act];
  const outputs: Record<string, ParamType> = c.split
    ? { partAcc: 'ptr', partMax: 'ptr', partSum: 'ptr', counters: 'ptr', out: 'ptr' }
    : { out: 'ptr' };
  const paged = c.pageShift !== undefined;
  const m = new PtxModule({ target: 'sm_80' });
  const smem = m.dynamicShared('smem', 128);
  m.entry(
    c.split ? 'attention_mma_split' : 'attention_mma',
    {
      q: 'ptr',
      kCache: 'ptr',
      vCache: 'ptr',
      ...outputs,
      ...(paged
        ? PAGED_PARAMS
        : { maxSeq: 'u32', ...(c.deviceLength ? { seqLenAt: 'ptr' } : { seqLen: 'u32' }) }),
      splitTokens: 'u32',
      scale: 'f32',
      ...(c.rope ? ropeFrequencyParams(c.rope.table) : {}),
    } as Record<string, ParamType>,
    (k, p) => {
      const block = mmaBlock(k, hd);
      const { tid, warp, groupId, colPair } = block;
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const kvHead = k.ctaid('y');
      const split = k.ctaid('x');
      const head0 = k.mulLo('u32', k.reg('u32'), kvHead, G);
      // Paged: sequence b along z, whose heads are rows b·nHeads … of q, out and the states.
      const sequence = paged ? k.ctaid('z') : undefined;
      const row0 = sequence
        ? k.madLo('u32', k.reg('u32'), sequence, k.mulLo('u32', k.reg('u32'), k.nctaid('y'), G), head0)
        : head0;
      const seqLen = attendedLength(k, p, {
        ...(sequence ? { sequence } : {}),
        deviceLength: c.deviceLength === true,
        fromPosition: c.fromPosition === true,
      });
      // A length read as the kernel runs is spread over the grid (splitTokens is then the least a split takes).
      const splitTokens =
        c.split && (paged || c.deviceLength)
          ? splitTokensFor(k, seqLen, loadU32(k, p, 'splitTokens'), k.nctaid('x'), DECODE_MMA_ROUND)
          : loadU32(k, p, 'splitTokens');
      const t0 = k.mulLo('u32', k.reg('u32'), split, splitTokens);
      const t1 = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), t0, splitTokens), seqLen);
      // ropeAttention: the token's position is the last row.
      const rope = c.rope
        ? {
            layout: c.rope.layout,
            frequencies: loadRopeFrequencies(k, p as Record<string, Param<ParamType>>, c.rope.table),
            position: k.sub('u32', k.reg('u32'), seqLen, 1),
          }
        : undefined;
      const attend = () => {
        // Tile i of this warp starts at token t0 + 16·warp + 64·i; the ring holds its next tiles.
        const ring = kvTileRing(k, p, {
          ring: k.madLo('u32', k.reg('u32'), warp, ringBytes(hd), k.sharedAddress(smem)),
          lane,
          headDim: hd,
          first: k.madLo('u32', k.reg('u32'), warp, DECODE_MMA_TILE, t0),
          t1,
          tileRow: paged
            ? pagedTileRow(k, p, c.pageShift!, sequence!, kvHead)
            : contiguousTileRow(k, p, kvHead),
        });

        // ropeAttention: the angles of the position's pairs, a lane's share each, then the new row, into
        // the caches and over its tile's copy once that arrives.
        const angles = rope ? warpAngles(k, { ...rope, headDim: hd, lane }) : undefined;
        const newRow =
          rope && angles
            ? newRowWriter(k, p, {
                ...rope,
                headDim: hd,
                group: G,
                kvHead,
                t0,
                t1,
                warp,
                lane,
                act,
                cache,
                angles: angles.own,
              })
            : undefined;

        // q · scale as A fragments (loaded while the first tiles are in flight): row g (< G) its bf16 part, row g + 8 the remainder, other rows 0.
        const scale = k.ldParam(p.scale as Param<'f32'>);
        const rowOk = k.setp('lt', 'u32', k.reg('pred'), groupId, G);
        const qAt = k.elementAddress(
          loadPointer(k, p, 'q'),
          k.madLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, groupId), hd, colPair),
          actBytes,
        );
        const qs = Array.from({ length: kSteps }, (_, kk) =>
          [0, 8].map((offset) => {
            const x = k.regs('f32', 2);
            loadAsF32(k, act, x, addr(qAt, actBytes * (16 * kk + offset)), { ok: rowOk });
            return x;
          }),
        );
        if (rope && angles) rotateQ(k, qs, { layout: rope.layout, headDim: hd, colPair, angles });
        for (const r of qs.flat(2)) k.mul('f32', r, r, scale, { rnd: 'rn' });
        const rowScale = cache === 'f16' ? f16RowScale(k, qs.flat(2)) : undefined;
        const qFrag = qs.map((pairs) => {
          const halves = pairs.map((x) => {
            if (rowScale) for (const r of x) k.mul('f32', r, r, rowScale.down, { rnd: 'rn' });
            return splitPair(k, cache, x[0]!, x[1]!);
          });
          return [halves[0]!.hi, halves[0]!.lo, halves[1]!.hi, halves[1]!.lo] as unknown as Vec4<R32>;
        });

        const mRow = k.mov('f32', k.reg('f32'), LOWEST);
        const lRow = k.mov('f32', k.reg('f32'), 0);
        const o = Array.from({ length: hd / 8 }, () => k.regs('f32', 4));
        for (const r of o) for (const x of r) k.mov('f32', x, 0);
        const sAcc = [k.regs('f32', 4), k.regs('f32', 4)];
        const log2e = k.mov('f32', k.reg('f32'), Math.LOG2E);
        const base = k.reg('u32');
        k.forRange(base, ring.first, t1, DECODE_MMA_ROUND, () => {
          ring.issueNext();
          ring.waitForUse();
          newRow?.patch(base, ring.useStage);
          const kTile = ring.useStage;
          const vTile = k.add('u32', k.reg('u32'), ring.useStage, tileBytes(hd));
          const kAt = block.tile.bases(kTile, block.bRow, block.bHalf);
          const vAt = block.tile.bases(vTile, block.bTransRow, block.bTransHalf);
          for (const r of sAcc) for (const x of r) k.mov('f32', x, 0);
          mmaProduct(
            k,
            cache,
            sAcc,
            (kk) => qFrag[kk]!,
            { at: (nb, kk) => block.tile.at(kAt, nb, kk) },
            { nBlocks: 1, kSteps },
          );
          // A head's score is its row's sum and its remainder row's (elements 0, 1 and 2, 3).
          for (const r of sAcc) {
            k.add('f32', r[0]!, r[0]!, r[2]!, { rnd: 'rn' });
            k.add('f32', r[1]!, r[1]!, r[3]!, { rnd: 'rn' });
            if (rowScale) for (const e of [0, 1]) k.mul('f32', r[e]!, r[e]!, rowScale.up, { rnd: 'rn' });
          }
          // Tokens past t1 weigh nothing: only a split's last tile has any.
          const partial = k.setp(
            'gt',
            'u32',
            k.reg('pred'),
            k.add('u32', k.reg('u32'), base, DECODE_MMA_TILE),
            t1,
          );
          k.ifThen(partial, () => {
            sAcc.forEach((r, j) => {
              for (const e of [0, 1]) {
                const token = k.add(
                  'u32',
                  k.reg('u32'),
                  k.add('u32', k.reg('u32'), base, colPair),
                  8 * j + e,
                );
                const valid = k.setp('lt', 'u32', k.reg('pred'), token, t1);
                k.selp('f32', r[e]!, r[e]!, Number.NEGATIVE_INFINITY, valid);
              }
            });
          });
          const [rescale] = onlineSoftmax(k, sAcc, [mRow], [lRow], log2e);
          for (const r of o) for (const x of r) k.mul('f32', x, x, rescale!, { rnd: 'rn' });
          // The weights as A: row g their bf16 part, row g + 8 the remainder.
          const w0 = splitPair(k, cache, sAcc[0]![0]!, sAcc[0]![1]!);
          const w1 = splitPair(k, cache, sAcc[1]![0]!, sAcc[1]![1]!);
          const pFrag = [w0.hi, w0.lo, w1.hi, w1.lo] as unknown as Vec4<R32>;
          mmaProduct(
            k,
            cache,
            o,
            () => pFrag,
            { at: (dn, kb) => block.tile.at(vAt, kb, dn), trans: true },
            { nBlocks: kSteps, kSteps: 1, kOuter: true },
          );
          ring.releaseUse();
        });
        ring.drain();
        k.barSync();

        // The warps' states in shared memory: max and sum [warp][g], acc [warp][g][headDim].
        const states = k.sharedAddress(smem);
        const sumsAt = DECODE_MMA_WARPS * G * 4;
        const accAt = 2 * DECODE_MMA_WARPS * G * 4;
        for (const offset of [1, 2])
          k.add('f32', lRow, lRow, k.shflSync('bfly', k.reg('f32'), lRow, offset), { rnd: 'rn' });
        const stateRow = k.madLo('u32', k.reg('u32'), warp, G, groupId);
        k.ifThen(rowOk, () => {
          const quadFirst = k.setp('eq', 'u32', k.reg('pred'), colPair, 0);
          const at = k.madLo('u32', k.reg('u32'), stateRow, 4, states);
          k.predicated(quadFirst, () => {
            k.stShared('f32', at, mRow);
            k.stShared('f32', addr(at, sumsAt), lRow);
          });
          const accRow = k.madLo(
            'u32',
            k.reg('u32'),
            k.madLo('u32', k.reg('u32'), stateRow, hd, colPair),
            4,
            states,
          );
          o.forEach((r, j) => {
            const pair = [0, 1].map((e) => k.add('f32', k.reg('f32'), r[e]!, r[e + 2]!, { rnd: 'rn' }));
            k.stShared('f32', addr(accRow, accAt + 32 * j), pair as unknown as Vec2<F32>);
          });
        });
        k.barSync();

        const outAt = c.split ? undefined : loadPointer(k, p, 'out');
        const part = c.split
          ? {
              acc: loadPointer(k, p, 'partAcc'),
              max: loadPointer(k, p, 'partMax'),
              sum: loadPointer(k, p, 'partSum'),
              splits: k.nctaid('x'),
            }
          : undefined;
        const idx = k.reg('u32');
        k.forRange(idx, tid, G * hd, 32 * DECODE_MMA_WARPS, () => {
          const g = k.shr('u32', k.reg('u32'), idx, Math.log2(hd));
          const dim = k.and('b32', k.reg('u32'), idx, hd - 1);
          const mAt = k.madLo('u32', k.reg('u32'), g, 4, states);
          const aAt = k.madLo('u32', k.reg('u32'), idx, 4, states);
          const ms = Array.from({ length: DECODE_MMA_WARPS }, (_, w) =>
            k.ldShared('f32', k.reg('f32'), addr(mAt, 4 * w * G)),
          );
          const top = ms.slice(1).reduce((a, b) => k.max('f32', k.reg('f32'), a, b), ms[0]!);
          const l = k.mov('f32', k.reg('f32'), 0);
          const acc = k.mov('f32', k.reg('f32'), 0);
          ms.forEach((mw, w) => {
            const d = k.sub('f32', k.reg('f32'), mw, top, { rnd: 'rn' });
            const weight = k.ex2(k.reg('f32'), k.mul('f32', k.reg('f32'), d, log2e, { rnd: 'rn' }), {
              ftz: true,
            });
            const lw = k.ldShared('f32', k.reg('f32'), addr(mAt, sumsAt + 4 * w * G));
            const aw = k.ldShared('f32', k.reg('f32'), addr(aAt, accAt + 4 * w * G * hd));
            k.fma('f32', l, lw, weight, l);
            k.fma('f32', acc, aw, weight, acc);
          });
          const row = k.add('u32', k.reg('u32'), row0, g);
          if (part) {
            // State (row, split) of [nHeads, splits]; its acc row of headDim after it.
            const state = k.madLo('u32', k.reg('u32'), row, part.splits, split);
            k.stGlobal(
              'f32',
              k.elementAddress(part.acc, k.madLo('u32', k.reg('u32'), state, hd, dim), 4),
              acc,
            );
            k.predicated(k.setp('eq', 'u32', k.reg('pred'), dim, 0), () => {
              k.stGlobal('f32', k.elementAddress(part.max, state, 4), top);
              k.stGlobal('f32', k.elementAddress(part.sum, state, 4), l);
            });
          } else {
            const value = normalised(k, acc, l, paged);
            storeFromF32(
              k,
              act,
              k.elementAddress(outAt!, k.madLo('u32', k.reg('u32'), row, hd, dim), actBytes),
              value,
            );
          }
        });
      };
      if (!c.split) {
        attend();
        return;
      }
      // A split past the length has nothing to leave: the merge reads only the used ones.
      k.ifThen(k.setp('lt', 'u32', k.reg('pred'), t0, seqLen), attend);
      mergeInLastBlock(k, p, {
        sequence,
        seqLen,
        splitTokens,
        flag: k.sharedAddress(smem),
        // Past the flag, in the rings' memory (the merge's partials need 3 KiB of 32 or more).
        partials: k.add('u32', k.reg('u32'), k.sharedAddress(smem), 16),
        firstRow: row0,
        rows: G,
        headDim: hd,
        width: 4,
        threads: 32 * DECODE_MMA_WARPS,
        outType: act,
        zeroEmpty: paged,
      });
    },
    { maxThreadsPerBlock: 32 * DECODE_MMA_WARPS, triggerDependents: true },
  );
  return m;
}

// ---- launch -------------------------------------------------------------------------

/**
 * Launches the tensor-core attention of q ([nHeads, headDim], or [B, nHeads,
 * headDim] over pages) into `out`: one pass, or splits and their merge. A
 * length on the device is planned for its bound.
 */
export function launchDecodeMma(
  encoder: KernelEncoder,
  shape: { readonly nHeads: number; readonly nKvHeads: number; readonly headDim: number },
  a: { readonly q: Operand; readonly kCache: Operand; readonly vCache: Operand; readonly scale: number },
  source: DecodeMmaSource,
  out: Operand,
  /** ropeAttention: q is the fused q, k, v row, rotated as loaded, and the new row is written (see DecodeMmaConfig.rope). */
  rope?: {
    readonly config: NonNullable<DecodeMmaConfig['rope']>;
    readonly args: Readonly<Record<string, LaunchValue>>;
  },
): void {
  const paged = source.kind === 'pages';
  const batch = paged ? source.batch : 1;
  const onDevice = paged || typeof source.seqLen !== 'number';
  const bound = paged ? source.capacity : onDevice ? source.maxSeq : (source.seqLen as number);
  const plan = planDecodeMma(
    encoder.device,
    shape.nKvHeads * batch,
    bound,
    encoder.tuning.attentionSplitTokens,
  );
  const act = storageOf(a.q);
  const config: DecodeMmaConfig = {
    cache: storageOf(a.kCache) === 'f16' ? 'f16' : 'bf16',
    headDim: shape.headDim,
    group: shape.nHeads / shape.nKvHeads,
    split: plan.splits > 1,
    deviceLength: !paged && onDevice,
    ...(!paged && source.fromPosition ? { fromPosition: true } : {}),
    ...(rope ? { rope: rope.config } : {}),
    act,
    ...(paged ? { pageShift: source.pageShift } : {}),
  };
  const args = {
    ...a,
    ...(paged
      ? source.args
      : { maxSeq: source.maxSeq, ...(onDevice ? { seqLenAt: source.seqLen } : { seqLen: source.seqLen }) }),
    // A length read as the kernel runs sizes the splits there, from the least a split takes.
    splitTokens:
      plan.splits > 1 && onDevice
        ? (encoder.tuning.attentionSplitTokens ?? DECODE_MMA_ROUND)
        : plan.splitTokens,
    ...rope?.args,
  };
  const launch = {
    key: decodeMmaKey(config),
    module: () => decodeMmaModule(config),
    grid: paged ? ([plan.splits, shape.nKvHeads, batch] as const) : ([plan.splits, shape.nKvHeads] as const),
    block: 32 * DECODE_MMA_WARPS,
    sharedBytes: decodeMmaSharedBytes(config),
  };
  if (!config.split) {
    encoder.launch({ ...launch, entry: 'attention_mma', args: { ...args, out } });
    return;
  }
  // The last block of each kv head merges the splits' states.
  const scratch = splitScratch(encoder, {
    rows: batch * shape.nHeads,
    splits: plan.splits,
    headDim: shape.headDim,
    tickets: batch * shape.nKvHeads,
  });
  encoder.launch({ ...launch, entry: 'attention_mma_split', args: { ...args, ...scratch, out } });
}
