import type { KernelEncoder } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32, Param, Pred, R32, R64 } from '../ptx/operands.js';
import { addr } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { normalised } from './attentionRows.js';
import { LOWEST } from './attentionStates.js';
import { asVector, loadPointer } from './common.js';
import { type FloatStorage, STORAGE_BYTES, storeFromF32 } from './storage.js';

// Split decode attention in one kernel: every block of a split grid leaves
// its partial softmax states, then takes a ticket from a completion counter;
// the block holding the last ticket merges the splits' states into the
// output. The counter is `atom.inc` wrapping at the grid's split count, so
// it is zero again once every block has taken one, ready for the next launch
// (the encoder's `completionCounters`). A length read on the device sizes
// the splits when the kernel runs, so a grid planned for a whole cache
// spreads a short sequence over its blocks instead of leaving it to the
// first one.

/**
 * Tokens a split takes when the length is known only as the kernel runs:
 * the length spread evenly over the grid's `splits`, in whole `round`s,
 * and at least `least`.
 */
export function splitTokensFor(k: KernelBuilder, seqLen: R32, least: R32, splits: R32, round: number): R32 {
  const share = k.div(
    'u32',
    k.reg('u32'),
    k.add('u32', k.reg('u32'), seqLen, k.sub('u32', k.reg('u32'), splits, 1)),
    splits,
  );
  const rounds = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), share, round - 1), round);
  return k.max('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), rounds, round), least);
}

/**
 * Whether this block is the last of `splits` to finish its states: every
 * thread's stores are ordered before the ticket (a barrier, then a release
 * fence by the ticket's taker), and the last block's taker fences again
 * (acquire) before the barrier after which its threads read the others'
 * states. `flag` is a word of shared memory no thread reads or writes at
 * this point.
 */
export function isLastBlock(k: KernelBuilder, counter: R64, splits: R32, flag: R32): Pred {
  k.barSync();
  const first = k.setp('eq', 'u32', k.reg('pred'), k.tid(), 0);
  k.ifThen(first, () => {
    // Release: the block's states (ordered before by the barrier) before the ticket.
    k.fence('acq_rel', 'gpu');
    const ticket = k.atom(
      'global',
      'inc',
      'u32',
      k.reg('u32'),
      counter,
      k.sub('u32', k.reg('u32'), splits, 1),
    );
    const last = k.setp('eq', 'u32', k.reg('pred'), ticket, k.sub('u32', k.reg('u32'), splits, 1));
    k.stShared('u32', flag, k.selp('u32', k.reg('u32'), 1, 0, last));
    // Acquire, in the last block only: the other blocks' states before its threads (after the barrier) read them.
    k.ifThen(last, () => k.fence('acq_rel', 'gpu'));
  });
  k.barSync();
  return k.setp('ne', 'u32', k.reg('pred'), k.ldShared('u32', k.reg('u32'), flag), 0);
}

/** The states of a split grid and where their merge goes. */
export interface SplitMerge {
  /** acc [rows, splits, headDim], max and sum [rows, splits], f32. */
  readonly partAcc: R64;
  readonly partMax: R64;
  readonly partSum: R64;
  /** The grid's splits: the stride of a row's states. */
  readonly splits: R32;
  /** Splits that hold tokens (the first ones); the rest are not read. */
  readonly used: R32;
  /** The block's first row (query head) and how many rows it merges. */
  readonly firstRow: R32;
  readonly rows: number;
  readonly headDim: number;
  /** Dimensions a thread merges at once (one vector load a state): a divisor of headDim. */
  readonly width: 1 | 2 | 4;
  readonly threads: number;
  readonly out: R64;
  readonly outType: FloatStorage;
  /** Whether a row without tokens is 0 (else 0 / 0). */
  readonly zeroEmpty: boolean;
  /** Shared memory for the threads' partial states, (2 + width) · threads floats, free at this point. */
  readonly partials: R32;
}

/**
 * Splits whose loads a thread issues together before it merges them. On an
 * H200, 16 took the static 1B-head cases (d 64, 8,192 and 32,768 tokens)
 * 1 µs a call faster but the d 128 and paged cases 1.2–3 µs slower, and the
 * 1B decoding at 2,048 and 8,320 cached rows 1–2% slower.
 */
const MERGE_BATCH = 8;

/** A running softmax state: max, sum and the weighted values of `width` dimensions. */
interface Running {
  readonly m: F32;
  readonly l: F32;
  readonly acc: readonly F32[];
}

