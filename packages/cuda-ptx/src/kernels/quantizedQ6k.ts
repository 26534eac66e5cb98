import { Q6K_HIGH_WORDS_AT, Q6K_SCALE_WORDS, Q6K_SUPER_WORDS } from '@rayo/core';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32, Pred, R32, R64 } from '../ptx/operands.js';
import { MAGIC, MAGIC_BITS } from './quantizedCodes.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES } from './storage.js';

// q6k's codes and scales (core's quant/layout.ts has the bits): a nibble word
// and its high word give eight whole 6-bit codes through byte masks, as
// ggml's own kernels form them; an int8 sub-block scale and d give the
// scale f32(d · sc) as ggml rounds it. Exact f32s without cvt: each byte
// ORed into the mantissa of 2^23.

/** The bias q6k's codes are read against: 2^23 + 32 (value = (q − 32) · scale). */
export const Q6K_BIAS = MAGIC + 32;

/**
 * The eight codes of nibble word `low` (weights 8i … 8i + 7 of a super-block)
 * less 32, as exact f32s in weight order. `high` is the high word of the
 * pair of nibble words it belongs to, shifted right by 4 for the pair's
 * second word (so its pairs lie at bits 0–1 and 2–3 of each byte either way).
 */
export function q6kCodes(k: KernelBuilder, low: R32, high: R32): F32[] {
  return byteCodes(k, low, high, Q6K_PLANE, Q6K_BIAS);
}

/** Where a format's high bits join a nibble word's codes: shifts for the even and odd nibbles, and the byte mask. */
export interface BytePlane {
  readonly even: number;
  readonly odd: number;
  readonly mask: number;
}

/** q6k's high pairs (bits 4–5 of each code byte) and q5k's high bit (bit 4). */
export const Q6K_PLANE: BytePlane = { even: 4, odd: 2, mask: 0x30303030 };
export const Q5K_PLANE: BytePlane = { even: 4, odd: 3, mask: 0x10101010 };

/**
 * The whole codes of nibble word `low` as bytes: weights 0, 2, 4, 6 of it in
 * the first word, 1, 3, 5, 7 in the second, each a nibble with its high bits
 * from `high` (see byteCodes).
 */
export function bytePlanes(k: KernelBuilder, low: R32, high: R32, plane: BytePlane): [R32, R32] {
  const u = () => k.reg('u32');
  const even = k.or(
    'b32',
    u(),
    k.and('b32', u(), low, 0x0f0f0f0f),
    k.and('b32', u(), k.shl('b32', u(), high, plane.even), plane.mask),
  );
  const odd = k.or(
    'b32',
    u(),
    k.and('b32', u(), k.shr('b32', u(), low, 4), 0x0f0f0f0f),
    k.and('b32', u(), k.shl('b32', u(), high, plane.odd), plane.mask),
  );
  return [even, odd];
}

/**
 * The eight codes of nibble word `low` less `bias`, as exact f32s in weight
 * order, each a nibble with high bits from `high` (bit 4 up): byte b of the
 * nibble word's even and odd nibbles take `high` shifted left by `plane.even`
 * and `plane.odd` under `plane.mask` (q6k's high pairs, q5k's high bits).
 */
export function byteCodes(k: KernelBuilder, low: R32, high: R32, plane: BytePlane, bias: number): F32[] {
  const u = () => k.reg('u32');
  const [even, odd] = bytePlanes(k, low, high, plane);
  // Weight 2b + e is byte b of `even` (e = 0) or `odd` (e = 1).
  return Array.from({ length: 8 }, (_, m) => {
    const word = m & 1 ? odd : even;
    const b = m >> 1;
    const shifted = b === 0 ? word : k.shr('b32', u(), word, 8 * b);
    const bits = b === 3 ? shifted : k.and('b32', u(), shifted, 0xff);
    k.or('b32', bits, bits, MAGIC_BITS);
    const value = k.mov('b32', k.reg('f32'), bits);
    return k.sub('f32', value, value, bias, { rnd: 'rn' });
  });
}

