import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type R32, type R64 } from '../ptx/operands.js';
import { below } from './gemv.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES } from './storage.js';

// The x side of the tensor-core quantized GEMV (quantizedMma.ts): x split
// once per block into three bf16 parts hi + mid + lo (each the rest of the
// one before, rounded to nearest, so their sum keeps x's 24 bits), laid out
// in shared memory as the A fragments the kernel's lanes load, and each
// 32-weight group's Σx in f32 for the scales' offsets.
//
// Shared memory per group g of 32 k (8 mma steps j of 4 k each):
// - `hl` entry (g, j): 16 bytes {hi(p0, p1), lo(p0, p1), hi(p2, p3), lo(p2, p3)},
//   A registers 0 … 3 of the lane whose rows are (hi, lo);
// - `mid` entry (g, j): 8 bytes {mid(p0, p1), mid(p2, p3)}, registers 0 and 2
//   of the lane whose row is mid;
// - `sums` entry g: Σ_{k in g} x_k.
// p0 … p3 = 32g + 8·(j / 2) + 2·(j mod 2) + (0, 4, 1, 5): the k of the code
// nibbles a lane's bf16 pairs hold for step j (see quantizedMma.ts). Entry j
// of group g lies at slot j XOR (g mod 4), so the four lanes that read the
// same j of four adjacent groups hit different banks.

/** Shared bytes per 32-weight group: 8 hl entries, 8 mid entries, one Σx. */
export const BYTES_PER_GROUP = 8 * 16 + 8 * 8 + 4;
/** Groups the shared layout is padded to: the four lanes of a column read four adjacent groups. */
export const GROUP_QUAD = 4;

/** Byte offsets of the three arrays for `groups` (padded) groups of shared memory from `base`. */
export function sharedLayout(k: KernelBuilder, base: R32, groups: R32) {
  const hl = base;
  const mid = k.madLo('u32', k.reg('u32'), groups, 8 * 16, base);
  const sums = k.madLo('u32', k.reg('u32'), groups, 8 * 8, mid);
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
 * GROUP_QUAD) from x's row at `xRow` (K elements of `act`, zeros past K),
 * thread `tid` of `threads` taking entries tid, tid + threads, …; ends in a
 * barrier.
 */
export function stageX(
  k: KernelBuilder,
  to: SharedX,
  from: { xRow: R64; act: FloatStorage; kDim: R32; groups: R32; tid: R32; threads: number },
): void {
  const { xRow, act, kDim, groups, tid, threads } = from;
  const entries = k.shl('b32', k.reg('u32'), groups, 3);
  const e = k.reg('u32');
  // Entries come in whole warps (32 | 8 · GROUP_QUAD), so the shuffles below have every lane.
  k.forRange(e, tid, entries, threads, () => {
    const g = k.shr('u32', k.reg('u32'), e, 3);
    const j = k.and('b32', k.reg('u32'), e, 7);
    // 32g + 8·(j / 2) + 2·(j mod 2) = 32g + 4·(j & 6) + 2·(j & 1).
    const first = k.shl('b32', k.reg('u32'), g, 5);
    k.madLo('u32', first, k.and('b32', k.reg('u32'), j, 6), 4, first);
    k.madLo('u32', first, k.and('b32', k.reg('u32'), j, 1), 2, first);
    const xs = [0, 4, 1, 5].map((d) => {
      const at = k.add('u32', k.reg('u32'), first, d);
      return loadOneAsF32(k, act, k.elementAddress(xRow, at, STORAGE_BYTES[act]), below(k, at, kDim));
    }) as [F32, F32, F32, F32];
    const [hi01, mid01, lo01] = splitPair(k, xs[0], xs[1]);
    const [hi23, mid23, lo23] = splitPair(k, xs[2], xs[3]);
    const slot = k.xor('b32', k.reg('u32'), j, k.and('b32', k.reg('u32'), g, GROUP_QUAD - 1));
    const hlAt = k.madLo('u32', k.reg('u32'), g, 8 * 16, to.hl);
    k.madLo('u32', hlAt, slot, 16, hlAt);
    k.stShared('b32', hlAt, [hi01, lo01, hi23, lo23] as Vec4<R32>);
    const midAt = k.madLo('u32', k.reg('u32'), g, 8 * 8, to.mid);
    k.madLo('u32', midAt, slot, 8, midAt);
    k.stShared('b32', midAt, [mid01, mid23] as Vec2<R32>);
    // Σx of the group: the 8 entries of a group are 8 adjacent lanes.
    const sum = k.add('f32', k.reg('f32'), xs[0], xs[1], { rnd: 'rn' });
    k.add('f32', sum, sum, xs[2], { rnd: 'rn' });
    k.add('f32', sum, sum, xs[3], { rnd: 'rn' });
    for (const offset of [1, 2, 4]) {
      k.add('f32', sum, sum, k.shflSync('bfly', k.reg('f32'), sum, offset), { rnd: 'rn' });
    }
    k.ifThen(k.setp('eq', 'u32', k.reg('pred'), j, 0), () => {
      k.stShared('f32', addr(k.madLo('u32', k.reg('u32'), g, 4, to.sums)), sum);
    });
  });
  k.barSync();
}
