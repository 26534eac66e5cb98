import { FLOAT, incrementalAttention, pow2AtLeast, UnsupportedOnBackendError } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import { cudaKernel, type KernelEncoder, type Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type Pred, type R32 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { asVector, checkElementCount, loadPointer, loadU32 } from './common.js';
import { loadDeviceU32, type VectorWidth, vectorWidth } from './decodingAccess.js';
import { expF32 } from './math.js';
import {
  type FloatStorage,
  loadAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// One query token's attention over the KV cache as flash-decoding: the cached
// sequence is split across blocks, each leaving a partial softmax state that a
// second kernel merges; short caches take one pass.
//
// The length may instead be read from a device tensor when the kernel runs, so
// that a recorded graph replays for the value last written there: it sizes
// the split grid by the cache (its bound), splits past the length leave an
// empty state (max LOWEST, sum 0) that weighs nothing in the merge, and a
// length outside 1 … maxSeq reads nothing and leaves 0 / 0.

// ---- incremental attention: lane layout and plan -------------------------------------

/** The largest head dimension the attention kernels keep in registers (32 f32 per lane). */
export const MAX_HEAD_DIM = 1024;
/** Warps per attention block; each walks its own tokens, merged once at the end. */
export const ATTENTION_WARPS = 4;
/** Warps per block of the merge kernel; they take splits in turn. */
export const MERGE_WARPS = 8;
/** A split has at least this many tokens: fewer would spend more on the merge than they save. */
export const MIN_SPLIT_TOKENS = 64;
/** Splits per head at most, which bounds the merge kernel's serial work. */
export const MAX_SPLITS = 64;
/** Blocks aimed for per SM: two waves of eight resident blocks. */
export const TARGET_BLOCKS_PER_SM = 16;

/**
 * How a warp covers a head's row: `lanes` consecutive lanes (a slot) share
 * one token, each holding `perLane` vectors of `width` words at chunks
 * laneInSlot + i·lanes; a warp holds `slots` tokens at once.
 */
export interface LaneLayout {
  readonly width: VectorWidth;
  /** Vectors per row (headDim / width). */
  readonly chunks: number;
  readonly lanes: number;
  readonly perLane: number;
  readonly slots: number;
}

export function laneLayout(headDim: number, width: VectorWidth): LaneLayout {
  const chunks = headDim / width;
  const lanes = Math.min(32, pow2AtLeast(chunks));
  return { width, chunks, lanes, perLane: Math.ceil(chunks / lanes), slots: 32 / lanes };
}

/** The compile-time configuration of the attention kernel. */
export interface AttentionConfig {
  readonly headDim: number;
  readonly width: VectorWidth;
  /** Query heads per block (they share the kv head, so its rows are loaded once for all). */
  readonly headsPerBlock: number;
  /** Tokens per slot whose loads are issued together. */
  readonly unroll: number;
  /** Whether the block leaves a partial state for the merge kernel instead of the output. */
  readonly split: boolean;
  /** Whether seqLen is read from device memory (`seqLenAt`) instead of a parameter. */
  readonly deviceLength?: boolean;
  /** Storage of q and out (`act`) and of the caches; all f32 when absent. The partial states are f32. */
  readonly types?: { readonly act: FloatStorage; readonly cache: FloatStorage };
}

export interface AttentionPlan {
  readonly config: AttentionConfig;
  readonly splits: number;
  /** Tokens per split (the last one may have fewer). */
  readonly splitTokens: number;
  /** Blocks along the heads: nHeads / headsPerBlock. */
  readonly headBlocks: number;
}

export interface AttentionShape {
  readonly nHeads: number;
  readonly nKvHeads: number;
  readonly headDim: number;
  readonly seqLen: number;
}

/** The largest divisor of `n` that is at most `limit`. */
function largestDivisorUpTo(n: number, limit: number): number {
  for (let d = Math.min(n, limit); d > 1; d--) if (n % d === 0) return d;
  return 1;
}

/**
 * Launch plan: query heads per block and tokens per load group from the
 * registers a lane needs (q and the accumulators grow with both), then
 * enough splits of the sequence that the grid fills the SMs about twice
 * over, each split at least MIN_SPLIT_TOKENS long; one split means one pass.
 */
export function planAttention(
  device: Pick<DeviceProperties, 'multiprocessors'>,
  shape: AttentionShape,
  width: VectorWidth,
): AttentionPlan {
  const { nHeads, nKvHeads, headDim, seqLen } = shape;
  const layout = laneLayout(headDim, width);
  const dimsPerLane = layout.perLane * width;
  const unroll = dimsPerLane <= 4 ? 4 : dimsPerLane <= 8 ? 2 : 1;
  const headsPerBlock = largestDivisorUpTo(nHeads / nKvHeads, Math.max(1, Math.min(8, 32 / dimsPerLane)));
  const headBlocks = nHeads / headsPerBlock;
  const wanted = Math.ceil((device.multiprocessors * TARGET_BLOCKS_PER_SM) / headBlocks);
  const allowed = Math.max(1, Math.min(MAX_SPLITS, Math.floor(seqLen / MIN_SPLIT_TOKENS)));
  let splits = Math.min(wanted, allowed);
  // Whole load groups per split, so only a split's last group is partial.
  const group = ATTENTION_WARPS * layout.slots * unroll;
  const splitTokens = splits === 1 ? seqLen : Math.ceil(seqLen / splits / group) * group;
  splits = Math.ceil(seqLen / splitTokens);
  return {
    config: { headDim, width, headsPerBlock, unroll, split: splits > 1 },
    splits,
    splitTokens,
    headBlocks,
  };
}

export function attentionKey(c: AttentionConfig): string {
  const types = c.types ? storageKey([c.types.act, c.types.cache]) : '';
  return `decoding/attention/${c.split ? 'split' : 'single'}/d${c.headDim}v${c.width}/g${c.headsPerBlock}u${c.unroll}w${ATTENTION_WARPS}${c.deviceLength ? '/len' : ''}${types}`;
}

export function mergeKey(headDim: number, width: VectorWidth, out: FloatStorage = 'f32'): string {
  return `decoding/attention/merge/d${headDim}v${width}/w${MERGE_WARPS}${storageKey([out])}`;
}

// ---- softmax states ------------------------------------------------------------------

/**
 * An online-softmax state of one head over some tokens: the largest score m,
 * the sum l of e^(score − m), and acc = Σ e^(score − m) · v over this lane's
 * dimensions (perLane vectors of `width` registers).
 */
interface SoftmaxState {
  readonly m: F32;
  readonly l: F32;
  readonly acc: readonly (readonly F32[])[];
}

/** The most negative finite f32: a start for m that never makes e^(m − m') a NaN. */
const LOWEST = -3.4028234663852886e38;

function newState(k: KernelBuilder, layout: LaneLayout): SoftmaxState {
  const s = {
    m: k.mov('f32', k.reg('f32'), LOWEST),
    l: k.mov('f32', k.reg('f32'), 0),
    acc: Array.from({ length: layout.perLane }, () => k.regs('f32', layout.width)),
  };
  for (const v of s.acc) for (const r of v) k.mov('f32', r, 0);
  return s;
}

/** s ← s merged with another state (m', l', acc'): both rescaled to the larger max. */
function mergeInto(
  k: KernelBuilder,
  s: SoftmaxState,
  m: F32,
  l: F32,
  acc: readonly (readonly F32[])[],
): void {
  const top = k.max('f32', k.reg('f32'), s.m, m);
  const a = expF32(k, k.sub('f32', k.reg('f32'), s.m, top, { rnd: 'rn' }));
  const b = expF32(k, k.sub('f32', k.reg('f32'), m, top, { rnd: 'rn' }));
  k.mul('f32', s.l, s.l, a, { rnd: 'rn' });
  k.fma('f32', s.l, l, b, s.l);
  s.acc.forEach((v, i) => {
    v.forEach((r, e) => {
      k.mul('f32', r, r, a, { rnd: 'rn' });
      k.fma('f32', r, acc[i]![e]!, b, r);
    });
  });
  k.mov('f32', s.m, top);
}

/** Lane registers every attention-like kernel uses. */
interface Lanes {
  readonly tid: R32;
  readonly lane: R32;
  readonly warp: R32;
  readonly laneInSlot: R32;
  readonly slot: R32;
  /** Per vector i of a lane: where only some lanes hold chunk laneInSlot + i·lanes, whether this one does. */
  readonly chunkOk: readonly (Pred | undefined)[];
}

function laneRegisters(k: KernelBuilder, layout: LaneLayout): Lanes {
  const tid = k.tid();
  const lane = k.and('b32', k.reg('u32'), tid, 31);
  const warp = k.shr('u32', k.reg('u32'), tid, 5);
  const laneInSlot = k.and('b32', k.reg('u32'), lane, layout.lanes - 1);
  const slot = k.shr('u32', k.reg('u32'), lane, Math.log2(layout.lanes));
  const chunkOk = Array.from({ length: layout.perLane }, (_, i) =>
    (i + 1) * layout.lanes <= layout.chunks
      ? undefined
      : k.setp('lt', 'u32', k.reg('pred'), laneInSlot, layout.chunks - i * layout.lanes),
  );
  return { tid, lane, warp, laneInSlot, slot, chunkOk };
}

/** Merges the states of a warp's slots (lanes laneInSlot apart by multiples of `lanes`). */
function mergeSlots(k: KernelBuilder, layout: LaneLayout, states: readonly SoftmaxState[]): void {
  for (let offset = layout.lanes; offset < 32; offset *= 2) {
    for (const s of states) {
      const m = k.shflSync('bfly', k.reg('f32'), s.m, offset);
      const l = k.shflSync('bfly', k.reg('f32'), s.l, offset);
      const acc = s.acc.map((v) => v.map((r) => k.shflSync('bfly', k.reg('f32'), r, offset)));
      mergeInto(k, s, m, l, acc);
    }
  }
}

interface Combined {
  /** Index of the head within the block. */
  readonly head: R32;
  /** Dimension within the head. */
  readonly dim: R32;
  readonly m: F32;
  readonly l: F32;
  readonly acc: F32;
}

/**
 * Merges every warp's states through shared memory (after `mergeSlots`, the
 * lanes of slot 0 hold their warp's), then calls `emit` once per (head,
 * dimension) of the block with the block's state, threads taking them in turn.
 */
function combineWarps(
  k: KernelBuilder,
  layout: LaneLayout,
  ln: Lanes,
  warps: number,
  headDim: number,
  states: readonly SoftmaxState[],
  emit: (c: Combined) => void,
): void {
  const heads = states.length;
  const sMax = k.sharedArray('warp_max', 'f32', warps * heads);
  const sSum = k.sharedArray('warp_sum', 'f32', warps * heads);
  const sAcc = k.sharedArray('warp_acc', 'f32', warps * heads * headDim, 16);
  const first = k.madLo('u32', k.reg('u32'), ln.warp, heads, 0);
  const isLane0 = k.setp('eq', 'u32', k.reg('pred'), ln.lane, 0);
  const maxAt = k.madLo('u32', k.reg('u32'), first, 4, k.sharedAddress(sMax));
  const sumAt = k.madLo('u32', k.reg('u32'), first, 4, k.sharedAddress(sSum));
  k.predicated(isLane0, () => {
    states.forEach((s, h) => {
      k.stShared('f32', addr(maxAt, 4 * h), s.m);
      k.stShared('f32', addr(sumAt, 4 * h), s.l);
    });
  });
  const inSlot0 = k.setp('lt', 'u32', k.reg('pred'), ln.lane, layout.lanes);
  const column = k.mulLo('u32', k.reg('u32'), ln.laneInSlot, layout.width);
  const accIndex = k.madLo('u32', k.reg('u32'), first, headDim, column);
  const accAt = k.madLo('u32', k.reg('u32'), accIndex, 4, k.sharedAddress(sAcc));
  for (let i = 0; i < layout.perLane; i++) {
    const ok = ln.chunkOk[i] ? k.and('pred', k.reg('pred'), inSlot0, ln.chunkOk[i]!) : inSlot0;
    k.predicated(ok, () => {
      states.forEach((s, h) => {
        k.stShared(
          'f32',
          addr(accAt, 4 * (h * headDim + i * layout.lanes * layout.width)),
          asVector(s.acc[i]!),
        );
      });
    });
  }
  k.barSync();
  const idx = k.reg('u32');
  k.forRange(idx, ln.tid, heads * headDim, 32 * warps, () => {
    const head = k.div('u32', k.reg('u32'), idx, headDim);
    const dim = k.sub('u32', k.reg('u32'), idx, k.mulLo('u32', k.reg('u32'), head, headDim));
    const mAt = k.madLo('u32', k.reg('u32'), head, 4, k.sharedAddress(sMax));
    const lAt = k.madLo('u32', k.reg('u32'), head, 4, k.sharedAddress(sSum));
    const aAt = k.madLo('u32', k.reg('u32'), idx, 4, k.sharedAddress(sAcc));
    const ms = Array.from({ length: warps }, (_, w) =>
      k.ldShared('f32', k.reg('f32'), addr(mAt, 4 * w * heads)),
    );
    const top = ms.slice(1).reduce((a, b) => k.max('f32', k.reg('f32'), a, b), ms[0]!);
    const l = k.mov('f32', k.reg('f32'), 0);
    const acc = k.mov('f32', k.reg('f32'), 0);
    ms.forEach((mw, w) => {
      const weight = expF32(k, k.sub('f32', k.reg('f32'), mw, top, { rnd: 'rn' }));
      const lw = k.ldShared('f32', k.reg('f32'), addr(lAt, 4 * w * heads));
      const aw = k.ldShared('f32', k.reg('f32'), addr(aAt, 4 * w * heads * headDim));
      k.fma('f32', l, lw, weight, l);
      k.fma('f32', acc, aw, weight, acc);
    });
    emit({ head, dim, m: top, l, acc });
  });
}

// ---- incremental attention: the split pass ----------------------------------------------

/**
 * Attention of `headsPerBlock` query heads (sharing one kv head) over the
 * tokens [split · splitTokens, +splitTokens) ∩ [0, seqLen), grid
 * (splits, nHeads / headsPerBlock). Each slot of each warp keeps online
 * softmax states over the tokens it reads: per load group it loads `unroll`
 * K and V rows, reduces q·k over the slot's lanes with butterflies, and
 * rescales its sums once per group. Then slots and warps are merged, and
 * the block writes the normalised output (one pass) or its state
 * (max, sum, unnormalised acc) for the merge kernel.
 */
export function attentionModule(c: AttentionConfig): PtxModule {
  const layout = laneLayout(c.headDim, c.width);
  const { headDim, width, headsPerBlock: heads, unroll } = c;
  const { lanes: L, slots: S, perLane } = layout;
  const W = ATTENTION_WARPS;
  const { act, cache } = c.types ?? { act: 'f32', cache: 'f32' };
  const actBytes = STORAGE_BYTES[act];
  const cacheBytes = STORAGE_BYTES[cache];
  const outputs: Record<string, ParamType> = c.split
    ? { partAcc: 'ptr', partMax: 'ptr', partSum: 'ptr' }
    : { out: 'ptr' };
  const m = new PtxModule();
  m.entry(
    c.split ? 'attention_split' : 'attention',
    {
      q: 'ptr',
      kCache: 'ptr',
      vCache: 'ptr',
      ...outputs,
      maxSeq: 'u32',
      ...(c.deviceLength ? { seqLenAt: 'ptr' } : { seqLen: 'u32' }),
      splitTokens: 'u32',
      group: 'u32',
      scale: 'f32',
    } as Record<string, ParamType>,
    (k, p) => {
      const ln = laneRegisters(k, layout);
      const head0 = k.mulLo('u32', k.reg('u32'), k.ctaid('y'), heads);
      const kvHead = k.div('u32', k.reg('u32'), head0, loadU32(k, p, 'group'));
      const split = k.ctaid('x');
      const splitTokens = loadU32(k, p, 'splitTokens');
      const t0 = k.mulLo('u32', k.reg('u32'), split, splitTokens);
      let seqLen: R32;
      if (c.deviceLength) {
        const given = loadDeviceU32(k, loadPointer(k, p, 'seqLenAt'));
        // given − 1 < maxSeq as u32: 1 … maxSeq (0 and negatives wrap past it).
        const inRange = k.setp(
          'lt',
          'u32',
          k.reg('pred'),
          k.sub('u32', k.reg('u32'), given, 1),
          loadU32(k, p, 'maxSeq'),
        );
        seqLen = k.selp('u32', k.reg('u32'), given, 0, inRange);
      } else seqLen = loadU32(k, p, 'seqLen');
      // A split past the length has t1 <= t0: it reads nothing and leaves an empty state.
      const t1 = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), t0, splitTokens), seqLen);
      const column = k.mulLo('u32', k.reg('u32'), ln.laneInSlot, width);
      const vectorBytes = (i: number, bytes: number) => bytes * i * L * width;

      // q, pre-multiplied by the scale, in registers: q[h][i] is vector i of this lane.
      const scale = k.ldParam(p.scale as Param<'f32'>);
      const qAt = k.elementAddress(
        loadPointer(k, p, 'q'),
        k.madLo('u32', k.reg('u32'), head0, headDim, column),
        actBytes,
      );
      const q = Array.from({ length: heads }, (_, h) =>
        Array.from({ length: perLane }, (_, i) => {
          const r = k.regs('f32', width);
          const at = addr(qAt, actBytes * h * headDim + vectorBytes(i, actBytes));
          const ok = ln.chunkOk[i];
          loadAsF32(k, act, r, at, ok ? { ok } : {});
          for (const x of r) k.mul('f32', x, x, scale, { rnd: 'rn' });
          return r;
        }),
      );
      const states = Array.from({ length: heads }, () => newState(k, layout));

      // Tokens of this lane: wb + slot + j·W·S for j < unroll, wb = t0 + warp·S + group·W·S·unroll.
      const groupTokens = W * S * unroll;
      const wb = k.madLo('u32', k.reg('u32'), ln.warp, S, t0);
      const row = k.madLo('u32', k.reg('u32'), kvHead, loadU32(k, p, 'maxSeq'), wb);
      k.add('u32', row, row, ln.slot);
      const rowElement = k.madLo('u32', k.reg('u32'), row, headDim, column);
      const kAt = k.elementAddress(loadPointer(k, p, 'kCache'), rowElement, cacheBytes);
      const vAt = k.elementAddress(loadPointer(k, p, 'vCache'), rowElement, cacheBytes);
      const tokenBytes = (j: number) => cacheBytes * j * W * S * headDim;
      const loadCache = (regs: readonly F32[], at: ReturnType<typeof addr>) => loadAsF32(k, cache, regs, at);
      const kRegs = Array.from({ length: unroll }, () =>
        Array.from({ length: perLane }, () => k.regs('f32', width)),
      );
      const vRegs = Array.from({ length: unroll }, () =>
        Array.from({ length: perLane }, () => k.regs('f32', width)),
      );
      // Lanes past the row's end never load: their zeros add nothing to q·k or acc.
      for (let i = 0; i < perLane; i++) {
        if (!ln.chunkOk[i]) continue;
        for (let j = 0; j < unroll; j++)
          for (const x of [...kRegs[j]![i]!, ...vRegs[j]![i]!]) k.mov('f32', x, 0);
      }

      const loadGroup = (valid: readonly Pred[] | undefined) => {
        for (let j = 0; j < unroll; j++) {
          for (let i = 0; i < perLane; i++) {
            const chunk = ln.chunkOk[i];
            const token = valid?.[j];
            const ok = chunk && token ? k.and('pred', k.reg('pred'), chunk, token) : (chunk ?? token);
            const kAtJ = addr(kAt, tokenBytes(j) + vectorBytes(i, cacheBytes));
            const vAtJ = addr(vAt, tokenBytes(j) + vectorBytes(i, cacheBytes));
            if (!ok) {
              loadCache(kRegs[j]![i]!, kAtJ);
              loadCache(vRegs[j]![i]!, vAtJ);
              continue;
            }
            // Tokens past the split read nothing and must not carry the last group's rows (0 · inf).
            if (token) for (const x of [...kRegs[j]![i]!, ...vRegs[j]![i]!]) k.mov('f32', x, 0);
            // Half rows are converted under the same predicate: a skipped row keeps its zeros.
            k.predicated(ok, () => {
              loadCache(kRegs[j]![i]!, kAtJ);
              loadCache(vRegs[j]![i]!, vAtJ);
            });
          }
        }
      };

      const useGroup = (valid: readonly Pred[] | undefined) => {
        // Scores: per token and head, the lane's part of q·k, summed over the slot.
        const scores = kRegs.map((kj) =>
          q.map((qh) => {
            let dot: F32 | undefined;
            qh.forEach((qv, i) => {
              qv.forEach((x, e) => {
                const y = kj[i]![e]!;
                dot = dot ? k.fma('f32', dot, x, y, dot) : k.mul('f32', k.reg('f32'), x, y, { rnd: 'rn' });
              });
            });
            return dot!;
          }),
        );
        for (let offset = L / 2; offset >= 1; offset /= 2) {
          for (const sj of scores) {
            for (const s of sj)
              k.add('f32', s, s, k.shflSync('bfly', k.reg('f32'), s, offset), { rnd: 'rn' });
          }
        }
        states.forEach((st, h) => {
          const hs = scores.map((sj, j) =>
            valid ? k.selp('f32', k.reg('f32'), sj[h]!, Number.NEGATIVE_INFINITY, valid[j]!) : sj[h]!,
          );
          const top = hs.reduce((a, b) => k.max('f32', k.reg('f32'), a, b), st.m);
          const rescale = expF32(k, k.sub('f32', k.reg('f32'), st.m, top, { rnd: 'rn' }));
          const weights = hs.map((s, j) => {
            const w = expF32(k, k.sub('f32', k.reg('f32'), s, top, { rnd: 'rn' }));
            return valid ? k.selp('f32', k.reg('f32'), w, 0, valid[j]!) : w;
          });
          k.mul('f32', st.l, st.l, rescale, { rnd: 'rn' });
          for (const w of weights) k.add('f32', st.l, st.l, w, { rnd: 'rn' });
          st.acc.forEach((v, i) => {
            v.forEach((r, e) => {
              k.mul('f32', r, r, rescale, { rnd: 'rn' });
              weights.forEach((w, j) => {
                k.fma('f32', r, w, vRegs[j]![i]![e]!, r);
              });
            });
          });
          k.mov('f32', st.m, top);
        });
      };

      // Whole groups while the warp's last token of the group is inside the split ...
      const lastOffset = S - 1 + (unroll - 1) * W * S;
      const fullEnd = k.sub('s32', k.reg('u32'), t1, lastOffset);
      k.forRange(
        wb,
        wb,
        fullEnd,
        groupTokens,
        () => {
          loadGroup(undefined);
          useGroup(undefined);
          k.add('u64', kAt, kAt, cacheBytes * groupTokens * headDim);
          k.add('u64', vAt, vAt, cacheBytes * groupTokens * headDim);
        },
        { signed: true },
      );
      // ... then at most one partial group, each token checked.
      const more = k.setp('lt', 'u32', k.reg('pred'), wb, t1);
      k.ifThen(more, () => {
        const first = k.add('u32', k.reg('u32'), wb, ln.slot);
        const valid = Array.from({ length: unroll }, (_, j) =>
          k.setp('lt', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), first, j * W * S), t1),
        );
        loadGroup(valid);
        useGroup(valid);
      });

      mergeSlots(k, layout, states);
      if (c.split) {
        const outAcc = loadPointer(k, p, 'partAcc');
        const outMax = loadPointer(k, p, 'partMax');
        const outSum = loadPointer(k, p, 'partSum');
        const splits = k.nctaid('x');
        combineWarps(k, layout, ln, W, headDim, states, (r) => {
          // State (head, split) of [nHeads, splits]; its acc row of headDim after it.
          const state = k.madLo(
            'u32',
            k.reg('u32'),
            k.add('u32', k.reg('u32'), head0, r.head),
            splits,
            split,
          );
          const at = k.madLo('u32', k.reg('u32'), state, headDim, r.dim);
          k.stGlobal('f32', k.elementAddress(outAcc, at, 4), r.acc);
          const firstDim = k.setp('eq', 'u32', k.reg('pred'), r.dim, 0);
          k.predicated(firstDim, () => {
            k.stGlobal('f32', k.elementAddress(outMax, state, 4), r.m);
            k.stGlobal('f32', k.elementAddress(outSum, state, 4), r.l);
          });
        });
      } else {
        const out = loadPointer(k, p, 'out');
        combineWarps(k, layout, ln, W, headDim, states, (r) => {
          const at = k.madLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), head0, r.head), headDim, r.dim);
          storeFromF32(
            k,
            act,
            k.elementAddress(out, at, actBytes),
            k.div('f32', k.reg('f32'), r.acc, r.l, 'rn'),
          );
        });
      }
    },
    { maxThreadsPerBlock: 32 * W },
  );
  return m;
}

