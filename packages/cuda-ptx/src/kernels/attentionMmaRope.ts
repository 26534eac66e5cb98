import type { Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type Param, type R32 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { DECODE_MMA_TILE, DECODE_MMA_WARPS } from './attentionMmaPlan.js';
import { tileBytes } from './attentionMmaRing.js';
import { loadPointer, loadU32 } from './common.js';
import { swizzled } from './mmaTiles.js';
import { type RopeFrequencies, type RopeLayout, ropeSinCos, rotatePair } from './rope.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES } from './storage.js';

// ropeAttention inside the tensor-core decode attention: q rotated in the A
// fragments as they load, and the token's new K and V row. The row goes to
// the caches from the one warp whose tile holds it, which also writes it over
// that tile's copy in shared memory once the copy has arrived: no block
// waits for the row before its tile copies start.

/** What the rope of ropeAttention's fused kernel works with. */
export interface KernelRope {
  readonly layout: RopeLayout;
  readonly frequencies: RopeFrequencies;
  /** The token's position: the last attended row (seqLen − 1; past the cache for a length of 0). */
  readonly position: R32;
}

/**
 * q rotated in the A fragment registers: qs[kk][o] holds elements 16·kk + 8·o
 * + colPair and the next of the lane's row. Under 'half' an element's partner
 * (headDim / 2 further) is in the same lane, kk + headDim / 32; under
 * 'interleaved' it is the register beside it.
 */
export function rotateQ(
  k: KernelBuilder,
  qs: readonly (readonly F32[][])[],
  r: KernelRope & { readonly headDim: number; readonly colPair: R32 },
): void {
  const steps = r.headDim / 16;
  const rotate = (a: F32, b: F32, pair: R32) => {
    const { sin, cos } = ropeSinCos(k, r.position, pair, r.frequencies);
    const [x, y] = rotatePair(k, a, b, cos, sin);
    k.mov('f32', a, x);
    k.mov('f32', b, y);
  };
  for (let kk = 0; kk < steps; kk++) {
    for (const o of [0, 1]) {
      const first = k.add('u32', k.reg('u32'), r.colPair, 16 * kk + 8 * o);
      if (r.layout === 'interleaved') {
        rotate(qs[kk]![o]![0]!, qs[kk]![o]![1]!, k.shr('u32', k.reg('u32'), first, 1));
      } else if (kk < steps / 2) {
        for (const e of [0, 1]) {
          const pair = e === 0 ? first : k.add('u32', k.reg('u32'), first, 1);
          rotate(qs[kk]![o]![e]!, qs[kk + steps / 2]![o]![e]!, pair);
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
 * DECODE_MMA_WARPS): lane c < headDim / 8 loads elements 8c … 8c + 7 of kv
 * head ctaid.y's k (and under 'half' their partners headDim / 2 away) and v
 * from the fused row, rotates k, rounds both to the cache's type and stores
 * the two 16-byte chunks into the caches' row; `patch` puts the same words
 * into the tile in shared memory.
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
  },
): NewRow {
  const { headDim: hd, position } = w;
  const chunks = hd / 8;
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
  const writes = k.and('pred', k.reg('pred'), owns, k.setp('lt', 'u32', k.reg('pred'), w.lane, chunks));
  const kWords = k.regs('u32', 4);
  const vWords = k.regs('u32', 4);
  k.ifThen(writes, () => {
    const actBytes = STORAGE_BYTES[w.act];
    const source = loadPointer(k, p, 'q');
    const first = k.shl('b32', k.reg('u32'), w.lane, 3);
    // k: row nHeads + kvHead of the fused input; v: row nHeads + nKvHeads + kvHead.
    const kRow = k.madLo('u32', k.reg('u32'), k.nctaid('y'), w.group, w.kvHead);
    const vRow = k.add('u32', k.reg('u32'), kRow, k.nctaid('y'));
    const elements = (row: R32, from: R32) => {
      const at = k.elementAddress(source, k.madLo('u32', k.reg('u32'), row, hd, from), actBytes);
      return Array.from({ length: 8 }, (_, i) => loadOneAsF32(k, w.act, addr(at, i * actBytes)));
    };
    const own = elements(kRow, first);
    const v = elements(vRow, first);
    let rotated: F32[];
    if (w.layout === 'interleaved') {
      rotated = [];
      for (let i = 0; i < 4; i++) {
        const pair = k.add('u32', k.reg('u32'), k.shr('u32', k.reg('u32'), first, 1), i);
        const { sin, cos } = ropeSinCos(k, position, pair, w.frequencies);
        rotated.push(...rotatePair(k, own[2 * i]!, own[2 * i + 1]!, cos, sin));
      }
    } else {
      // Under 'half' element e < headDim / 2 pairs with e + headDim / 2: the lane's chunk is the pairs' first or second.
      const firstHalf = k.setp('lt', 'u32', k.reg('pred'), first, hd / 2);
      const partnerFirst = k.selp(
        'u32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), first, hd / 2),
        k.sub('u32', k.reg('u32'), first, hd / 2),
        firstHalf,
      );
      const partner = elements(kRow, partnerFirst);
      const pair0 = k.min('u32', k.reg('u32'), first, partnerFirst);
      rotated = own.map((x, i) => {
        const a = k.selp('f32', k.reg('f32'), x, partner[i]!, firstHalf);
        const b = k.selp('f32', k.reg('f32'), partner[i]!, x, firstHalf);
        const { sin, cos } = ropeSinCos(k, position, k.add('u32', k.reg('u32'), pair0, i), w.frequencies);
        const [x1, y1] = rotatePair(k, a, b, cos, sin);
        return k.selp('f32', k.reg('f32'), x1, y1, firstHalf);
      });
    }
    for (let j = 0; j < 4; j++) {
      k.cvtPack(w.cache, kWords[j]!, rotated[2 * j]!, rotated[2 * j + 1]!);
      k.cvtPack(w.cache, vWords[j]!, v[2 * j]!, v[2 * j + 1]!);
    }
    const row = k.madLo('u32', k.reg('u32'), w.kvHead, loadU32(k, p, 'maxSeq'), position);
    const element = k.madLo('u32', k.reg('u32'), row, hd, first);
    k.stGlobal(
      'b32',
      k.elementAddress(loadPointer(k, p, 'kCache'), element, 2),
      kWords as unknown as Vec4<R32>,
    );
    k.stGlobal(
      'b32',
      k.elementAddress(loadPointer(k, p, 'vCache'), element, 2),
      vWords as unknown as Vec4<R32>,
    );
  });
  return {
    patch(base, stage) {
      const here = k.and(
        'pred',
        k.reg('pred'),
        owns,
        k.setp('lt', 'u32', k.reg('pred'), k.sub('u32', k.reg('u32'), position, base), DECODE_MMA_TILE),
      );
      k.ifThen(here, () => {
        k.ifThen(k.setp('lt', 'u32', k.reg('pred'), w.lane, chunks), () => {
          const at = k.add(
            'u32',
            k.reg('u32'),
            stage,
            swizzled(k, hd * 2, k.sub('u32', k.reg('u32'), position, base), w.lane),
          );
          k.stShared('b32', at, kWords as unknown as Vec4<R32>);
          k.stShared('b32', addr(at, tileBytes(hd)), vWords as unknown as Vec4<R32>);
        });
        k.warpSync();
      });
    },
  };
}
