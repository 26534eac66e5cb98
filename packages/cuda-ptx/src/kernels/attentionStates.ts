import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type Pred, type R32 } from '../ptx/operands.js';
import type { LaneLayout } from './attentionPlan.js';
import { asVector } from './common.js';
import { expF32 } from './math.js';

// The online-softmax states of incrementalAttention's kernels, and their
// merges across a warp's slots and a block's warps.

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
export const LOWEST = -3.4028234663852886e38;

export function newState(k: KernelBuilder, layout: LaneLayout): SoftmaxState {
  const s = {
    m: k.mov('f32', k.reg('f32'), LOWEST),
    l: k.mov('f32', k.reg('f32'), 0),
    acc: Array.from({ length: layout.perLane }, () => k.regs('f32', layout.width)),
  };
  for (const v of s.acc) for (const r of v) k.mov('f32', r, 0);
  return s;
}

/** s ← s merged with another state (m', l', acc'): both rescaled to the larger max. */
export function mergeInto(
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

export function laneRegisters(k: KernelBuilder, layout: LaneLayout): Lanes {
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
export function mergeSlots(k: KernelBuilder, layout: LaneLayout, states: readonly SoftmaxState[]): void {
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
export function combineWarps(
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