/** The signed byte of `word` at bit `shift` (a multiple of 8) as an exact f32: its sign bit flipped, read as 2^23 + 128 + sc. */
export function int8At(k: KernelBuilder, word: R32, shift: R32 | number): F32 {
  const shifted = shift === 0 ? word : k.shr('b32', k.reg('u32'), word, shift);
  const bits = k.xor('b32', k.reg('u32'), k.and('b32', k.reg('u32'), shifted, 0xff), 0x80);
  k.or('b32', bits, bits, MAGIC_BITS);
  const value = k.mov('b32', k.reg('f32'), bits);
  return k.sub('f32', value, value, MAGIC + 128, { rnd: 'rn' });
}

/** f32(d · sc): a sub-block's scale as ggml rounds it. */
export function q6kScale(k: KernelBuilder, d: F32, sc: F32): F32 {
  return k.mul('f32', k.reg('f32'), d, sc, { rnd: 'rn' });
}

/**
 * The value of element `col` of row `id` of a q6k table, f32(f32(d · sc) · (q − 32)) as ggml forms it,
 * its loads predicated on `ok` (0 where it is false).
 */
export function q6kElement(
  k: KernelBuilder,
  storage: FloatStorage,
  ptrs: { readonly packed: R64; readonly scales: R64; readonly zeros: R64 },
  at: {
    readonly id: R32;
    readonly col: R32;
    readonly rowWords: R32;
    readonly groups: R32;
    readonly zeroWords: R32;
  },
  ok: Pred,
): F32 {
  const u = () => k.reg('u32');
  const g = k.shr('u32', u(), at.col, 8);
  const i = k.and('b32', u(), at.col, 255);
  const superAt = k.madLo('u32', u(), g, Q6K_SUPER_WORDS, k.mulLo('u32', u(), at.id, at.rowWords));
  const load = (ptr: R64, index: R32) => {
    const word = k.mov('b32', u(), 0);
    k.predicated(ok, () => k.ldGlobal('b32', word, k.elementAddress(ptr, index, 4), { nc: true }));
    return word;
  };
  const low = load(ptrs.packed, k.add('u32', u(), superAt, k.shr('u32', u(), i, 3)));
  const high = load(
    ptrs.packed,
    k.add('u32', u(), superAt, k.add('u32', u(), k.shr('u32', u(), i, 4), Q6K_HIGH_WORDS_AT)),
  );
  // The nibble at bit 4 · (i mod 8); the high pair at 8 · ((i mod 8) / 2) + 2 · (2 · ((i / 8) mod 2) + i mod 2).
  const nibble = k.and(
    'b32',
    u(),
    k.shr('b32', u(), low, k.shl('b32', u(), k.and('b32', u(), i, 7), 2)),
    0xf,
  );
  const pairShift = k.add(
    'u32',
    u(),
    k.shl('b32', u(), k.and('b32', u(), i, 6), 2),
    k.shl(
      'b32',
      u(),
      k.or('b32', u(), k.and('b32', u(), k.shr('u32', u(), i, 2), 2), k.and('b32', u(), i, 1)),
      1,
    ),
  );
  const pair = k.and('b32', u(), k.shr('b32', u(), high, pairShift), 3);
  const code = k.or('b32', u(), nibble, k.shl('b32', u(), pair, 4));
  const q = k.cvt('f32', 'u32', k.reg('f32'), code, { rnd: 'rn' });
  k.sub('f32', q, q, 32, { rnd: 'rn' });
  // Sub-block i / 16: byte (i / 16) mod 4 of zeros word 4g + i / 64.
  const scWord = load(
    ptrs.zeros,
    k.madLo(
      'u32',
      u(),
      at.id,
      at.zeroWords,
      k.madLo('u32', u(), g, Q6K_SCALE_WORDS, k.shr('u32', u(), i, 6)),
    ),
  );
  const sc = int8At(k, scWord, k.shl('b32', u(), k.and('b32', u(), k.shr('u32', u(), i, 4), 3), 3));
  const d = k.mov('f32', k.reg('f32'), 0);
  loadAsF32(
    k,
    storage,
    [d],
    k.elementAddress(ptrs.scales, k.madLo('u32', u(), at.id, at.groups, g), STORAGE_BYTES[storage]),
    { ok },
  );
  return k.mul('f32', k.reg('f32'), q6kScale(k, d, sc), q, { rnd: 'rn' });
}
