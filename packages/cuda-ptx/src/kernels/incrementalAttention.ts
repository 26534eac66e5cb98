import { FLOAT, incrementalAttention, UnsupportedOnBackendError } from '@rayo/core';
import { cudaKernel, type KernelEncoder, type LaunchValue, type Operand } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type Pred } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { mergeInLastBlock, splitScratch, splitTokensFor } from './attentionLastBlock.js';
import { decodeMmaApplies } from './attentionMmaPlan.js';
import {
  ATTENTION_WARPS,
  type AttentionConfig,
  type AttentionPlan,
  type AttentionTuning,
  attentionKey,
  laneLayout,
  MAX_HEAD_DIM,
  MIN_SPLIT_TOKENS,
  planAttention,
} from './attentionPlan.js';
import { attendedLength, cacheRows, normalised, PAGED_PARAMS, pagedRows } from './attentionRows.js';
import { combineWarps, laneRegisters, mergeSlots, newState } from './attentionStates.js';
import { checkElementCount, loadPointer, loadU32 } from './common.js';
import { vectorWidth } from './decodingAccess.js';
import { launchDecodeMma } from './incrementalAttentionMma.js';
import { expF32 } from './math.js';
import { loadAsF32, STORAGE_BYTES, storageOf, storeFromF32 } from './storage.js';

// One query token's attention over the KV cache as flash-decoding: the cached
// sequence is split across blocks, each leaving a partial softmax state that
// the last block to finish merges; short caches take one pass.
//
// The length may instead be read from a device tensor when the kernel runs, so
// that a recorded graph replays for the value last written there: the split
// grid is sized by the cache (its bound), the kernel spreads the length it
// reads over that grid, the merge reads only the splits that hold tokens,
// and a length outside 1 … maxSeq reads nothing and leaves 0 / 0.

// ---- incremental attention: the split pass ----------------------------------------------

