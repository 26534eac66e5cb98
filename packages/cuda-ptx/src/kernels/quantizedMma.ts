import { InvalidArgumentError, quantizedMatmul } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { activationF32 } from './activations.js';
import { loadParams } from './entryParams.js';
import { below } from './gemv.js';
import { BYTES_PER_GROUP, GROUP_QUAD, HL_STRIDE, MID_STRIDE, sharedLayout, stageX } from './quantizedMmaX.js';
import { subBlockScaleOffset } from './quantizedSubBlocks.js';
import {
  type FloatStorage,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// The decode GEMV (one row of x) of 4-bit weights on tensor cores. The
// CUDA-core GEMV turns every code into an f32 and spends about three
// instructions per code, more than an SM can issue at the memory's pace;
// here the tensor cores do the multiply-adds and a code costs about 1.4:
//
// - the block splits x once into bf16 hi + mid + lo in shared memory, laid
//   out as mma A fragments (quantizedMmaX.ts), with each group's Σx;
// - lane (g, t) of a warp (mma groupID g, threadInGroup t) loads 16 bytes,
//   the 32 codes of group 4s + t of its column's row g, straight from global
//   memory; per u32 word, one and/or and one shift per two codes give bf16
//   pairs 128 + q (the nibble in the mantissa of 128) and one bf16x2 fma
//   takes 128 off, exactly, so a word is two m16n8k16 B fragments;
// - A's rows are (split, t): row 4·split + t holds split `split` of x at the
//   k positions that lane t feeds and zeros elsewhere, so D(row, column) is
//   Σ x_split · q over lane t's group of that column alone, and one mma
//   takes 4 groups × 8 columns × 3 splits; only lanes 0, 5, 10, 15 (hi and
//   lo) and 16, 21, 26, 31 (mid) hold nonzero A, loaded from shared memory
//   by predicated loads, the others keep zeros;
// - after a group's 8 mmas, one shuffle adds a column's three splits, and
//   each lane applies one group's scale (and zero point or offset, times Σx)
//   in f32.
// The 16 warps of a block split K (S slices) for G = 16 / S column tiles of
// 8; the slices' sums meet in shared memory at the end. One block an SM
// stages x once and takes items of G tiles until none are left.

export const QMMA_ENTRY = 'quantized_gemv_mma';
const WARPS = 16;
const THREADS = WARPS * 32;
/** Columns of a warp's tile: an mma's n. */
const TILE = 8;
/** Weights of one lane's 16-byte piece, one scale group. */
const GROUP = 32;
/** Registers of A fragments kept, by step mod FRAGMENT_SETS. */
const FRAGMENT_SETS = 4;
/** Groups a warp's lanes take per step, one per threadInGroup. */
const STEP_GROUPS = GROUP_QUAD;

/** The 4-bit formats this kernel reads; all take K a multiple of 32 (q4k: of 256). */
export const QMMA_FORMATS = ['q4g32', 'q4g32a', 'q4k'] as const;
export type QmmaFormat = (typeof QMMA_FORMATS)[number];

/** The splits of K among a block's warps. */
export const QMMA_SLICES = [1, 2, 4, 8, 16] as const;
export type QmmaSlices = (typeof QMMA_SLICES)[number];

export interface QmmaConfig {
  readonly format: QmmaFormat;
  /** q4g32's zero points; else 8 is every group's zero. */
  readonly zeros: boolean;
  /** Adds beta · c; never with `pair`. */
  readonly withC: boolean;
  /** Two weights (q4g32): y = silu(x·Wgᵀ) ⊙ (x·Wuᵀ). */
  readonly pair: boolean;
  readonly types: { readonly act: FloatStorage; readonly scale: FloatStorage };
  /** Warps of a block that split K. */
  readonly slices: QmmaSlices;
}

export function qmmaKey(v: QmmaConfig): string {
  const what = `${v.pair ? 'gateup/' : ''}${v.format}${v.zeros ? '/zeros' : ''}${v.withC ? '/c' : ''}`;
  return `quantized/gemvmma/s${v.slices}/${what}${storageKey([v.types.act, v.types.scale])}`;
}

/**
 * Steps a warp has in flight: 96 bytes of codes a lane where the registers
 * allow (at most 128 a thread): four for q4k (its sub-block scales), three for a pair (two weights).
 */
export function qmmaUnroll(v: QmmaConfig): number {
  return v.pair ? 3 : v.format === 'q4k' ? 4 : 6;
}

const PARAMS = {
  x: 'ptr',
  packed: 'ptr',
  scales: 'ptr',
  zeros: 'ptr',
  offsets: 'ptr',
  packed2: 'ptr',
  scales2: 'ptr',
  zeros2: 'ptr',
  c: 'ptr',
  y: 'ptr',
  n: 'u32',
  k: 'u32',
  beta: 'f32',
} as const;

function check(v: QmmaConfig): void {
  const fail = (argument: string, expected: string, actual: string) => {
    throw new InvalidArgumentError('the tensor-core quantized GEMV cannot take this configuration', {
      operation: quantizedMatmul.name,
      argument,
      expected,
      actual,
    });
  };
  if (!(QMMA_FORMATS as readonly string[]).includes(v.format))
    fail('format', QMMA_FORMATS.join(', '), v.format);
  if (!QMMA_SLICES.includes(v.slices)) fail('slices', QMMA_SLICES.join(', '), String(v.slices));
  if (v.zeros && v.format !== 'q4g32') fail('zeros', 'zero points with q4g32 only', v.format);
  if (v.pair && (v.withC || v.format !== 'q4g32')) fail('pair', 'a q4g32 pair without c', v.format);
}

/** bf16 16 in both halves: a nibble ORed into mantissa bits 3–6 of 16 reads as 16 + q. */
const MAGIC_PAIR = 0x41804180;
/** The magic number each B element carries, and the mask of a nibble in bits 3–6 of both halves. */
const MAGIC = 16;
const NIBBLES = 0x00780078;

/**
 * A u32 word's 8 codes as 4 bf16 pairs 16 + q, exactly: pair i holds nibbles
 * i (low half) and i + 4, each moved to mantissa bits 3–6 by one shift.
 */
function codePairs(k: KernelBuilder, word: R32): R32[] {
  return [0, 1, 2, 3].map((i) => {
    const shifted =
      i === 0 ? k.shl('b32', k.reg('u32'), word, 3) : k.shr('b32', k.reg('u32'), word, 4 * i - 3);
    return k.or('b32', k.reg('u32'), k.and('b32', k.reg('u32'), shifted, NIBBLES), MAGIC_PAIR);
  });
}

/**
 * Block b: column tiles b·G … +G (G = 8 / S); warp w takes tile w / S and
 * the steps i ≡ w mod S of K (4 groups a step). See the file's comment.
 */
export function qmmaModule(v: QmmaConfig): PtxModule {
  check(v);
  const { act, scale } = v.types;
  const scaleBytes = STORAGE_BYTES[scale];
  const S = v.slices;
  const G = WARPS / S;
  const P = v.pair ? 2 : 1;
  const U = qmmaUnroll(v);
  const q4k = v.format === 'q4k';
  const affine = v.format !== 'q4g32';
  const m = new PtxModule({ target: 'sm_80' });
  const dynamic = m.dynamicShared('xParts', 16);
  m.entry(
    QMMA_ENTRY,
    PARAMS,
    (k, p) => {
      const { n, k: kDim } = loadParams(k, p, 'n', 'k');
      const red = k.sharedArray('red', 'f32', WARPS * P * TILE, 16);
      const tid = k.tid();
      const warp = k.shr('u32', k.reg('u32'), tid, 5);
      const slice = k.and('b32', k.reg('u32'), warp, S - 1);
      const tile = k.shr('u32', k.reg('u32'), warp, Math.log2(S));
      const { groupId: gid, threadInGroup: t } = k.mmaLaneCoordinates();
      const lastN = k.sub('u32', k.reg('u32'), n, 1);
      // Items of G column tiles; block b takes items b, b + grid, … (the grid is at most one an SM).
      const items = k.shr(
        'u32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), n, TILE * G - 1),
        Math.log2(TILE * G),
      );
      // Groups of a row, and padded to whole steps for the shared layout.
      const groups = k.shr('u32', k.reg('u32'), kDim, 5);
      const padded = k.and(
        'b32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), groups, STEP_GROUPS - 1),
        ~(STEP_GROUPS - 1) >>> 0,
      );
      const shared = sharedLayout(k, k.sharedAddress(dynamic), padded);

      // The lane's sums at the end: column 2t + upper of the tile, the group 4i + quad of each step.
      const quad = k.and('b32', k.reg('u32'), gid, 3);
      const upper = k.setp('ge', 'u32', k.reg('pred'), gid, 4);
      const local = k.shl('b32', k.reg('u32'), t, 1);
      k.add('u32', local, local, k.selp('u32', k.reg('u32'), 1, 0, upper));
      const superBlocks = q4k ? k.shr('u32', k.reg('u32'), kDim, 8) : undefined;
      const zeroWords = v.zeros
        ? k.shr('u32', k.reg('u32'), k.add('u32', k.reg('u32'), groups, 7), 3)
        : undefined;
      // Where an item's loads go: the lane's code row colBase + g (rows past N read row N − 1,
      // never stored), group 4i + t; its scale row colBase + local; `bound` the groups to load
      // (none past the last item).
      const colBase = k.reg('u32');
      const codeIndex = k.reg('u32');
      const scaleIndex = k.reg('u32');
      const zeroRow = zeroWords ? k.reg('u32') : undefined;
      const bound = k.reg('u32');
      const placeItem = (item: R32) => {
        k.mulLo('u32', colBase, k.madLo('u32', k.reg('u32'), item, G, tile), TILE);
        const codeRow = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), colBase, gid), lastN);
        k.madLo('u32', codeIndex, codeRow, groups, t);
        const sumRow = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), colBase, local), lastN);
        if (q4k) k.mulLo('u32', scaleIndex, sumRow, superBlocks!);
        else k.madLo('u32', scaleIndex, sumRow, groups, quad);
        if (zeroRow) k.mulLo('u32', zeroRow, sumRow, zeroWords!);
        k.selp('u32', bound, groups, 0, below(k, item, items));
      };
      const weights = [
        { packed: p.packed, scales: p.scales, zeros: p.zeros },
        { packed: p.packed2, scales: p.scales2, zeros: p.zeros2 },
      ]
        .slice(0, P)
        .map((set) => ({
          packed: k.globalPointer(set.packed),
          scales: k.globalPointer(set.scales),
          zeros: v.zeros || q4k ? k.globalPointer(set.zeros) : undefined,
        }));
      const offsets = affine ? k.globalPointer(p.offsets) : undefined;

      // A fragments: lanes (g, g) for g < 4 load hl entries, lanes (g, g − 4) for g ≥ 4 mid entries.
      const isHl = k.and(
        'pred',
        k.reg('pred'),
        k.not('pred', k.reg('pred'), upper),
        k.setp('eq', 'u32', k.reg('pred'), t, gid),
      );
      const isMid = k.and(
        'pred',
        k.reg('pred'),
        upper,
        k.setp('eq', 'u32', k.reg('pred'), t, k.sub('u32', k.reg('u32'), gid, 4)),
      );
      // The entries of group 4i + t start at base + (4i + t)·stride.
      const stride = k.selp('u32', k.reg('u32'), HL_STRIDE, MID_STRIDE, isHl);
      const laneBase = k.selp('u32', k.reg('u32'), shared.hl, shared.mid, isHl);
      k.madLo('u32', laneBase, t, stride, laneBase);
      const sumsAt = k.madLo('u32', k.reg('u32'), quad, 4, shared.sums);
      // A fragments of 4 steps j (by j mod 4): the loads of one word's two steps go out while the
      // word before is multiplied. Lanes that hold none keep these zeros.
      const fragments = Array.from({ length: FRAGMENT_SETS }, () => {
        const regs = k.regs('u32', 4);
        for (const r of regs) k.mov('b32', r, 0);
        return regs;
      });
      const zero = k.regs('f32', 4);
      for (const r of zero) k.mov('f32', r, 0);
      const acc = weights.map(() => k.mov('f32', k.reg('f32'), 0));

      /** A step's loads per weight: codes, scale, and zero point (as f32) or −offset. */
      type Step = { words: R32[][]; scale: F32[]; bias: (F32 | number)[]; negOffset: F32[] };
      const steps: Step[] = Array.from({ length: U }, () => ({
        words: weights.map(() => k.regs('u32', 4)),
        scale: weights.map(() => k.reg('f32')),
        bias: weights.map(() => (v.zeros ? k.reg('f32') : 8)),
        negOffset: weights.map(() => k.reg('f32')),
      }));
      /** Issues the loads of the step of groups first … first + 3 into `st`. */
      const loadStep = (st: Step, first: R32) => {
        const codeOk = below(k, k.add('u32', k.reg('u32'), first, t), bound);
        const group = k.add('u32', k.reg('u32'), first, quad);
        const sumOk = below(k, group, bound);
        weights.forEach((w, wi) => {
          // Codes past K are left as they are: x is 0 there.
          const at = k.elementAddress(w.packed, k.add('u32', k.reg('u32'), codeIndex, first), 16);
          k.predicated(codeOk, () => {
            k.ldGlobal('b32', st.words[wi] as unknown as Vec4<R32>, at, { nc: true });
          });
          if (q4k) {
            const superBlock = k.add('u32', k.reg('u32'), scaleIndex, k.shr('u32', k.reg('u32'), group, 3));
            const where = {
              scale: superBlock,
              words: k.mulLo('u32', k.reg('u32'), superBlock, 3),
              sub: k.and('b32', k.reg('u32'), group, 7),
            };
            const ptrs = { scales: w.scales, offsets: offsets!, zeros: w.zeros! };
            const sub = subBlockScaleOffset(k, scale, ptrs, where, sumOk);
            k.mov('f32', st.scale[wi]!, sub.scale);
            k.neg('f32', st.negOffset[wi]!, sub.offset);
            return;
          }
          const index = k.add('u32', k.reg('u32'), scaleIndex, first);
          const scaleAt = k.elementAddress(w.scales, index, scaleBytes);
          k.mov('f32', st.scale[wi]!, loadOneAsF32(k, scale, scaleAt, sumOk));
          if (affine) {
            const offset = loadOneAsF32(k, scale, k.elementAddress(offsets!, index, scaleBytes), sumOk);
            k.neg('f32', st.negOffset[wi]!, offset);
          } else if (v.zeros) {
            const word = k.mov('b32', k.reg('u32'), 0);
            const wordAt = k.add('u32', k.reg('u32'), zeroRow!, k.shr('u32', k.reg('u32'), group, 3));
            k.predicated(sumOk, () => {
              k.ldGlobal('b32', word, k.elementAddress(w.zeros!, wordAt, 4), { nc: true });
            });
            const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), group, 7), 2);
            const nibble = k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), word, shift), 0xf);
            k.cvt('f32', 'u32', st.bias[wi] as F32, nibble, { rnd: 'rn' });
          }
        });
      };

      /** The 8 mmas per weight of the step of groups first … first + 3, then each lane's group sum scaled into its accumulator. */
      const useStep = (st: Step, first: R32) => {
        // A fragments of the step's 4 groups (only the 8 lanes that hold any load them).
        const at = k.madLo('u32', k.reg('u32'), first, stride, laneBase);
        const xSum = k.ldShared('f32', k.reg('f32'), addr(k.madLo('u32', k.reg('u32'), first, 4, sumsAt)));
        // One weight keeps two accumulators (a word's even and odd step), so that its mmas form two
        // chains as a pair's do.
        const chains = P === 1 ? 2 : 1;
        const d = weights.map(() => Array.from({ length: chains }, () => k.regs('f32', 4)));
        for (let wi = 0; wi < 4; wi++) {
          const [lo, hi] = [fragments[(2 * wi) % FRAGMENT_SETS]!, fragments[(2 * wi + 1) % FRAGMENT_SETS]!];
          k.predicated(isHl, () => k.ldShared('b32', lo as unknown as Vec4<R32>, addr(at, 32 * wi)));
          k.predicated(isHl, () => k.ldShared('b32', hi as unknown as Vec4<R32>, addr(at, 32 * wi + 16)));
          const mids = [lo[0]!, lo[2]!, hi[0]!, hi[2]!] as Vec4<R32>;
          k.predicated(isMid, () => k.ldShared('b32', mids, addr(at, 16 * wi)));
          weights.forEach((_, w) => {
            const pairs = codePairs(k, st.words[w]![wi]!);
            [lo, hi].forEach((a, h) => {
              const b = [pairs[2 * h]!, pairs[2 * h + 1]!] as Vec2<R32>;
              const dh = d[w]![h % chains]! as Vec4<F32>;
              const first = wi === 0 && h < chains;
              k.mmaSync('m16n8k16', 'bf16', dh, a as unknown as Vec4<R32>, b, first ? zero : dh);
            });
          });
        }
        weights.forEach((_, w) => {
          // Rows (hi, lo) of lanes g < 4 and mid of lanes g ≥ 4 (its row g + 8 is zero): a lane keeps
          // column 2t + upper and trades the other with lane ^ 16.
          const [s0, s1] = [0, 1].map((c) => {
            const sum = k.add('f32', k.reg('f32'), d[w]![0]![c]!, d[w]![0]![c + 2]!, { rnd: 'rn' });
            for (const other of d[w]!.slice(1)) {
              k.add('f32', sum, sum, k.add('f32', k.reg('f32'), other[c]!, other[c + 2]!, { rnd: 'rn' }), {
                rnd: 'rn',
              });
            }
            return sum;
          }) as [F32, F32];
          const mine = k.selp('f32', k.reg('f32'), s1, s0, upper);
          const send = k.selp('f32', k.reg('f32'), s0, s1, upper);
          // Σ x·(16 + q) over the group: Σ x·q is that less 16·Σx (and the zero point's Σx).
          const sum = k.add('f32', mine, mine, k.shflSync('bfly', k.reg('f32'), send, 16), { rnd: 'rn' });
          const a = acc[w]!;
          const z = affine ? 0 : st.bias[w]!;
          const negBias = typeof z === 'number' ? -(MAGIC + z) : k.sub('f32', k.reg('f32'), -MAGIC, z);
          const centred = k.fma('f32', k.reg('f32'), negBias, xSum, sum);
          k.fma('f32', a, st.scale[w]!, centred, a);
          if (affine) k.fma('f32', a, st.negOffset[w]!, xSum, a);
        });
      };

      // Each step's registers are refilled as soon as the step is used, with the item's next
      // step or the next item's first, so U − 1 steps stay in flight; the first item's first U go
      // out before x is staged, which hides their latency behind it.
      const stepGroups = STEP_GROUPS * S;
      const start = k.mulLo('u32', k.reg('u32'), slice, STEP_GROUPS);
      // The slice's first U steps of an item: groups start + u · stepGroups.
      const firstSteps = steps.map((_, u) =>
        u === 0 ? start : k.add('u32', k.reg('u32'), start, u * stepGroups),
      );
      const item = k.mov('u32', k.reg('u32'), k.ctaid());
      placeItem(item);
      steps.forEach((st, u) => {
        loadStep(st, firstSteps[u]!);
      });
      stageX(k, shared, { xRow: k.globalPointer(p.x), act, kDim, groups: padded, tid, threads: THREADS });
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const redBase = k.sharedAddress(red);
      const keeps = k.setp('eq', 'u32', k.reg('pred'), quad, 0);
      const firstSlice = k.setp('eq', 'u32', k.reg('pred'), slice, 0);
      const y: R64 = k.globalPointer(p.y);
      const itemBase = k.reg('u32');
      k.forRange(item, item, items, k.nctaid(), () => {
        for (const a of acc) k.mov('f32', a, 0);
        // Whole loops of U steps inside the row are one block of code, which the assembler can
        // interleave; the last steps of the row, fewer than U, each test that they are inside
        // (whole warps: past the row they take no A loads nor mmas).
        const first = k.reg('u32');
        const span = (U - 1) * stepGroups;
        const wholeEnd = k.sub('u32', k.reg('u32'), k.max('u32', k.reg('u32'), groups, span), span);
        const stepAt = (u: number) => (u === 0 ? first : k.add('u32', k.reg('u32'), first, u * stepGroups));
        k.forRange(first, start, wholeEnd, U * stepGroups, () => {
          steps.forEach((st, u) => {
            const at = stepAt(u);
            useStep(st, at);
            loadStep(st, k.add('u32', k.reg('u32'), at, U * stepGroups));
          });
        });
        // Each last step's registers take the next item's step as soon as it is used (or at once
        // past the row), so that loads stay in flight across items.
        k.mov('u32', itemBase, colBase);
        placeItem(k.add('u32', k.reg('u32'), item, k.nctaid()));
        steps.forEach((st, u) => {
          const at = stepAt(u);
          k.ifThen(below(k, at, groups), () => useStep(st, at));
          loadStep(st, firstSteps[u]!);
        });

        // A column's 4 groups sit in lanes quad 0 … 3 (lane bits 2 and 3); lanes 0–3 and 16–19 keep them.
        acc.forEach((a, w) => {
          for (const offset of [4, 8]) {
            k.add('f32', a, a, k.shflSync('bfly', k.reg('f32'), a, offset), { rnd: 'rn' });
          }
          const at = k.madLo('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), warp, P, w), TILE, local);
          k.predicated(keeps, () => k.stShared('f32', addr(k.madLo('u32', k.reg('u32'), at, 4, redBase)), a));
        });
        k.barSync();
        // Lane o < 8 of a tile's slice-0 warp adds the S slices and stores column itemBase + o.
        const out = k.add('u32', k.reg('u32'), itemBase, lane);
        const mine: Pred = [firstSlice, below(k, lane, TILE), below(k, out, n)].reduce((x, z) =>
          k.and('pred', k.reg('pred'), x, z),
        );
        k.ifThen(mine, () => {
          const sums = weights.map((_, w) => {
            const sum = k.mov('f32', k.reg('f32'), 0);
            for (let s = 0; s < S; s++) {
              const row = k.add('u32', k.reg('u32'), warp, s);
              const at = k.madLo('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), row, P, w), TILE, lane);
              const part = k.ldShared(
                'f32',
                k.reg('f32'),
                addr(k.madLo('u32', k.reg('u32'), at, 4, redBase)),
              );
              k.add('f32', sum, sum, part, { rnd: 'rn' });
            }
            return sum;
          });
          let value = sums[0]!;
          if (v.pair) value = k.mul('f32', k.reg('f32'), activationF32(k, 'silu', sums[0]!), sums[1]!);
          else if (v.withC) {
            const c = loadOneAsF32(k, act, k.elementAddress(k.globalPointer(p.c), out, STORAGE_BYTES[act]));
            value = k.fma('f32', k.reg('f32'), k.ldParam(p.beta), c, value);
          }
          storeFromF32(k, act, k.elementAddress(y, out, STORAGE_BYTES[act]), value);
        });
        // The slices' sums are read before the next item writes them.
        k.barSync();
      });
    },
    // One block an SM: at most 128 registers a thread.
    { maxThreadsPerBlock: THREADS, minBlocksPerSm: 1 },
  );
  return m;
}

