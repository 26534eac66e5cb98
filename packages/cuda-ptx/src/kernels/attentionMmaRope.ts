import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type Param, type R32 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { DECODE_MMA_TILE, DECODE_MMA_WARPS } from './attentionMmaPlan.js';
import { tileBytes } from './attentionMmaRing.js';
import { loadPointer, loadU32 } from './common.js';
import { swizzled } from './mmaTiles.js';
import { type RopeFrequencies, type RopeLayout, ropeSinCos, rotatePair } from './rope.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES, toHalfBits } from './storage.js';

// ropeAttention inside the tensor-core decode attention: q rotated in the A
// fragments as they load, and the token's new K and V row. The row goes to
// the caches from the one warp whose tile holds it (each lane a pair or two),
// which also writes it over that tile's copy in shared memory once the copy
// has arrived: no block waits for the row before its tile copies start.

/** What the rope of ropeAttention's fused kernel works with. */
export interface KernelRope {
  readonly layout: RopeLayout;
  readonly frequencies: RopeFrequencies;
  /** The token's position: the last attended row (seqLen − 1; past the cache for a length of 0). */
  readonly position: R32;
}

/** A rotation's sine and cosine. */
export interface Angle {
  readonly sin: F32;
  readonly cos: F32;
}

/**
 * The angles of the position's rotation pairs spread over a warp: lane l
 * computes pair l + 32·i for i < headDim / 64 (ropeSinCos is long: 64-bit
 * fixed-point turns, then sine and cosine), and `at` hands pair `pair`,
 * held in register `slot` (pair / 32) of lane pair mod 32, to any lane by
 * shuffles.
 */
export function warpAngles(
  k: KernelBuilder,
  r: KernelRope & { readonly headDim: number; readonly lane: R32 },
): { readonly own: readonly Angle[]; at(pair: R32, slot: number): Angle } {
  const own = Array.from({ length: r.headDim / 64 }, (_, i) =>
    ropeSinCos(k, r.position, k.add('u32', k.reg('u32'), r.lane, 32 * i), r.frequencies),
  );
  return {
    own,
    at(pair, slot) {
      const from = k.and('b32', k.reg('u32'), pair, 31);
      return {
        sin: k.shflSync('idx', k.reg('f32'), own[slot]!.sin, from),
        cos: k.shflSync('idx', k.reg('f32'), own[slot]!.cos, from),
      };
    },
  };
}

/**
 * q rotated in the A fragment registers: qs[kk][o] holds elements 16·kk + 8·o
 * + colPair and the next of the lane's row. Under 'half' an element's partner
 * (headDim / 2 further) is in the same lane, kk + headDim / 32; under
 * 'interleaved' it is the register beside it. The angles come from the
 * warp's lanes (warpAngles): pair p sits in register p / 32, which for a
 * given kk is known here.
 */
export function rotateQ(
  k: KernelBuilder,
  qs: readonly (readonly F32[][])[],
  r: { readonly layout: RopeLayout; readonly headDim: number; readonly colPair: R32 } & {
    readonly angles: ReturnType<typeof warpAngles>;
  },
): void {
  const steps = r.headDim / 16;
  const rotate = (a: F32, b: F32, { sin, cos }: Angle) => {
    const [x, y] = rotatePair(k, a, b, cos, sin);
    k.mov('f32', a, x);
    k.mov('f32', b, y);
  };
  for (let kk = 0; kk < steps; kk++) {
    for (const o of [0, 1]) {
      const first = k.add('u32', k.reg('u32'), r.colPair, 16 * kk + 8 * o);
      if (r.layout === 'interleaved') {
        // Pair (16·kk + 8·o + colPair) / 2 < 8·kk + 8: register kk / 4.
        const angle = r.angles.at(k.shr('u32', k.reg('u32'), first, 1), kk >> 2);
        rotate(qs[kk]![o]![0]!, qs[kk]![o]![1]!, angle);
      } else if (kk < steps / 2) {
        for (const e of [0, 1]) {
          // Pair 16·kk + 8·o + colPair + e < 16·kk + 16: register kk / 2.
          const pair = e === 0 ? first : k.add('u32', k.reg('u32'), first, 1);
          rotate(qs[kk]![o]![e]!, qs[kk + steps / 2]![o]![e]!, r.angles.at(pair, kk >> 1));
        }
      }
    }
  }
}

/** The new row's write into the caches and over its tile's copy in shared memory. */
export interface NewRow {
  /**
   * In the loop, once the stage holding the warp's tile at token `base` has
   * arrived: where that tile holds the position, the rotated k and the v
   * are written over the row's stale copy (then the warp syncs).
   */
  patch(base: R32, stage: R32): void;
}

/**
 * ropeAttention's new row, by the warp whose tiles hold the position (the
 * block with t0 ≤ position < t1, warp ((position − t0) / 16) mod
 * DECODE_MMA_WARPS): each of its lanes takes headDim / 64 rotation pairs of
 * kv head ctaid.y's k from the fused row (pair j of lane j mod 32), rotates
 * them, rounds them and the same elements of v to the cache's type, and
 * stores them into the caches' row; `patch` puts the same halves into the
 * tile in shared memory.
 */
