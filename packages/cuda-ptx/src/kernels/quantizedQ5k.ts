import { Q5K_HIGH_WORDS_AT } from '@rayo/core';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32, R32 } from '../ptx/operands.js';
import { MAGIC } from './quantizedCodes.js';
import { byteCodes, Q5K_PLANE } from './quantizedQ6k.js';

// q5k's codes (core's quant/layout.ts has the bits): a nibble word and the
// high word of its sub-block give eight whole 5-bit codes through byte masks,
// as q6k's high pairs do; its scales and offsets are q4k's (quantizedSubBlocks.ts).
// q5g32 and q5g32a keep a group's high bits in the same arrangement (a word
// per 32 weights, after the row's nibbles), so they take the same codes.

/**
 * The eight codes (0 … 31, less `centre`: q5g32's 16) of nibble word w of a
 * sub-block, as exact f32s in weight order. `high` is the sub-block's high
 * word shifted right by 2 · w, so that the word's high bits lie at bits 0
 * (even weights) and 1 (odd) of each byte.
 */
export function q5kCodes(k: KernelBuilder, low: R32, high: R32, centre = 0): F32[] {
  return byteCodes(k, low, high, Q5K_PLANE, MAGIC + centre);
}

/** The bit of a high word that holds weight `i`'s (mod 32) high bit: 8 · ((i mod 8) / 2) + 2 · ((i / 8) mod 4) + i mod 2. */
export function q5HighBit(k: KernelBuilder, i: R32): R32 {
  const u = () => k.reg('u32');
  return k.add(
    'u32',
    u(),
    k.shl('b32', u(), k.and('b32', u(), i, 6), 2),
    k.add('u32', u(), k.and('b32', u(), k.shr('u32', u(), i, 2), 6), k.and('b32', u(), i, 1)),
  );
}

/** Where weight `i` (0 … 255, in a register) of the super-block whose first word is `superAt` finds its nibble word and high word, and the high bit's place. */
export function q5kWordsOf(k: KernelBuilder, superAt: R32, i: R32): { low: R32; high: R32; bit: R32 } {
  const u = () => k.reg('u32');
  const low = k.add('u32', u(), superAt, k.shr('u32', u(), i, 3));
  const high = k.add('u32', u(), superAt, k.add('u32', u(), k.shr('u32', u(), i, 5), Q5K_HIGH_WORDS_AT));
  // quant/layout.ts's q5kHighBit.
  return { low, high, bit: q5HighBit(k, i) };
}