// ---- incremental attention: the merge of splits -----------------------------------------

/**
 * out[h] = Σ_s e^(m_s − M) · acc_s / Σ_s e^(m_s − M) · l_s over the splits s
 * of head h (M the largest m_s), one block per head: the slots of its warps
 * take splits in turn, as the attention kernel's take tokens.
 */
export function mergeModule(headDim: number, width: VectorWidth, outType: FloatStorage = 'f32'): PtxModule {
  const layout = laneLayout(headDim, width);
  const { lanes: L, slots: S, perLane } = layout;
  const W = MERGE_WARPS;
  const m = new PtxModule();
  m.entry(
    'attention_merge',
    { partAcc: 'ptr', partMax: 'ptr', partSum: 'ptr', out: 'ptr', splits: 'u32' },
    (k, p) => {
      const ln = laneRegisters(k, layout);
      const head = k.ctaid('x');
      const splits = k.ldParam(p.splits);
      const partAcc = k.globalPointer(p.partAcc);
      const partMax = k.globalPointer(p.partMax);
      const partSum = k.globalPointer(p.partSum);
      const state = newState(k, layout);
      const column = k.mulLo('u32', k.reg('u32'), ln.laneInSlot, width);
      const s = k.madLo('u32', k.reg('u32'), ln.warp, S, ln.slot);
      const rows = k.mulLo('u32', k.reg('u32'), head, splits);
      // A slot takes `batch` splits per step, all their loads issued before
      // the first is used, so the step waits for memory once.
      const step = W * S;
      const batch = Math.max(1, Math.min(Math.ceil(MAX_SPLITS / step), Math.floor(32 / (perLane * width))));
      const loaded = Array.from({ length: batch }, () => ({
        m: k.reg('f32'),
        l: k.reg('f32'),
        acc: Array.from({ length: perLane }, () => k.regs('f32', width)),
      }));
      k.forRange(s, s, splits, step * batch, () => {
        loaded.forEach((split, b) => {
          const index = k.add('u32', k.reg('u32'), s, b * step);
          const row = k.add('u32', k.reg('u32'), rows, index);
          const inside = k.setp('lt', 'u32', k.reg('pred'), index, splits);
          // A missing split weighs e^(LOWEST − M) = 0.
          k.mov('f32', split.m, LOWEST);
          k.mov('f32', split.l, 0);
          for (const v of split.acc) for (const x of v) k.mov('f32', x, 0);
          k.predicated(inside, () => {
            k.ldGlobal('f32', split.m, k.elementAddress(partMax, row, 4));
            k.ldGlobal('f32', split.l, k.elementAddress(partSum, row, 4));
          });
          const at = k.elementAddress(partAcc, k.madLo('u32', k.reg('u32'), row, headDim, column), 4);
          split.acc.forEach((r, i) => {
            const ok = ln.chunkOk[i] ? k.and('pred', k.reg('pred'), inside, ln.chunkOk[i]!) : inside;
            k.predicated(ok, () => k.ldGlobal('f32', asVector(r), addr(at, 4 * i * L * width)));
          });
        });
        for (const split of loaded) mergeInto(k, state, split.m, split.l, split.acc);
      });
      mergeSlots(k, layout, [state]);
      const out = k.globalPointer(p.out);
      combineWarps(k, layout, ln, W, headDim, [state], (r) => {
        const at = k.madLo('u32', k.reg('u32'), head, headDim, r.dim);
        const value = k.div('f32', k.reg('f32'), r.acc, r.l, 'rn');
        storeFromF32(k, outType, k.elementAddress(out, at, STORAGE_BYTES[outType]), value);
      });
    },
    { maxThreadsPerBlock: 32 * W },
  );
  return m;
}