/** `into` ← into ⊕ the states in `more` (each weighs e^(m − M), M the largest m). */
function absorb(k: KernelBuilder, into: Running, more: readonly Running[], log2e: F32): void {
  const top = more.reduce((m, b) => k.max('f32', k.reg('f32'), m, b.m), into.m);
  const weight = (m: F32) =>
    k.ex2(
      k.reg('f32'),
      k.mul('f32', k.reg('f32'), k.sub('f32', k.reg('f32'), m, top, { rnd: 'rn' }), log2e, { rnd: 'rn' }),
      { ftz: true },
    );
  const kept = weight(into.m);
  k.mul('f32', into.l, into.l, kept, { rnd: 'rn' });
  for (const a of into.acc) k.mul('f32', a, a, kept, { rnd: 'rn' });
  for (const b of more) {
    const w = weight(b.m);
    k.fma('f32', into.l, b.l, w, into.l);
    into.acc.forEach((a, e) => {
      k.fma('f32', a, b.acc[e]!, w, a);
    });
  }
  k.mov('f32', into.m, top);
}

/**
 * out[row] = Σ_s e^(m_s − M) · acc_s / Σ_s e^(m_s − M) · l_s over the used
 * splits s. A thread takes `width` dimensions of one row (a chunk); where
 * the chunks leave threads over, `slices` threads share a chunk's splits
 * (split j to slice j mod slices) and meet in shared memory at `partials`.
 * Each thread loads a batch of its splits at once, so it waits on memory
 * once a batch.
 */
export function mergeSplitStates(k: KernelBuilder, s: SplitMerge): void {
  const { headDim: hd, width } = s;
  const chunks = (s.rows * hd) / width;
  const slices = Math.max(1, Math.floor(s.threads / chunks));
  const log2e = k.mov('f32', k.reg('f32'), Math.LOG2E);
  const place = (chunk: R32) => {
    const element = k.mulLo('u32', k.reg('u32'), chunk, width);
    const row = k.add('u32', k.reg('u32'), s.firstRow, k.div('u32', k.reg('u32'), element, hd));
    return { row, dim: k.rem('u32', k.reg('u32'), element, hd) };
  };
  const fresh = (): Running => ({
    m: k.mov('f32', k.reg('f32'), LOWEST),
    l: k.mov('f32', k.reg('f32'), 0),
    acc: Array.from({ length: width }, () => k.mov('f32', k.reg('f32'), 0)),
  });
  // This thread's splits slice, slice + slices, … of the chunk at (row, dim).
  const mergeSlice = (row: R32, dim: R32, slice: R32 | number): Running => {
    const rowStates = k.mulLo('u32', k.reg('u32'), row, s.splits);
    const running = fresh();
    const batch = Array.from({ length: MERGE_BATCH }, () => ({
      m: k.reg('f32'),
      l: k.reg('f32'),
      acc: k.regs('f32', width),
    }));
    const s0 = k.reg('u32');
    k.forRange(s0, slice, s.used, MERGE_BATCH * slices, () => {
      batch.forEach((b, j) => {
        const split = k.add('u32', k.reg('u32'), s0, j * slices);
        const inside = k.setp('lt', 'u32', k.reg('pred'), split, s.used);
        // A split past the used ones weighs e^(LOWEST − M) = 0.
        k.mov('f32', b.m, LOWEST);
        k.mov('f32', b.l, 0);
        for (const x of b.acc) k.mov('f32', x, 0);
        const state = k.add('u32', k.reg('u32'), rowStates, split);
        k.predicated(inside, () => {
          k.ldGlobal('f32', b.m, k.elementAddress(s.partMax, state, 4), { cache: 'cg' });
          k.ldGlobal('f32', b.l, k.elementAddress(s.partSum, state, 4), { cache: 'cg' });
          k.ldGlobal(
            'f32',
            asVector(b.acc),
            k.elementAddress(s.partAcc, k.madLo('u32', k.reg('u32'), state, hd, dim), 4),
            { cache: 'cg' },
          );
        });
      });
      absorb(k, running, batch, log2e);
    });
    return running;
  };
  const store = (row: R32, dim: R32, r: Running) => {
    const bytes = STORAGE_BYTES[s.outType];
    const at = k.elementAddress(s.out, k.madLo('u32', k.reg('u32'), row, hd, dim), bytes);
    r.acc.forEach((a, e) => {
      storeFromF32(k, s.outType, addr(at, e * bytes), normalised(k, a, r.l, s.zeroEmpty));
    });
  };
  if (slices === 1) {
    const chunk = k.reg('u32');
    k.forRange(chunk, k.tid(), chunks, s.threads, () => {
      const { row, dim } = place(chunk);
      store(row, dim, mergeSlice(row, dim, 0));
    });
    return;
  }
  // Partial states [slice][chunk]: max, sum, then width values, one row of floats each.
  const tid = k.tid();
  const chunk = k.rem('u32', k.reg('u32'), tid, chunks);
  const slice = k.div('u32', k.reg('u32'), tid, chunks);
  const { row, dim } = place(chunk);
  const lanes = chunks * slices;
  const partialAt = (field: number, index: R32) =>
    k.madLo('u32', k.reg('u32'), index, 4, k.add('u32', k.reg('u32'), s.partials, field * lanes * 4));
  const mine = fresh();
  k.ifThen(k.setp('lt', 'u32', k.reg('pred'), tid, lanes), () => {
    const r = mergeSlice(row, dim, slice);
    for (const [i, x] of [r.m, r.l, ...r.acc].entries()) k.stShared('f32', partialAt(i, tid), x);
    k.mov('f32', mine.m, r.m);
    k.mov('f32', mine.l, r.l);
    mine.acc.forEach((a, e) => {
      k.mov('f32', a, r.acc[e]!);
    });
  });
  k.barSync();
  k.ifThen(k.setp('lt', 'u32', k.reg('pred'), tid, chunks), () => {
    const others = Array.from({ length: slices - 1 }, (_, j) => {
      const index = k.add('u32', k.reg('u32'), tid, (j + 1) * chunks);
      const [m, l, ...acc] = Array.from({ length: 2 + width }, (_, i) =>
        k.ldShared('f32', k.reg('f32'), partialAt(i, index)),
      );
      return { m: m!, l: l!, acc };
    });
    absorb(k, mine, others, log2e);
    store(row, dim, mine);
  });
}

