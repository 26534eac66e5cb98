import {
  Q4K_SUB_BLOCK,
  Q4K_SUB_SCALE_WORDS,
  Q4K_SUPER_BLOCK,
  Q5K_HIGH_WORDS_AT,
  Q5K_SUPER_WORDS,
  Q6K_HIGH_WORDS_AT,
  Q6K_SCALE_WORDS,
  Q6K_SUB_BLOCK,
  Q6K_SUPER_WORDS,
  reciprocalOf,
} from '@rayo/core';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Pred, R32, R64 } from '../ptx/operands.js';
import { BLOCK } from './common.js';
import { loadAllParams } from './entryParams.js';
import { asStored, nearestQuotient, positiveZero } from './quantizeArithmetic.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES, storageKey, storeFromF32 } from './storage.js';

// quantizeRows for q4k, q5k and q6k (GGUF's Q4_K, Q5_K and Q6_K layouts,
// quant/layout.ts), bit for bit as the host quantizer (quant/q4k.ts,
// quant/q5k.ts, quant/q6k.ts): a thread per super-block of 256. A first pass
// finds the sub-blocks' ranges and the largest of them, which give d (and
// q4k's and q5k's dmin); a second pass, sub-block by sub-block, finds its
// range again (from cache), its 6-bit or int8 scale, and writes its codes
// (q5k is q4k with 31 levels and a word of high bits per sub-block). A super-block holding a weight that is not finite writes
// NaN d (and dmin) and zero codes and sub-block scales.

export const QUANTIZE_SUPER_BLOCKS_ENTRY = 'quantize_super_blocks';

export interface QuantizeSuperBlocksVariant {
  readonly format: 'q4k' | 'q5k' | 'q6k';
  readonly weight: FloatStorage;
  readonly scale: FloatStorage;
}

export function quantizeSuperBlocksKey(v: QuantizeSuperBlocksVariant): string {
  return `quantizeSuperBlocks/${v.format}${storageKey([v.weight, v.scale])}`;
}

interface SuperBlock {
  readonly k: KernelBuilder;
  readonly v: QuantizeSuperBlocksVariant;
  readonly w: R64;
  /** The super-block's first weight, its first word of codes and its index. */
  readonly first: R32;
  readonly out: R32;
  readonly block: R32;
  readonly packed: R64;
  readonly scales: R64;
  readonly zeros: R64;
  readonly offsets: R64;
}

/** The weight at element `at`, and whether it is not finite ORed into `bad`. */
function weightAt(s: SuperBlock, at: R32, bad?: R32): F32 {
  const { k } = s;
  const x = loadOneAsF32(k, s.v.weight, k.elementAddress(s.w, at, STORAGE_BYTES[s.v.weight]));
  if (bad) {
    const exponent = k.and('b32', k.reg('u32'), k.mov('b32', k.reg('u32'), x), 0x7f800000);
    const nonFinite = k.setp('eq', 'u32', k.reg('pred'), exponent, 0x7f800000);
    k.selp('b32', bad, 1, bad, nonFinite);
  }
  return x;
}

/** The integer nearest to t / scale where `positive` (scale > 0), else 0, clamped to [lo, hi]. */
function code(k: KernelBuilder, t: F32, scale: F32, positive: Pred, lo: number, hi: number): R32 {
  const q = k.selp('s32', k.reg('s32'), nearestQuotient(k, t, scale), 0, positive);
  return k.max('s32', q, k.min('s32', q, q, hi), lo);
}

/** min(cap, nearest(value / d)) where d > 0, else 0: a sub-block's 6-bit or int8 scale. */
function subScale(k: KernelBuilder, value: F32, d: F32, cap: number): R32 {
  const positive = k.setp('gt', 'f32', k.reg('pred'), d, 0);
  const q = k.min('s32', k.reg('s32'), nearestQuotient(k, value, d), cap);
  return k.selp('s32', q, q, 0, positive);
}