// ---- incremental attention: launch ------------------------------------------------------

/**
 * Records the attention of `q` over the first `seqLen` rows of the caches
 * into `out`; `seqLen` is a number or a one-element i32 operand read when
 * the kernels run.
 */
export function recordAttention(
  encoder: KernelEncoder,
  q: Operand,
  kCache: Operand,
  vCache: Operand,
  out: Operand,
  seqLen: number | Operand,
  scale: number,
): void {
  const [nHeads, headDim] = q.shape as [number, number];
  const [nKvHeads, maxSeq] = kCache.shape as [number, number, number];
  if (out.size === 0) return;
  if (headDim > MAX_HEAD_DIM) {
    throw new UnsupportedOnBackendError('head dimension too large for the attention kernel', {
      operation: 'incrementalAttention',
      argument: 'q',
      expected: `headDim <= ${MAX_HEAD_DIM}`,
      actual: String(headDim),
    });
  }
  checkElementCount('incrementalAttention', 'kCache', kCache.size);
  const width = vectorWidth(headDim, [q.ptr, kCache.ptr, vCache.ptr]);
  const onDevice = typeof seqLen !== 'number';
  // A length on the device is known only to be at most maxSeq: plan for that.
  const planned = planAttention(
    encoder.device,
    { nHeads, nKvHeads, headDim, seqLen: onDevice ? maxSeq : seqLen },
    width,
  );
  const types = { act: storageOf(q), cache: storageOf(kCache) };
  const typed = types.act === 'f32' && types.cache === 'f32' ? {} : { types };
  const plan = {
    ...planned,
    config: { ...planned.config, ...(onDevice ? { deviceLength: true } : {}), ...typed },
  };
  const c = plan.config;
  const shared = {
    q,
    kCache,
    vCache,
    maxSeq,
    ...(onDevice ? { seqLenAt: seqLen } : { seqLen }),
    splitTokens: plan.splitTokens,
    group: nHeads / nKvHeads,
    scale: scale === 0 ? 1 / Math.sqrt(headDim) : scale,
  };
  const geometry = { grid: [plan.splits, plan.headBlocks] as const, block: 32 * ATTENTION_WARPS };
  if (!c.split) {
    encoder.launch({
      key: attentionKey(c),
      module: () => attentionModule(c),
      entry: 'attention',
      ...geometry,
      args: { ...shared, out },
    });
    return;
  }
  // Partial states in one scratch block: acc rows [nHeads, splits, headDim], then max and sum.
  const states = nHeads * plan.splits;
  const partAcc = encoder.scratch(4 * states * (headDim + 2));
  const partMax = partAcc + BigInt(4 * states * headDim);
  const partSum = partMax + BigInt(4 * states);
  encoder.launch({
    key: attentionKey(c),
    module: () => attentionModule(c),
    entry: 'attention_split',
    ...geometry,
    args: { ...shared, partAcc, partMax, partSum },
  });
  // The scratch rows are aligned; the merge reads them as the attention read the caches.
  encoder.launch({
    key: mergeKey(headDim, width, types.act),
    module: () => mergeModule(headDim, width, types.act),
    entry: 'attention_merge',
    grid: nHeads,
    block: 32 * MERGE_WARPS,
    args: { partAcc, partMax, partSum, out, splits: plan.splits },
  });
}

export const attentionKernel = cudaKernel(
  incrementalAttention,
  (encoder, { inputs, outputs, attrs }) => {
    const seqLen = inputs[3] ?? attrs.seqLen;
    recordAttention(encoder, inputs[0]!, inputs[1]!, inputs[2]!, outputs[0]!, seqLen, attrs.scale);
  },
  { dtypes: FLOAT },
);