/**
 * The end of a split entry (parameters partAcc, partMax, partSum, counters
 * and out): the block takes its ticket from counter ctaid.y (of sequence
 * `sequence`'s, paged), and the last of the row's splits merges the ones
 * that hold tokens of the length into the output.
 */
export function mergeInLastBlock(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  m: Omit<SplitMerge, 'partAcc' | 'partMax' | 'partSum' | 'splits' | 'used' | 'out'> & {
    readonly sequence: R32 | undefined;
    readonly seqLen: R32;
    readonly splitTokens: R32;
    /** A word of shared memory free at this point, apart from `partials`. */
    readonly flag: R32;
  },
): void {
  const splits = k.nctaid('x');
  const ticket = m.sequence
    ? k.madLo('u32', k.reg('u32'), m.sequence, k.nctaid('y'), k.ctaid('y'))
    : k.ctaid('y');
  const counter = k.elementAddress(loadPointer(k, p, 'counters'), ticket, 4);
  k.ifThen(isLastBlock(k, counter, splits, m.flag), () => {
    const filled = k.div(
      'u32',
      k.reg('u32'),
      k.add('u32', k.reg('u32'), m.seqLen, k.sub('u32', k.reg('u32'), m.splitTokens, 1)),
      m.splitTokens,
    );
    mergeSplitStates(k, {
      ...m,
      partAcc: loadPointer(k, p, 'partAcc'),
      partMax: loadPointer(k, p, 'partMax'),
      partSum: loadPointer(k, p, 'partSum'),
      splits,
      used: k.min('u32', k.reg('u32'), filled, splits),
      out: loadPointer(k, p, 'out'),
    });
  });
}

/** Where a split grid leaves its states and takes its tickets (the entry's parameters of those names). */
export interface SplitScratch {
  readonly partAcc: bigint;
  readonly partMax: bigint;
  readonly partSum: bigint;
  readonly counters: bigint;
}

/**
 * Scratch for `rows` query heads' states over `splits` (acc [rows, splits,
 * headDim], then max and sum) and one completion counter for each of the
 * grid's `tickets` groups of blocks that merge together.
 */
export function splitScratch(
  encoder: KernelEncoder,
  s: { readonly rows: number; readonly splits: number; readonly headDim: number; readonly tickets: number },
): SplitScratch {
  const states = s.rows * s.splits;
  const partAcc = encoder.scratch(4 * states * (s.headDim + 2));
  const partMax = partAcc + BigInt(4 * states * s.headDim);
  const partSum = partMax + BigInt(4 * states);
  return { partAcc, partMax, partSum, counters: encoder.completionCounters(s.tickets) };
}