/** A q4k (q5k) sub-block's scale f32(f32(hi − lo) · f32(1 / 15 (31))) and min −lo over [min(0, lo), hi]. */
function q4kRange(s: SuperBlock, at: R32, levels: number, bad?: R32): { scale: F32; min: F32 } {
  const { k } = s;
  const lo = k.mov('f32', k.reg('f32'), 0);
  const hi = k.mov('f32', k.reg('f32'), 0);
  const i = k.reg('u32');
  k.forRange(i, at, k.add('u32', k.reg('u32'), at, Q4K_SUB_BLOCK), 1, () => {
    const x = weightAt(s, i, bad);
    k.min('f32', lo, lo, x);
    k.max('f32', hi, hi, x);
  });
  const low = positiveZero(k, lo);
  const range = k.sub('f32', k.reg('f32'), positiveZero(k, hi), low, { rnd: 'rn' });
  return {
    scale: k.mul('f32', k.reg('f32'), range, reciprocalOf(levels), { rnd: 'rn' }),
    min: positiveZero(k, k.neg('f32', k.reg('f32'), low)),
  };
}

/** q4k, or q5k: its codes 0 … 31, their low nibbles where q4k's go and high bits in word 32 + j. */
function q4kBody(s: SuperBlock): void {
  const { k, v } = s;
  const q5k = v.format === 'q5k';
  const levels = q5k ? 31 : 15;
  const bad = k.mov('b32', k.reg('u32'), 0);
  const largestScale = k.mov('f32', k.reg('f32'), 0);
  const largestMin = k.mov('f32', k.reg('f32'), 0);
  const j = k.reg('u32');
  const subAt = (j: R32) => k.madLo('u32', k.reg('u32'), j, Q4K_SUB_BLOCK, s.first);
  k.forRange(j, 0, Q4K_SUPER_BLOCK / Q4K_SUB_BLOCK, 1, () => {
    const range = q4kRange(s, subAt(j), levels, bad);
    k.max('f32', largestScale, largestScale, range.scale);
    k.max('f32', largestMin, largestMin, range.min);
  });
  const d = asStored(k, v.scale, k.mul('f32', k.reg('f32'), largestScale, reciprocalOf(63), { rnd: 'rn' }));
  const dmin = asStored(k, v.scale, k.mul('f32', k.reg('f32'), largestMin, reciprocalOf(63), { rnd: 'rn' }));
  const ok = k.setp('eq', 'u32', k.reg('pred'), bad, 0);
  const words = [0, 1, 2].map(() => k.mov('b32', k.reg('u32'), 0));
  k.forRange(j, 0, Q4K_SUPER_BLOCK / Q4K_SUB_BLOCK, 1, () => {
    const base = subAt(j);
    const range = q4kRange(s, base, levels);
    const sc = subScale(k, range.scale, d, 63);
    const m = subScale(k, range.min, dmin, 63);
    // Sub-blocks 0-3 keep sc and m in bytes j and j + 4; 4-7 their low nibbles in byte j + 4 and their
    // high pairs in the top bits of bytes j - 4 and j (ggml's get_scale_min_k4).
    const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), j, 3), 3);
    const low = k.setp('lt', 'u32', k.reg('pred'), j, 4);
    const highPair = (x: R32) => k.shl('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), x, 4), 6);
    const nibbles = k.or(
      'b32',
      k.reg('u32'),
      k.and('b32', k.reg('u32'), sc, 15),
      k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), m, 15), 4),
    );
    const parts = [
      k.selp('b32', k.reg('u32'), sc, highPair(sc), low),
      k.selp('b32', k.reg('u32'), m, highPair(m), low),
      k.selp('b32', k.reg('u32'), 0, nibbles, low),
    ];
    parts.forEach((part, i) => {
      k.or('b32', words[i]!, words[i]!, k.shl('b32', k.reg('u32'), part, shift));
    });
    const scale = k.mul('f32', k.reg('f32'), d, k.cvt('f32', 's32', k.reg('f32'), sc, { rnd: 'rn' }), {
      rnd: 'rn',
    });
    const offset = k.mul('f32', k.reg('f32'), dmin, k.cvt('f32', 's32', k.reg('f32'), m, { rnd: 'rn' }), {
      rnd: 'rn',
    });
    const positive = k.setp('gt', 'f32', k.reg('pred'), scale, 0);
    const high = q5k ? k.mov('b32', k.reg('u32'), 0) : undefined;
    const word = k.reg('u32');
    k.forRange(word, 0, Q4K_SUB_BLOCK / 8, 1, () => {
      const from = k.madLo('u32', k.reg('u32'), word, 8, base);
      const bits = k.mov('b32', k.reg('u32'), 0);
      // q5k: code e of the word has its high bit at 8 · (e / 2) + 2 · word + e mod 2 (the inverse of q5kCode).
      const wordShift = high ? k.shl('b32', k.reg('u32'), word, 1) : undefined;
      for (let e = 0; e < 8; e++) {
        const x = weightAt(s, k.add('u32', k.reg('u32'), from, e));
        const q = code(k, k.add('f32', k.reg('f32'), x, offset, { rnd: 'rn' }), scale, positive, 0, levels);
        if (high && wordShift) {
          const shift = k.add('u32', k.reg('u32'), wordShift, 8 * (e >> 1) + (e & 1));
          k.or('b32', high, high, k.shl('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), q, 4), shift));
          k.and('b32', q, q, 15);
        }
        k.or('b32', bits, bits, k.shl('b32', k.reg('u32'), q, 4 * e));
      }
      const at = k.add('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), j, Q4K_SUB_BLOCK / 8, s.out), word);
      k.stGlobal('b32', k.elementAddress(s.packed, at, 4), k.selp('b32', k.reg('u32'), bits, 0, ok));
    });
    if (high) {
      const at = k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), s.out, Q5K_HIGH_WORDS_AT), j);
      k.stGlobal('b32', k.elementAddress(s.packed, at, 4), k.selp('b32', k.reg('u32'), high, 0, ok));
    }
  });
  words.forEach((word, i) => {
    const at = k.madLo('u32', k.reg('u32'), s.block, Q4K_SUB_SCALE_WORDS, i);
    k.stGlobal('b32', k.elementAddress(s.zeros, at, 4), k.selp('b32', k.reg('u32'), word, 0, ok));
  });
  const scaleBytes = STORAGE_BYTES[v.scale];
  storeFromF32(
    k,
    v.scale,
    k.elementAddress(s.scales, s.block, scaleBytes),
    k.selp('f32', k.reg('f32'), d, Number.NaN, ok),
  );
  storeFromF32(
    k,
    v.scale,
    k.elementAddress(s.offsets, s.block, scaleBytes),
    k.selp('f32', k.reg('f32'), dmin, Number.NaN, ok),
  );
}

