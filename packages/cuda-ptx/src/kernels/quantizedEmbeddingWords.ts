import {
  Q4K_SUB_SCALE_WORDS,
  Q5K_HIGH_WORDS_AT,
  Q5K_SUPER_WORDS,
  Q6K_HIGH_WORDS_AT,
  Q6K_SCALE_WORDS,
  Q6K_SUPER_WORDS,
  type QuantFormat,
  quantLayout,
} from '@rayo/core';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { asVector, BLOCK } from './common.js';
import { loadAllParams } from './entryParams.js';
import { codesOf, fixedBias, isQ5g32, MAGIC } from './quantizedCodes.js';
import { EMBEDDING_TABLE_PARAMS, type QuantEmbeddingVariant } from './quantizedEmbeddingVariant.js';
import { q5kCodes } from './quantizedQ5k.js';
import { int8At, q6kCodes, q6kScale } from './quantizedQ6k.js';
import { subBlockScaleOffset } from './quantizedSubBlocks.js';
import { loadAsF32, STORAGE_BYTES, toHalfBits } from './storage.js';

// quantizedEmbedding with a u32 word of codes per thread (4 or 8 values),
// for rows of whole words (every weight dequantized whole for a tensor-core
// product): the word, its group's scale (zero point, offset, sub-block
// scales) and the row's id are read once per word instead of once per value,
// the row and word come from one division, and the values leave in one
// 16-byte store (two for 8 f32s; 8 bytes for 4 halves), where a thread per
// element spent its time on a division, reloads and 2-byte stores.
//
// The values are the element kernel's bits: codes as exact f32s (2^23 + c
// less 2^23 + the zero point or centre, as the matrix kernels form them;
// the element kernel's cvt and sub give the same exact integers), then
// mul.rn by the scale and sub.rn of the offset in the same order. An id
// outside [0, V) (unsigned) reads nothing and writes NaN.

export const QUANT_EMBEDDING_WORDS_ENTRY = 'quantized_embedding_words';

/**
 * Whether rows of `dim` values of y (`outBytes` each, at `y`) take a thread
 * per word: `dim` whole words of codes, so that every word's values start a
 * vector of y (and none lies in a q8g16 row's padding half-block), and y
 * aligned for the widest of its stores.
 */
export function embeddingWordsApply(format: QuantFormat, dim: number, outBytes: number, y: bigint): boolean {
  const perWord = quantLayout(format, 1).perWord;
  return dim % perWord === 0 && y % BigInt(Math.min(16, perWord * outBytes)) === 0n;
}