/**
 * Attention of `headsPerBlock` query heads (sharing one kv head) over the
 * tokens [split · splitTokens, +splitTokens) ∩ [0, seqLen), grid
 * (splits, nHeads / headsPerBlock). Each slot of each warp keeps online
 * softmax states over the tokens it reads: per load group it loads `unroll`
 * K and V rows, reduces q·k over the slot's lanes with butterflies, and
 * rescales its sums once per group. Then slots and warps are merged, and
 * the block writes the normalised output (one pass) or its state
 * (max, sum, unnormalised acc), and the last block of the head block to
 * finish merges the splits' states into the output.
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
    ? { partAcc: 'ptr', partMax: 'ptr', partSum: 'ptr', counters: 'ptr', out: 'ptr' }
    : { out: 'ptr' };
  const m = new PtxModule();
  m.entry(
    c.split ? 'attention_split' : 'attention',
    {
      q: 'ptr',
      kCache: 'ptr',
      vCache: 'ptr',
      ...outputs,
      ...(c.paged
        ? PAGED_PARAMS
        : { maxSeq: 'u32', ...(c.deviceLength ? { seqLenAt: 'ptr' } : { seqLen: 'u32' }) }),
      splitTokens: 'u32',
      group: 'u32',
      scale: 'f32',
    } as Record<string, ParamType>,
    (k, p) => {
      const ln = laneRegisters(k, layout);
      const head0 = k.mulLo('u32', k.reg('u32'), k.ctaid('y'), heads);
      const kvHead = k.div('u32', k.reg('u32'), head0, loadU32(k, p, 'group'));
      // Paged: sequence b along z, whose heads are rows b·nHeads … of q, out and the states.
      const sequence = c.paged ? k.ctaid('z') : undefined;
      const row0 = sequence
        ? k.madLo('u32', k.reg('u32'), sequence, k.mulLo('u32', k.reg('u32'), k.nctaid('y'), heads), head0)
        : head0;
      const split = k.ctaid('x');
      const seqLen = attendedLength(k, p, {
        ...(sequence ? { sequence } : {}),
        deviceLength: c.deviceLength === true,
        fromPosition: c.fromPosition === true,
      });
      // A length read as the kernel runs is spread over the grid (splitTokens is then the least a split takes).
      const splitTokens =
        c.split && (c.paged || c.deviceLength)
          ? splitTokensFor(k, seqLen, loadU32(k, p, 'splitTokens'), k.nctaid('x'), W * S * unroll)
          : loadU32(k, p, 'splitTokens');
      const t0 = k.mulLo('u32', k.reg('u32'), split, splitTokens);
      // A split past the length has t1 <= t0: it reads nothing and leaves an empty state.
      const t1 = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), t0, splitTokens), seqLen);
      const column = k.mulLo('u32', k.reg('u32'), ln.laneInSlot, width);
      const vectorBytes = (i: number, bytes: number) => bytes * i * L * width;

      // q, pre-multiplied by the scale, in registers: q[h][i] is vector i of this lane.
      const scale = k.ldParam(p.scale as Param<'f32'>);
      const qAt = k.elementAddress(
        loadPointer(k, p, 'q'),
        k.madLo('u32', k.reg('u32'), row0, headDim, column),
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
      const tokenBytes = (j: number) => cacheBytes * j * W * S * headDim;
      const rows = c.paged
        ? pagedRows(k, p, {
            sequence: sequence!,
            kvHead,
            wb,
            slot: ln.slot,
            column,
            headDim,
            cacheBytes,
            ...(c.pageShift === undefined ? {} : { pageShift: c.pageShift }),
          })
        : cacheRows(k, p, { kvHead, wb, slot: ln.slot, column, headDim, cacheBytes });
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
          const row = rows.at(j * W * S, tokenBytes(j), valid?.[j]);
          for (let i = 0; i < perLane; i++) {
            const chunk = ln.chunkOk[i];
            const token = row.ok;
            const ok = chunk && token ? k.and('pred', k.reg('pred'), chunk, token) : (chunk ?? token);
            const kAtJ = addr(row.k, row.offset + vectorBytes(i, cacheBytes));
            const vAtJ = addr(row.v, row.offset + vectorBytes(i, cacheBytes));
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
          rows.advance(cacheBytes * groupTokens * headDim);
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
          const state = k.madLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, r.head), splits, split);
          const at = k.madLo('u32', k.reg('u32'), state, headDim, r.dim);
          k.stGlobal('f32', k.elementAddress(outAcc, at, 4), r.acc);
          const firstDim = k.setp('eq', 'u32', k.reg('pred'), r.dim, 0);
          k.predicated(firstDim, () => {
            k.stGlobal('f32', k.elementAddress(outMax, state, 4), r.m);
            k.stGlobal('f32', k.elementAddress(outSum, state, 4), r.l);
          });
        });
        mergeInLastBlock(k, p, {
          sequence,
          seqLen,
          splitTokens,
          flag: k.sharedAddress(k.sharedArray('last_block', 'u32', 1)),
          partials: k.sharedAddress(k.sharedArray('merge_partials', 'f32', (2 + width) * 32 * W, 16)),
          firstRow: row0,
          rows: heads,
          headDim,
          width,
          threads: 32 * W,
          outType: act,
          zeroEmpty: c.paged === true,
        });
      } else {
        const out = loadPointer(k, p, 'out');
        combineWarps(k, layout, ln, W, headDim, states, (r) => {
          const at = k.madLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, r.head), headDim, r.dim);
          storeFromF32(k, act, k.elementAddress(out, at, actBytes), normalised(k, r.acc, r.l, c.paged));
        });
      }
    },
    { maxThreadsPerBlock: 32 * W, triggerDependents: true },
  );
  return m;
}

// ---- incremental attention: launch ------------------------------------------------------

/** Throws where a head is wider than the attention kernel keeps in registers. */
export function checkHeadDim(operation: string, headDim: number): void {
  if (headDim > MAX_HEAD_DIM) {
    throw new UnsupportedOnBackendError('head dimension too large for the attention kernel', {
      operation,
      argument: 'q',
      expected: `headDim <= ${MAX_HEAD_DIM}`,
      actual: String(headDim),
    });
  }
}

/**
 * Launches a planned attention: one pass into `out`, or the split pass into
 * scratch states and their merge. `rows` is the number of query heads of all
 * sequences (B · nHeads), `batch` the grid's extent along z; `zeroEmpty` makes
 * a row that attended nothing 0.
 */
