import type { KernelEncoder, Operand } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr } from '../ptx/operands.js';
import { laneLayout, MAX_SPLITS, MERGE_WARPS, mergeKey } from './attentionPlan.js';
import { normalised } from './attentionRows.js';
import { combineWarps, LOWEST, laneRegisters, mergeInto, mergeSlots, newState } from './attentionStates.js';
import { asVector } from './common.js';
import type { VectorWidth } from './decodingAccess.js';
import { type FloatStorage, STORAGE_BYTES, storeFromF32 } from './storage.js';

// The second kernel of split decode attention: the splits' partial softmax
// states of each query head merged into its output.

/**
 * out[h] = Σ_s e^(m_s − M) · acc_s / Σ_s e^(m_s − M) · l_s over the splits s
 * of head h (M the largest m_s), one block per head: the slots of its warps
 * take splits in turn, as the attention kernel's take tokens.
 */
export function mergeModule(
  headDim: number,
  width: VectorWidth,
  outType: FloatStorage = 'f32',
  zeroEmpty = false,
): PtxModule {
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
        const value = normalised(k, r.acc, r.l, zeroEmpty);
        storeFromF32(k, outType, k.elementAddress(out, at, STORAGE_BYTES[outType]), value);
      });
    },
    { maxThreadsPerBlock: 32 * W, triggerDependents: true },
  );
  return m;
}

/** Where a split pass leaves its partial states: acc rows [rows, splits, headDim], then max and sum. */
export interface SplitStates {
  readonly partAcc: bigint;
  readonly partMax: bigint;
  readonly partSum: bigint;
}

/**
 * Runs `launchSplit` into scratch states for `splits` splits of `rows`
 * query heads, then the merge kernel into `out`.
 */
export function launchSplitAndMerge(
  encoder: KernelEncoder,
  s: {
    readonly rows: number;
    readonly splits: number;
    readonly headDim: number;
    readonly width: VectorWidth;
    readonly act: FloatStorage;
    readonly zeroEmpty: boolean;
  },
  out: Operand,
  launchSplit: (states: SplitStates) => void,
): void {
  const states = s.rows * s.splits;
  const partAcc = encoder.scratch(4 * states * (s.headDim + 2));
  const partMax = partAcc + BigInt(4 * states * s.headDim);
  const partSum = partMax + BigInt(4 * states);
  launchSplit({ partAcc, partMax, partSum });
  // The scratch rows are aligned; the merge reads them as the attention read the caches.
  encoder.launch({
    key: mergeKey(s.headDim, s.width, s.act, s.zeroEmpty),
    module: () => mergeModule(s.headDim, s.width, s.act, s.zeroEmpty),
    entry: 'attention_merge',
    grid: s.rows,
    block: 32 * MERGE_WARPS,
    args: { partAcc, partMax, partSum, out, splits: s.splits },
  });
}