export function quantEmbeddingWordsModule(v: QuantEmbeddingVariant): PtxModule {
  const layout = quantLayout(v.format, 1);
  const out = v.out ?? 'f32';
  const scaleBytes = STORAGE_BYTES[v.scale];
  const cvt = v.cvtBf16 === true && out === 'bf16';
  const m = new PtxModule(cvt ? { target: 'sm_80' } : {});
  m.entry(
    QUANT_EMBEDDING_WORDS_ENTRY,
    { ...EMBEDDING_TABLE_PARAMS, words: 'u32', yRowWords: 'u32' },
    (k, p) => {
      const { ids, packed, scales, zeros, offsets, y, words, yRowWords, vocab, rowWords, groups, zeroWords } =
        loadAllParams(k, p);
      const u = () => k.reg('u32');
      /** A u32 of `ptr` at `index`, 0 where `ok` is false. */
      const loadWord = (ptr: R64, index: R32, ok: Pred): R32 => {
        const word = k.mov('b32', u(), 0);
        k.predicated(ok, () => k.ldGlobal('b32', word, k.elementAddress(ptr, index, 4), { nc: true }));
        return word;
      };
      /** A scale (or offset) of `ptr` at `index` as f32, 0 where `ok` is false. */
      const loadScale = (ptr: R64, index: R32, ok: Pred): F32 => {
        const s = k.reg('f32');
        loadAsF32(k, v.scale, [s], k.elementAddress(ptr, index, scaleBytes), { ok });
        return s;
      };

      k.gridStrideLoop(words, (w) => {
        // Word c of y's row r holds values perWord · c … of it, from word c of the id's packed row
        // (q5k's and q6k's nibble words: word c mod 32 of super-block c / 32).
        const row = k.div('u32', u(), w, yRowWords);
        const c = k.sub('u32', u(), w, k.mulLo('u32', u(), row, yRowWords));
        const id = k.ldGlobal('u32', u(), k.elementAddress(ids, row, 4), { nc: true });
        const valid = k.setp('lo', 'u32', k.reg('pred'), id, vocab);
        const rowAt = k.mulLo('u32', u(), id, rowWords);
        const values =
          layout.bits === 6
            ? q6kValues(id, rowAt, c, valid)
            : layout.subBlockScales
              ? subBlockValues(id, rowAt, c, valid)
              : groupValues(id, rowAt, c, valid);
        for (const value of values) k.selp('f32', value, value, Number.NaN, valid);
        storeWord(values, k.elementAddress(y, w, layout.perWord * STORAGE_BYTES[out]));
      });

      /** The group formats: one scale (and zero point or offset) per group of whole words, or per row (q8). */
      function groupValues(id: R32, rowAt: R32, c: R32, valid: Pred): F32[] {
        const word = loadWord(packed, k.add('u32', u(), rowAt, c), valid);
        const g = layout.scalePerRow
          ? k.mov('u32', u(), 0)
          : k.shr('u32', u(), c, Math.log2(layout.groupSize / layout.perWord));
        const groupAt = k.madLo('u32', u(), id, groups, g);
        let codes: F32[];
        if (isQ5g32(layout)) {
          // The group's high word (word 4G + g), shifted to its nibble word c mod 4.
          const highAt = k.add('u32', u(), k.madLo('u32', u(), groups, 4, rowAt), g);
          const high = loadWord(packed, highAt, valid);
          const shift = k.shl('b32', u(), k.and('b32', u(), c, 3), 1);
          codes = q5kCodes(k, word, k.shr('b32', u(), high, shift), layout.offset);
        } else codes = codesOf(k, layout, word, v.zeros ? zeroBias(id, g, valid) : fixedBias(layout));
        const s = loadScale(scales, groupAt, valid);
        const values = codes.map((code) => k.mul('f32', code, code, s, { rnd: 'rn' }));
        if (layout.offsets) {
          const o = loadScale(offsets, groupAt, valid);
          for (const value of values) k.sub('f32', value, value, o, { rnd: 'rn' });
        }
        return values;
      }

      /** 2^23 + the zero point of group g of the id's row (nibble g mod 8 of its zero word g / 8). */
      function zeroBias(id: R32, g: R32, valid: Pred): F32 {
        const zw = loadWord(zeros, k.madLo('u32', u(), id, zeroWords, k.shr('u32', u(), g, 3)), valid);
        const shift = k.shl('b32', u(), k.and('b32', u(), g, 7), 2);
        const zero = k.and('b32', u(), k.shr('b32', u(), zw, shift), 0xf);
        const bias = k.cvt('f32', 'u32', k.reg('f32'), zero, { rnd: 'rn' });
        return k.add('f32', bias, bias, MAGIC, { rnd: 'rn' });
      }

      /** q4k and q5k: f32(f32(q · f32(d · sc)) − f32(dmin · m)) of sub-block c / 4 mod 8 of super-block c / 32. */
      function subBlockValues(id: R32, rowAt: R32, c: R32, valid: Pred): F32[] {
        const g = k.shr('u32', u(), c, 5);
        const sub = k.and('b32', u(), k.shr('u32', u(), c, 2), 7);
        let codes: F32[];
        if (layout.bits === 5) {
          // q5k: nibble word c mod 32 of the super-block's 40 words, and its sub-block's high word.
          const superAt = k.madLo('u32', u(), g, Q5K_SUPER_WORDS, rowAt);
          const low = loadWord(packed, k.add('u32', u(), superAt, k.and('b32', u(), c, 31)), valid);
          const highAt = k.add('u32', u(), superAt, k.add('u32', u(), sub, Q5K_HIGH_WORDS_AT));
          const shift = k.shl('b32', u(), k.and('b32', u(), c, 3), 1);
          codes = q5kCodes(k, low, k.shr('b32', u(), loadWord(packed, highAt, valid), shift));
        } else codes = codesOf(k, layout, loadWord(packed, k.add('u32', u(), rowAt, c), valid), MAGIC);
        const at = {
          scale: k.madLo('u32', u(), id, groups, g),
          words: k.madLo('u32', u(), id, zeroWords, k.mulLo('u32', u(), g, Q4K_SUB_SCALE_WORDS)),
          sub,
        };
        const q4k = subBlockScaleOffset(k, v.scale, { scales, offsets, zeros }, at, valid);
        return codes.map((code) => {
          const value = k.mul('f32', code, code, q4k.scale, { rnd: 'rn' });
          return k.sub('f32', value, value, q4k.offset, { rnd: 'rn' });
        });
      }

      /** q6k: f32(f32(d · sc) · (q − 32)), nibble word c mod 32 of super-block c / 32, sub-block (c mod 32) / 2. */
      function q6kValues(id: R32, rowAt: R32, c: R32, valid: Pred): F32[] {
        const g = k.shr('u32', u(), c, 5);
        const i = k.and('b32', u(), c, 31);
        const superAt = k.madLo('u32', u(), g, Q6K_SUPER_WORDS, rowAt);
        const low = loadWord(packed, k.add('u32', u(), superAt, i), valid);
        // High word 32 + i / 2 holds the pairs of nibble words i and i + 1; the odd word's 4 bits up.
        const sub = k.shr('u32', u(), i, 1);
        const high = loadWord(
          packed,
          k.add('u32', u(), superAt, k.add('u32', u(), sub, Q6K_HIGH_WORDS_AT)),
          valid,
        );
        const codes = q6kCodes(
          k,
          low,
          k.shr('b32', u(), high, k.shl('b32', u(), k.and('b32', u(), i, 1), 2)),
        );
        // Sub-block j = i / 2: byte j mod 4 of zeros word 4g + j / 4.
        const scAt = k.madLo(
          'u32',
          u(),
          id,
          zeroWords,
          k.madLo('u32', u(), g, Q6K_SCALE_WORDS, k.shr('u32', u(), sub, 2)),
        );
        const sc = int8At(k, loadWord(zeros, scAt, valid), k.shl('b32', u(), k.and('b32', u(), sub, 3), 3));
        const scale = q6kScale(k, loadScale(scales, k.madLo('u32', u(), id, groups, g), valid), sc);
        return codes.map((code) => k.mul('f32', code, scale, code, { rnd: 'rn' }));
      }

      /** The word's values at `at` in y's storage: 16-byte stores of f32s, halves paired into words. */
      function storeWord(values: readonly F32[], at: R64): void {
        if (out === 'f32') {
          for (let first = 0; first < values.length; first += 4) {
            const part = values.slice(first, first + 4);
            k.stGlobal('f32', first === 0 ? at : addr(at, 4 * first), asVector(part));
          }
          return;
        }
        const pairs = Array.from({ length: values.length / 2 }, (_, j) => {
          const [lo, hi] = [values[2 * j]!, values[2 * j + 1]!];
          if (out === 'bf16') return cvt ? k.cvtPack('bf16', u(), lo, hi) : bf16Pair(lo, hi);
          return k.packHalves(u(), toHalfBits(k, out, lo), toHalfBits(k, out, hi));
        });
        k.stGlobal('b32', at, asVector(pairs));
      }

      /**
       * Two f32s as one word of bf16s, `lo` in the lower half: storage.ts's
       * roundToBf16 bits (nearest even; a NaN as its sign and 0x7fc0), each
       * formed in the upper half of a word and the two joined by one prmt,
       * about half the instructions of rounding each down to 16 bits and
       * packing them: bf16 y is what the prefill's weights are
       * dequantized into, and its by-hand rounding (sm_75 has no cvt to
       * bf16) is most of a word's arithmetic: on sm_80 and later one
       * `cvt.rn.bf16x2.f32` a pair does it (`cvtBf16`).
       */
      function bf16Pair(lo: F32, hi: F32): R32 {
        const [a, b] = [lo, hi].map((value) => {
          const bits = k.mov('b32', u(), value);
          const lsb = k.and('b32', u(), k.shr('b32', u(), bits, 16), 1);
          const rounded = k.add('u32', u(), k.add('u32', u(), bits, 0x7fff), lsb);
          const quiet = k.or('b32', u(), k.and('b32', u(), bits, 0x80000000), 0x7fc00000);
          const nan = k.setp('nan', 'f32', k.reg('pred'), value, value);
          return k.selp('b32', u(), quiet, rounded, nan);
        }) as [R32, R32];
        // Bytes 2, 3 of a, then bytes 2, 3 of b.
        return k.prmt(u(), a, b, 0x7632);
      }
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}