export function newRowWriter(
  k: KernelBuilder,
  p: Record<string, Param<ParamType>>,
  w: KernelRope & {
    readonly headDim: number;
    readonly group: number;
    readonly kvHead: R32;
    readonly t0: R32;
    readonly t1: R32;
    readonly warp: R32;
    readonly lane: R32;
    readonly act: FloatStorage;
    readonly cache: 'f16' | 'bf16';
    /** warpAngles' own: the angles of the lane's pairs. */
    readonly angles: readonly Angle[];
  },
): NewRow {
  const { headDim: hd, position } = w;
  const inBlock = k.and(
    'pred',
    k.reg('pred'),
    k.setp('ge', 'u32', k.reg('pred'), position, w.t0),
    k.setp('lt', 'u32', k.reg('pred'), position, w.t1),
  );
  const ownerWarp = k.and(
    'b32',
    k.reg('u32'),
    k.shr('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), position, w.t0), Math.log2(DECODE_MMA_TILE)),
    DECODE_MMA_WARPS - 1,
  );
  const owns = k.and('pred', k.reg('pred'), inBlock, k.setp('eq', 'u32', k.reg('pred'), w.warp, ownerWarp));
  // The lane's elements: both of each of its pairs ('half': j and j + headDim / 2; 'interleaved': 2j and 2j + 1).
  const elements = Array.from({ length: hd / 64 }, (_, i) => {
    const pair = k.add('u32', k.reg('u32'), w.lane, 32 * i);
    return {
      at: (w.layout === 'half'
        ? [pair, k.add('u32', k.reg('u32'), pair, hd / 2)]
        : [
            k.shl('b32', k.reg('u32'), pair, 1),
            k.add('u32', k.reg('u32'), k.shl('b32', k.reg('u32'), pair, 1), 1),
          ]) as [R32, R32],
    };
  });
  const halves = elements.map(() => ({ k: [k.reg('b16'), k.reg('b16')], v: [k.reg('b16'), k.reg('b16')] }));
  k.ifThen(owns, () => {
    const actBytes = STORAGE_BYTES[w.act];
    const source = loadPointer(k, p, 'q');
    // k: row nHeads + kvHead of the fused input; v: row nHeads + nKvHeads + kvHead.
    const kRow = k.madLo('u32', k.reg('u32'), k.nctaid('y'), w.group, w.kvHead);
    const vRow = k.add('u32', k.reg('u32'), kRow, k.nctaid('y'));
    const load = (row: R32, e: R32) =>
      loadOneAsF32(k, w.act, k.elementAddress(source, k.madLo('u32', k.reg('u32'), row, hd, e), actBytes));
    const cacheRow = k.mulLo(
      'u32',
      k.reg('u32'),
      k.madLo('u32', k.reg('u32'), w.kvHead, loadU32(k, p, 'maxSeq'), position),
      hd,
    );
    const kCache = loadPointer(k, p, 'kCache');
    const vCache = loadPointer(k, p, 'vCache');
    elements.forEach(({ at }, i) => {
      const [a, b] = at.map((e) => load(kRow, e)) as [F32, F32];
      const vs = at.map((e) => load(vRow, e));
      const { sin, cos } = w.angles[i]!;
      rotatePair(k, a, b, cos, sin).forEach((x, n) => {
        const e = at[n]!;
        const element = k.add('u32', k.reg('u32'), cacheRow, e);
        k.mov('b16', halves[i]!.k[n]!, toHalfBits(k, w.cache, x));
        k.mov('b16', halves[i]!.v[n]!, toHalfBits(k, w.cache, vs[n]!));
        k.stGlobal('b16', k.elementAddress(kCache, element, 2), halves[i]!.k[n]!);
        k.stGlobal('b16', k.elementAddress(vCache, element, 2), halves[i]!.v[n]!);
      });
    });
  });
  return {
    patch(base, stage) {
      const offset = k.sub('u32', k.reg('u32'), position, base);
      const here = k.and(
        'pred',
        k.reg('pred'),
        owns,
        k.setp('lt', 'u32', k.reg('pred'), offset, DECODE_MMA_TILE),
      );
      k.ifThen(here, () => {
        elements.forEach(({ at }, i) => {
          at.forEach((e, n) => {
            // Element e of the row: byte 2·(e mod 8) of its 16-byte chunk e / 8, swizzled as the copies place it.
            const chunk = swizzled(k, hd * 2, offset, k.shr('u32', k.reg('u32'), e, 3));
            const byte = k.add(
              'u32',
              k.reg('u32'),
              chunk,
              k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), e, 7), 1),
            );
            const to = k.add('u32', k.reg('u32'), stage, byte);
            k.stShared('b16', to, halves[i]!.k[n]!);
            k.stShared('b16', addr(to, tileBytes(hd)), halves[i]!.v[n]!);
          });
        });
        k.warpSync();
      });
    },
  };
}