/** Dynamic shared bytes for K (a multiple of 32): the padded groups' x parts and sums. */
export function qmmaSharedBytes(kDim: number): number {
  const groups = Math.ceil(kDim / GROUP / STEP_GROUPS) * STEP_GROUPS;
  return groups * BYTES_PER_GROUP;
}

/** Items (G = 16 / slices column tiles each) of N columns. */
function itemsOf(n: number, slices: number): number {
  return Math.ceil(n / ((TILE * WARPS) / slices));
}

/** Static shared bytes: the slices' sums of one item. */
const STATIC_SHARED = WARPS * 2 * TILE * 4;
/** Blocks of the launch: one per item, at most one an SM (a block then takes several). */
export function qmmaGrid(n: number, slices: number, units: number): number {
  return Math.min(itemsOf(n, slices), units);
}

/**
 * Warps of a block that split K. Where a split with two steps of K a warp
 * gives every SM an item, the one whose rounds of items take least time,
 * counting a step per warp and about one more per item for its end; else
 * (few columns) the most warps per item that keep a step each.
 */
export function qmmaSlicesFor(n: number, kDim: number, units: number): QmmaSlices {
  const steps = Math.ceil(kDim / (GROUP * STEP_GROUPS));
  const choices = QMMA_SLICES.filter((s) => s === 1 || steps >= 2 * s);
  const full = choices.filter((s) => itemsOf(n, s) >= units);
  if (full.length === 0) return QMMA_SLICES.filter((s) => s === 1 || steps >= s).pop()!;
  const cost = (s: number) => Math.ceil(itemsOf(n, s) / units) * (Math.ceil(steps / s) + 1);
  return full.reduce((best, s) => (cost(s) < cost(best) ? s : best));
}

