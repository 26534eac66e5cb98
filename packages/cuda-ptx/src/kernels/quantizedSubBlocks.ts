import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES } from './storage.js';

// q4k's scales (core's quant/layout.ts): a super-block's d and dmin, and the
// 6-bit sc and m of one of its eight sub-blocks read from the file's twelve
// bytes as ggml's get_scale_min_k4 reads them, branch-free.

/** Where a sub-block's scales lie: its super-block's entry of `scales`/`offsets`, first sub-block word, and j (0 … 7). */
export interface SubBlockAt {
  readonly scale: R32;
  readonly words: R32;
  readonly sub: R32;
}

/**
 * The scale f32(d · sc) and offset f32(dmin · m) of one q4k sub-block, as
 * ggml rounds them; 0 and 0 where `ok` is false.
 */
export function subBlockScaleOffset(
  k: KernelBuilder,
  storage: FloatStorage,
  ptrs: { readonly scales: R64; readonly offsets: R64; readonly zeros: R64 },
  at: SubBlockAt,
  ok?: Pred,
): { scale: F32; offset: F32 } {
  const bytes = STORAGE_BYTES[storage];
  const d = loadOneAsF32(k, storage, k.elementAddress(ptrs.scales, at.scale, bytes), ok);
  const dmin = loadOneAsF32(k, storage, k.elementAddress(ptrs.offsets, at.scale, bytes), ok);
  return subBlockFromWords(k, d, dmin, loadSubBlockWords(k, ptrs.zeros, at.words, ok), at.sub);
}

/** A super-block's three words of 6-bit sub-block scales, from word `first` of `zeros`; zeros where `ok` is false. */
function loadSubBlockWords(k: KernelBuilder, zeros: R64, first: R32, ok?: Pred): [R32, R32, R32] {
  const base = k.elementAddress(zeros, first, 4);
  return [0, 1, 2].map((i) => {
    const word = k.mov('b32', k.reg('u32'), 0);
    const load = () => k.ldGlobal('b32', word, addr(base, 4 * i), { nc: true });
    if (ok) k.predicated(ok, load);
    else load();
    return word;
  }) as [R32, R32, R32];
}

/** Sub-block `sub` (0 … 7)'s f32(d · sc) and f32(dmin · m) from its super-block's d, dmin and three scale words. */
function subBlockFromWords(
  k: KernelBuilder,
  d: F32,
  dmin: F32,
  words: readonly [R32, R32, R32],
  sub: R32,
): { scale: F32; offset: F32 } {
  // Byte j mod 4 of each word: sub-blocks 0–3 keep sc and m in the low 6 bits of words 0 and 1;
  // 4–7 in the nibbles of word 2's byte, with the top 2 bits in words 0 and 1's.
  const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), sub, 3), 3);
  const [b0, b1, b2] = words.map((word) =>
    k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), word, shift), 0xff),
  ) as [R32, R32, R32];
  const high = k.setp('ge', 'u32', k.reg('pred'), sub, 4);
  const topOf = (b: R32) => k.shl('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), b, 6), 4);
  const highSc = k.or('b32', k.reg('u32'), k.and('b32', k.reg('u32'), b2, 0xf), topOf(b0));
  const highM = k.or('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), b2, 4), topOf(b1));
  const sc = k.selp('u32', k.reg('u32'), highSc, k.and('b32', k.reg('u32'), b0, 63), high);
  const m = k.selp('u32', k.reg('u32'), highM, k.and('b32', k.reg('u32'), b1, 63), high);
  return scaled(k, d, dmin, sc, m);
}

/**
 * What reading sub-block j's sc and m takes, for a lane whose sub-block is
 * always j = lane mod 8 (the int8 GEMV's lanes): the byte's shift (8 (j mod
 * 4)), m's shift, the low bits' mask (63, or 15 from j = 4), the shift and
 * mask of the top 2 bits (none below j = 4), and whether j ≥ 4.
 */
export interface SubBlockShifts {
  readonly high: Pred;
  readonly byte: R32;
  readonly mByte: R32;
  readonly lowMask: R32;
  readonly top: R32;
  readonly topMask: R32;
}

export function subBlockShifts(k: KernelBuilder, lane: R32): SubBlockShifts {
  const j = k.and('b32', k.reg('u32'), lane, 7);
  const high = k.setp('ge', 'u32', k.reg('pred'), j, 4);
  const byte = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), j, 3), 3);
  return {
    high,
    byte,
    mByte: k.selp('u32', k.reg('u32'), k.add('u32', k.reg('u32'), byte, 4), byte, high),
    lowMask: k.selp('u32', k.reg('u32'), 15, 63, high),
    // The top 2 bits of byte j − 4 (bits 6, 7) moved to bits 4, 5.
    top: k.add('u32', k.reg('u32'), byte, 2),
    topMask: k.selp('u32', k.reg('u32'), 0x30, 0, high),
  };
}

/** subBlockFromWords for a lane's fixed sub-block (`subBlockShifts`): the same sc and m, the same f32s. */
export function subBlockOf(
  k: KernelBuilder,
  d: F32,
  dmin: F32,
  words: readonly [R32, R32, R32],
  at: SubBlockShifts,
): { scale: F32; offset: F32 } {
  const [w0, w1, w2] = words;
  const u = () => k.reg('u32');
  // Below j = 4: sc and m are the low 6 bits of byte j of words 0 and 1. From j = 4: the nibbles
  // of word 2's byte j − 4, with the top 2 bits of words 0's and 1's byte j − 4.
  const field = (low: R32, shift: R32, topWord: R32) =>
    k.or(
      'b32',
      u(),
      k.and('b32', u(), k.shr('b32', u(), low, shift), at.lowMask),
      k.and('b32', u(), k.shr('b32', u(), topWord, at.top), at.topMask),
    );
  const sc = field(k.selp('u32', u(), w2, w0, at.high), at.byte, w0);
  const m = field(k.selp('u32', u(), w2, w1, at.high), at.mByte, w1);
  return scaled(k, d, dmin, sc, m);
}

/** f32(d · sc) and f32(dmin · m), as ggml rounds them. */
function scaled(k: KernelBuilder, d: F32, dmin: F32, sc: R32, m: R32): { scale: F32; offset: F32 } {
  const asF32 = (v: R32) => k.cvt('f32', 'u32', k.reg('f32'), v, { rnd: 'rn' });
  return {
    scale: k.mul('f32', k.reg('f32'), d, asF32(sc), { rnd: 'rn' }),
    offset: k.mul('f32', k.reg('f32'), dmin, asF32(m), { rnd: 'rn' }),
  };
}