/** A q6k sub-block's f32(max |w| · f32(1 / 31)). */
function q6kAmax(s: SuperBlock, at: R32, bad?: R32): F32 {
  const { k } = s;
  const most = k.mov('f32', k.reg('f32'), 0);
  const i = k.reg('u32');
  k.forRange(i, at, k.add('u32', k.reg('u32'), at, Q6K_SUB_BLOCK), 1, () => {
    k.max('f32', most, most, k.abs('f32', k.reg('f32'), weightAt(s, i, bad)));
  });
  return k.mul('f32', k.reg('f32'), most, reciprocalOf(31), { rnd: 'rn' });
}

function q6kBody(s: SuperBlock): void {
  const { k, v } = s;
  const bad = k.mov('b32', k.reg('u32'), 0);
  const largest = k.mov('f32', k.reg('f32'), 0);
  const j = k.reg('u32');
  const subAt = (j: R32) => k.madLo('u32', k.reg('u32'), j, Q6K_SUB_BLOCK, s.first);
  k.forRange(j, 0, Q4K_SUPER_BLOCK / Q6K_SUB_BLOCK, 1, () => {
    k.max('f32', largest, largest, q6kAmax(s, subAt(j), bad));
  });
  const d = asStored(k, v.scale, k.mul('f32', k.reg('f32'), largest, reciprocalOf(127), { rnd: 'rn' }));
  const ok = k.setp('eq', 'u32', k.reg('pred'), bad, 0);
  const store = (at: R32, value: R32) =>
    k.stGlobal('b32', k.elementAddress(s.packed, at, 4), k.selp('b32', k.reg('u32'), value, 0, ok));
  const scaleWord = k.reg('u32');
  const word = k.reg('u32');
  k.forRange(word, 0, Q6K_SCALE_WORDS, 1, () => {
    k.mov('b32', scaleWord, 0);
    const jj = k.reg('u32');
    k.forRange(jj, 0, 4, 1, () => {
      k.madLo('u32', j, word, 4, jj);
      const base = subAt(j);
      const sc = subScale(k, q6kAmax(s, base), d, 127);
      k.or('b32', scaleWord, scaleWord, k.shl('b32', k.reg('u32'), sc, k.shl('b32', k.reg('u32'), jj, 3)));
      const scale = k.mul('f32', k.reg('f32'), d, k.cvt('f32', 's32', k.reg('f32'), sc, { rnd: 'rn' }), {
        rnd: 'rn',
      });
      const positive = k.setp('gt', 'f32', k.reg('pred'), scale, 0);
      // Codes 16j … 16j + 15: nibbles in words 2j and 2j + 1, high pairs in word 32 + j (the inverse of q6kCode).
      const high = k.mov('b32', k.reg('u32'), 0);
      const h = k.reg('u32');
      k.forRange(h, 0, 2, 1, () => {
        const from = k.madLo('u32', k.reg('u32'), h, 8, base);
        const halfShift = k.shl('b32', k.reg('u32'), h, 2);
        const nibbles = k.mov('b32', k.reg('u32'), 0);
        for (let e = 0; e < 8; e++) {
          const x = weightAt(s, k.add('u32', k.reg('u32'), from, e));
          const q = k.add('s32', k.reg('s32'), code(k, x, scale, positive, -32, 31), 32);
          k.or('b32', nibbles, nibbles, k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), q, 15), 4 * e));
          const shift = k.add('u32', k.reg('u32'), halfShift, 8 * (e >> 1) + 2 * (e & 1));
          k.or('b32', high, high, k.shl('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), q, 4), shift));
        }
        const twoJ = k.madLo('u32', k.reg('u32'), j, 2, h);
        store(k.add('u32', k.reg('u32'), s.out, twoJ), nibbles);
      });
      store(k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), s.out, Q6K_HIGH_WORDS_AT), j), high);
    });
    const at = k.madLo('u32', k.reg('u32'), s.block, Q6K_SCALE_WORDS, word);
    k.stGlobal('b32', k.elementAddress(s.zeros, at, 4), k.selp('b32', k.reg('u32'), scaleWord, 0, ok));
  });
  storeFromF32(
    k,
    v.scale,
    k.elementAddress(s.scales, s.block, STORAGE_BYTES[v.scale]),
    k.selp('f32', k.reg('f32'), d, Number.NaN, ok),
  );
}

