import type { Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type R32, type R64 } from '../ptx/operands.js';
import { below } from './gemv.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES } from './storage.js';

// The x side of the tensor-core quantized GEMV (quantizedMma.ts): x split
// once per block into three bf16 parts hi + mid + lo (each the rest of the
// one before, rounded to nearest, so their sum keeps x's 24 bits), laid out
// in shared memory as the A fragments the kernel's lanes load, and each
// 32-weight group's Σx in f32 for the scales' offsets.
//
// For mma step j (0 … 7) of group g, the k that a lane's bf16 code pairs
// hold are p0 … p3 = 32g + 8·(j / 2) + 2·(j mod 2) + (0, 4, 1, 5) (see
// quantizedMma.ts). Per group, in shared memory:
// - `hl`: 8 entries of 16 bytes, entry j {hi(p0, p1), lo(p0, p1), hi(p2, p3),
//   lo(p2, p3)}: A registers 0 … 3 of the lane whose rows are hi and lo.
//   Groups lie HL_STRIDE bytes apart (one 16-byte pad), so that the lanes
//   that read entry j of adjacent groups at once hit different banks;
// - `mid`: 4 entries of 16 bytes, entry i {mid(p0, p1), mid(p2, p3)} of steps
//   2i and 2i + 1: A registers 0 and 2 of two steps of the lane whose row is
//   mid;
// - `sums`: Σ_{k in g} x_k.

/** Bytes from one group's hl entries to the next's. */
export const HL_STRIDE = 8 * 16 + 16;
/** Bytes of one group's mid entries. */
export const MID_STRIDE = 4 * 16;
/** Shared bytes per 32-weight group. */
export const BYTES_PER_GROUP = HL_STRIDE + MID_STRIDE + 4;
/** Groups the shared layout is padded to: the four lanes of a column read four adjacent groups. */
export const GROUP_QUAD = 4;
/** x words (8 k) a thread splits per pass, their loads issued together. */
const WORDS_IN_FLIGHT = 2;

/** Byte offsets of the three arrays for `groups` (padded) groups of shared memory from `base`. */
export function sharedLayout(k: KernelBuilder, base: R32, groups: R32) {
  const hl = base;
  const mid = k.madLo('u32', k.reg('u32'), groups, HL_STRIDE, base);
  const sums = k.madLo('u32', k.reg('u32'), groups, MID_STRIDE, mid);
  return { hl, mid, sums };
}

export type SharedX = ReturnType<typeof sharedLayout>;

/** hi, mid and lo of two f32 as bf16 pairs (a in the low halves). */
function splitPair(k: KernelBuilder, a: F32, b: F32): [R32, R32, R32] {
  const parts: R32[] = [];
  let [ra, rb] = [a, b];
  for (let i = 0; i < 3; i++) {
    const pair = k.cvtPack('bf16', k.reg('u32'), ra, rb);
    parts.push(pair);
    if (i === 2) break;
    // The rest is exact: x less its nearest 8-bit value fits in f32.
    const lowPart = k.mov('b32', k.reg('f32'), k.shl('b32', k.reg('u32'), pair, 16));
    const highPart = k.mov('b32', k.reg('f32'), k.and('b32', k.reg('u32'), pair, 0xffff0000));
    ra = k.sub('f32', k.reg('f32'), ra, lowPart, { rnd: 'rn' });
    rb = k.sub('f32', k.reg('f32'), rb, highPart, { rnd: 'rn' });
  }
  return parts as [R32, R32, R32];
}

/**
 * Fills the shared layout for `groups` padded groups (a multiple of
 * GROUP_QUAD) from x's row at `xRow` (K elements of `act`, 16-byte aligned,
 * zeros past K). Thread `tid` of `threads` splits words (8 k) tid,
 * tid + threads, … (`threads` a multiple of 32); ends in a barrier.
 */
export function stageX(
  k: KernelBuilder,
  to: SharedX,
  from: { xRow: R64; act: FloatStorage; kDim: R32; groups: R32; tid: R32; threads: number },
): void {
  const { xRow, act, kDim, groups, tid, threads } = from;
  const words = k.shl('b32', k.reg('u32'), groups, 2);
  const lane = k.and('b32', k.reg('u32'), tid, 31);
  const first = k.reg('u32');
  // The loop runs by whole warps (the shuffles need every lane); loads and stores past the words
  // are predicated off.
  k.forRange(first, k.sub('u32', k.reg('u32'), tid, lane), words, threads * WORDS_IN_FLIGHT, () => {
    const passes = Array.from({ length: WORDS_IN_FLIGHT }, (_, i) => {
      const word = k.add('u32', k.reg('u32'), first, lane);
      if (i > 0) k.add('u32', word, word, i * threads);
      const inside = below(k, word, words);
      const at = k.shl('b32', k.reg('u32'), word, 3);
      const xs = k.regs('f32', 8);
      const ok = k.and('pred', k.reg('pred'), inside, below(k, at, kDim));
      loadAsF32(k, act, xs, k.elementAddress(xRow, at, STORAGE_BYTES[act]), { ok });
      return { word, inside, xs };
    });
    for (const { word, inside, xs } of passes) {
      const g = k.shr('u32', k.reg('u32'), word, 2);
      const wi = k.and('b32', k.reg('u32'), word, 3);
      // Pairs (v0, v4), (v1, v5) feed step 2·wi; (v2, v6), (v3, v7) step 2·wi + 1.
      const [a, b, c, d] = [0, 1, 2, 3].map((i) => splitPair(k, xs[i]!, xs[i + 4]!)) as [
        [R32, R32, R32],
        [R32, R32, R32],
        [R32, R32, R32],
        [R32, R32, R32],
      ];
      const hlAt = k.madLo('u32', k.reg('u32'), g, HL_STRIDE, to.hl);
      k.madLo('u32', hlAt, wi, 32, hlAt);
      const midAt = k.madLo('u32', k.reg('u32'), g, MID_STRIDE, to.mid);
      k.madLo('u32', midAt, wi, 16, midAt);
      k.predicated(inside, () => {
        k.stShared('b32', hlAt, [a[0], a[2], b[0], b[2]] as Vec4<R32>);
        k.stShared('b32', addr(hlAt, 16), [c[0], c[2], d[0], d[2]] as Vec4<R32>);
        k.stShared('b32', midAt, [a[1], b[1], c[1], d[1]] as Vec4<R32>);
      });
      // Σx of the group: its 4 words are 4 adjacent lanes.
      const sum = k.add('f32', k.reg('f32'), xs[0]!, xs[1]!, { rnd: 'rn' });
      for (const x of xs.slice(2)) k.add('f32', sum, sum, x, { rnd: 'rn' });
      for (const offset of [1, 2]) {
        k.add('f32', sum, sum, k.shflSync('bfly', k.reg('f32'), sum, offset), { rnd: 'rn' });
      }
      const stores = k.and('pred', k.reg('pred'), inside, k.setp('eq', 'u32', k.reg('pred'), wi, 0));
      k.predicated(stores, () => {
        k.stShared('f32', addr(k.madLo('u32', k.reg('u32'), g, 4, to.sums)), sum);
      });
    }
  });
  k.barSync();
}