export function launchAttention(
  encoder: KernelEncoder,
  plan: AttentionPlan,
  args: Readonly<Record<string, LaunchValue>>,
  out: Operand,
  geometry: { readonly rows: number; readonly batch: number },
): void {
  const c = plan.config;
  const grid =
    geometry.batch === 1
      ? ([plan.splits, plan.headBlocks] as const)
      : ([plan.splits, plan.headBlocks, geometry.batch] as const);
  const launch = {
    key: attentionKey(c),
    module: () => attentionModule(c),
    grid,
    block: 32 * ATTENTION_WARPS,
  };
  if (!c.split) {
    encoder.launch({ ...launch, entry: 'attention', args: { ...args, out } });
    return;
  }
  const scratch = splitScratch(encoder, {
    rows: geometry.rows,
    splits: plan.splits,
    headDim: c.headDim,
    tickets: plan.headBlocks * geometry.batch,
  });
  // A length read as the kernel runs sizes the splits there, from the least a split takes.
  const least: Readonly<Record<string, LaunchValue>> =
    c.paged || c.deviceLength
      ? { splitTokens: attentionTuning(encoder).minSplitTokens ?? MIN_SPLIT_TOKENS }
      : {};
  encoder.launch({ ...launch, entry: 'attention_split', args: { ...args, ...least, ...scratch, out } });
}

/**
 * Records the attention of `q` over the first `seqLen` rows of the caches
 * into `out`; `seqLen` is a number or a one-element i32 operand read when
 * the kernels run (`fromPosition`: that operand holds the last row's
 * position, one less than the length).
 */
export function recordAttention(
  encoder: KernelEncoder,
  q: Operand,
  kCache: Operand,
  vCache: Operand,
  out: Operand,
  seqLen: number | Operand,
  scale: number,
  fromPosition = false,
): void {
  const [nHeads, headDim] = q.shape as [number, number];
  const [nKvHeads, maxSeq] = kCache.shape as [number, number, number];
  if (out.size === 0) return;
  checkHeadDim('incrementalAttention', headDim);
  checkElementCount('incrementalAttention', 'kCache', kCache.size);
  const onDevice = typeof seqLen !== 'number';
  const shape = { nHeads, nKvHeads, headDim };
  if (decodeMmaApplies(encoder, shape, q, kCache, vCache)) {
    launchDecodeMma(
      encoder,
      shape,
      { q, kCache, vCache, scale: scaleOf(scale, headDim) },
      { kind: 'cache', maxSeq, seqLen, fromPosition },
      out,
    );
    return;
  }
  const width = vectorWidth(headDim, [q.ptr, kCache.ptr, vCache.ptr]);
  // A length on the device is known only to be at most maxSeq: plan for that.
  const planned = planAttention(
    encoder.device,
    { nHeads, nKvHeads, headDim, seqLen: onDevice ? maxSeq : seqLen },
    width,
    attentionTuning(encoder),
  );
  const plan = {
    ...planned,
    config: {
      ...planned.config,
      ...(onDevice ? { deviceLength: true, ...(fromPosition ? { fromPosition } : {}) } : {}),
      ...attentionTypes(q, kCache),
    },
  };
  const args = {
    q,
    kCache,
    vCache,
    maxSeq,
    ...(onDevice ? { seqLenAt: seqLen } : { seqLen }),
    splitTokens: plan.splitTokens,
    group: nHeads / nKvHeads,
    scale: scaleOf(scale, headDim),
  };
  launchAttention(encoder, plan, args, out, { rows: nHeads, batch: 1 });
}

/** The scale attribute's value: 0 means 1 / √headDim. */
export function scaleOf(scale: number, headDim: number): number {
  return scale === 0 ? 1 / Math.sqrt(headDim) : scale;
}

/** The backend's switches for the plan: the fewest tokens a split, the most splits and the tokens a load group. */
export function attentionTuning(encoder: KernelEncoder): AttentionTuning {
  const {
    attentionSplitTokens: minSplitTokens,
    attentionMaxSplits: maxSplits,
    attentionUnroll: unroll,
  } = encoder.tuning;
  return Object.assign(
    {},
    minSplitTokens === undefined ? {} : { minSplitTokens },
    maxSplits === undefined ? {} : { maxSplits },
    unroll === undefined ? {} : { unroll },
  );
}

/** The config's storage types: none where q and the caches are f32. */
export function attentionTypes(q: Operand, kCache: Operand): Pick<AttentionConfig, 'types'> {
  const types = { act: storageOf(q), cache: storageOf(kCache) };
  return types.act === 'f32' && types.cache === 'f32' ? {} : { types };
}

export const attentionKernel = cudaKernel(
  incrementalAttention,
  (encoder, { inputs, outputs, attrs }) => {
    const seqLen = inputs[3] ?? attrs.seqLen;
    recordAttention(encoder, inputs[0]!, inputs[1]!, inputs[2]!, outputs[0]!, seqLen, attrs.scale);
  },
  { dtypes: FLOAT },
);