/** The module of `quantizeRows` for q4k, q5k or q6k: a thread per super-block, `units` of them per row. */
export function quantizeSuperBlocksModule(v: QuantizeSuperBlocksVariant): PtxModule {
  const m = new PtxModule();
  m.entry(
    QUANTIZE_SUPER_BLOCKS_ENTRY,
    {
      w: 'ptr',
      packed: 'ptr',
      scales: 'ptr',
      zeros: 'ptr',
      offsets: 'ptr',
      total: 'u32',
      k: 'u32',
      units: 'u32',
    },
    (k, p) => {
      const { w, packed, scales, zeros, offsets, total, k: kd, units } = loadAllParams(k, p);
      k.gridStrideLoop(total, (t) => {
        const row = k.div('u32', k.reg('u32'), t, units);
        const within = k.sub('u32', k.reg('u32'), t, k.mulLo('u32', k.reg('u32'), row, units));
        const first = k.madLo('u32', k.reg('u32'), row, kd, k.shl('b32', k.reg('u32'), within, 8));
        const superWords =
          v.format === 'q4k' ? Q4K_SUPER_BLOCK / 8 : v.format === 'q5k' ? Q5K_SUPER_WORDS : Q6K_SUPER_WORDS;
        const out = k.mulLo('u32', k.reg('u32'), t, superWords);
        const s: SuperBlock = { k, v, w, first, out, block: t, packed, scales, zeros, offsets };
        if (v.format === 'q6k') q6kBody(s);
        else q4kBody(s);
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}