/**
 * Whether the tensor-core GEMV takes a product: one row of x, 16-byte
 * aligned, a format of QMMA_FORMATS with K a multiple of 32, sm_80 or later,
 * and x's parts within a block's shared memory.
 */
export function qmmaApplies(
  device: { readonly computeCapability: readonly number[]; readonly sharedMemoryPerBlockOptin: number },
  problem: { readonly m: number; readonly k: number; readonly format: string; readonly x: bigint },
): problem is { m: 1; k: number; format: QmmaFormat; x: bigint } {
  const { m, k, format } = problem;
  if (m !== 1 || k % GROUP !== 0 || !(QMMA_FORMATS as readonly string[]).includes(format)) return false;
  if (problem.x % 16n !== 0n) return false;
  if ((device.computeCapability[0] ?? 0) < 8) return false;
  return qmmaSharedBytes(k) + STATIC_SHARED <= device.sharedMemoryPerBlockOptin;
}

/** The weight operands of one product (`offsets`: q4g32a's and q4k's dmin). */
export interface QmmaWeight {
  readonly packed: Operand;
  readonly scales: Operand;
  readonly zeros: Operand | undefined;
  readonly offsets: Operand | undefined;
}

/** Launches the kernel for x [1, K] and one weight (y = x·Wᵀ + beta·c) or a q4g32 gate·up pair. */
export function encodeQuantizedMma(
  encoder: KernelEncoder,
  ops: { x: Operand; weights: readonly QmmaWeight[]; c: Operand | undefined; y: Operand },
  attrs: { format: QmmaFormat; beta: number },
): void {
  const { x, weights, c, y } = ops;
  const kDim = x.shape[1]!;
  const n = y.shape[1]!;
  if (n === 0) return;
  const first = weights[0]!;
  const second = weights[1] ?? first;
  const units = encoder.device.multiprocessors;
  const slices = encoder.tuning.qgemvSlices ?? qmmaSlicesFor(n, kDim, units);
  const config: QmmaConfig = {
    format: attrs.format,
    zeros: attrs.format === 'q4g32' && first.zeros !== undefined,
    withC: c !== undefined,
    pair: weights.length === 2,
    types: { act: storageOf(x), scale: storageOf(first.scales) },
    slices,
  };
  encoder.launch({
    key: qmmaKey(config),
    module: () => qmmaModule(config),
    entry: QMMA_ENTRY,
    grid: [qmmaGrid(n, slices, units), 1, 1],
    block: THREADS,
    sharedBytes: qmmaSharedBytes(kDim),
    args: {
      x,
      packed: first.packed,
      scales: first.scales,
      // Unused where the format has none; any valid address.
      zeros: first.zeros ?? first.packed,
      offsets: first.offsets ?? first.scales,
      packed2: second.packed,
      scales2: second.scales,
      zeros2: second.zeros ?? second.packed,
      c: c ?? y,
      y,
      n,
      k: kDim,
      beta: attrs.beta,
    },
  });
}
