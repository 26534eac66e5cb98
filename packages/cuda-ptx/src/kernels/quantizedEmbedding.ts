import { FLOAT, Q5K_SUPER_WORDS, quantizedEmbedding, quantLayout } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Pred, R32 } from '../ptx/operands.js';
import { BLOCK, checkElementCount, gridFor } from './common.js';
import { loadAllParams } from './entryParams.js';
import { isQ5g32 } from './quantizedCodes.js';
import type { QuantEmbeddingVariant } from './quantizedEmbeddingVariant.js';
import { EMBEDDING_TABLE_PARAMS, quantEmbeddingKey } from './quantizedEmbeddingVariant.js';
import {
  embeddingWordsApply,
  QUANT_EMBEDDING_WORDS_ENTRY,
  quantEmbeddingWordsModule,
} from './quantizedEmbeddingWords.js';
import { q5HighBit, q5kWordsOf } from './quantizedQ5k.js';
import { q6kElement } from './quantizedQ6k.js';
import { subBlockScaleOffset } from './quantizedSubBlocks.js';
import { loadAsF32, STORAGE_BYTES, storageOf, storesOf } from './storage.js';

// quantizedEmbedding: y[r, :] = dequant(table)[ids[r], :] for a table in one
// of core's quantized formats (quant/layout.ts has the bits). A gather reads
// one row per id, so a thread per output element is enough: it reads its
// code's u32 word, its group's scale (and zero point or offset), and writes
// the value the format defines, f32(f32((q − zero) · scale) − offset),
// rounded where ggml rounds (mul.rn then sub.rn; q4k's scale and offset
// are themselves f32(d · sc) and f32(dmin · m), q5k's as q4k's with a high
// bit ORed into the nibble, q5g32's and q5g32a's as q4g32's and q4g32a's
// likewise; q6k's f32(f32(d · sc) ·
// (q − 32)), see quantizedQ6k.ts): the reference's bits. An
// id outside [0, V) (compared as unsigned) reads nothing and writes NaN.
// Rows of whole u32 words of codes (every row of a dequantized weight) take
// quantizedEmbeddingWords.ts's thread per word instead, with the same bits.

export const QUANT_EMBEDDING_ENTRY = 'quantized_embedding';

export { type QuantEmbeddingVariant, quantEmbeddingKey } from './quantizedEmbeddingVariant.js';

export function quantEmbeddingModule(v: QuantEmbeddingVariant): PtxModule {
  if (v.words) return quantEmbeddingWordsModule(v);
  const layout = quantLayout(v.format, 1);
  const scaleBytes = STORAGE_BYTES[v.scale];
  const m = new PtxModule();
  m.entry(
    QUANT_EMBEDDING_ENTRY,
    { ...EMBEDDING_TABLE_PARAMS, total: 'u32', dim: 'u32' },
    (k, p) => {
      const { ids, packed, scales, zeros, offsets, y, total, dim, vocab, rowWords, groups, zeroWords } =
        loadAllParams(k, p);
      k.gridStrideLoop(total, (e) => {
        const row = k.div('u32', k.reg('u32'), e, dim);
        const col = k.sub('u32', k.reg('u32'), e, k.mulLo('u32', k.reg('u32'), row, dim));
        const id = k.ldGlobal('u32', k.reg('u32'), k.elementAddress(ids, row, 4), { nc: true });
        const valid = k.setp('lo', 'u32', k.reg('pred'), id, vocab);
        const value =
          layout.bits === 6
            ? q6kElement(
                k,
                v.scale,
                { packed, scales, zeros },
                { id, col, rowWords, groups, zeroWords },
                valid,
              )
            : element(id, col, valid);
        const out = k.selp('f32', k.reg('f32'), value, Number.NaN, valid);
        const store = v.out ?? 'f32';
        storesOf(k, store, [out])(k.elementAddress(y, e, STORAGE_BYTES[store]));
      });
      /** The value of element `col` of row `id` in the formats of whole 16-byte words of codes. */
      function element(id: R32, col: R32, valid: Pred): F32 {
        const word = k.mov('b32', k.reg('u32'), 0);
        if (v.format === 'q5k') return q5kElement(id, col, valid, word);
        const at = k.madLo(
          'u32',
          k.reg('u32'),
          id,
          rowWords,
          k.shr('u32', k.reg('u32'), col, Math.log2(layout.perWord)),
        );
        k.predicated(valid, () => k.ldGlobal('u32', word, k.elementAddress(packed, at, 4), { nc: true }));
        const shift = k.mulLo(
          'u32',
          k.reg('u32'),
          k.and('b32', k.reg('u32'), col, layout.perWord - 1),
          layout.bits === 5 ? 4 : layout.bits, // q5g32: its nibbles
        );
        let code = k.reg('f32');
        if (layout.bits === 8) {
          // The byte moved to the top of the word, then shifted back with its sign.
          const up = k.shl('b32', k.reg('u32'), word, k.sub('u32', k.reg('u32'), 24, shift));
          const signed = k.shr('s32', k.reg('s32'), up, 24);
          k.cvt('f32', 's32', code, signed, { rnd: 'rn' });
        } else {
          const nibble = k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), word, shift), 0xf);
          if (isQ5g32(layout)) k.or('b32', nibble, nibble, q5g32HighBit(id, col, valid));
          k.cvt('f32', 'u32', code, nibble, { rnd: 'rn' });
        }
        const g = layout.scalePerRow
          ? k.mov('u32', k.reg('u32'), 0)
          : k.shr('u32', k.reg('u32'), col, Math.log2(layout.groupSize));
        const groupAt = k.madLo('u32', k.reg('u32'), id, groups, g);
        if (v.zeros) {
          const zw = k.mov('b32', k.reg('u32'), 0);
          const zAt = k.madLo('u32', k.reg('u32'), id, zeroWords, k.shr('u32', k.reg('u32'), g, 3));
          k.predicated(valid, () => k.ldGlobal('u32', zw, k.elementAddress(zeros, zAt, 4), { nc: true }));
          const zShift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), g, 7), 2);
          const zero = k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), zw, zShift), 0xf);
          const zf = k.cvt('f32', 'u32', k.reg('f32'), zero, { rnd: 'rn' });
          code = k.sub('f32', k.reg('f32'), code, zf, { rnd: 'rn' });
        } else if (layout.offset !== 0) {
          code = k.sub('f32', k.reg('f32'), code, layout.offset, { rnd: 'rn' });
        }
        let value: F32;
        if (layout.subBlockScales) value = subBlockValue(id, col, g, groupAt, code, valid);
        else {
          const s = k.reg('f32');
          loadAsF32(k, v.scale, [s], k.elementAddress(scales, groupAt, scaleBytes), { ok: valid });
          value = k.mul('f32', k.reg('f32'), code, s, { rnd: 'rn' });
          if (layout.offsets) {
            const o = k.reg('f32');
            loadAsF32(k, v.scale, [o], k.elementAddress(offsets, groupAt, scaleBytes), { ok: valid });
            k.sub('f32', value, value, o, { rnd: 'rn' });
          }
        }
        return value;
      }
      /** q5g32's and q5g32a's high bit of element `col`, as 16 or 0: from word 4G + col / 32 of the row. */
      function q5g32HighBit(id: R32, col: R32, valid: Pred): R32 {
        const u = () => k.reg('u32');
        const high = k.mov('b32', u(), 0);
        const at = k.add(
          'u32',
          u(),
          k.madLo('u32', u(), id, rowWords, k.shl('b32', u(), groups, 2)),
          k.shr('u32', u(), col, 5),
        );
        k.predicated(valid, () => k.ldGlobal('u32', high, k.elementAddress(packed, at, 4), { nc: true }));
        const bit = k.and('b32', u(), k.shr('b32', u(), high, q5HighBit(k, col)), 1);
        return k.shl('b32', u(), bit, 4);
      }
      /** q4k's and q5k's f32(f32(q · f32(d · sc)) − f32(dmin · m)): sub-block (col / 32) mod 8 of super-block g. */
      function subBlockValue(id: R32, col: R32, g: R32, groupAt: R32, code: F32, valid: Pred): F32 {
        const words = k.madLo('u32', k.reg('u32'), id, zeroWords, k.mulLo('u32', k.reg('u32'), g, 3));
        const sub = k.and('b32', k.reg('u32'), k.shr('u32', k.reg('u32'), col, 5), 7);
        const at = { scale: groupAt, words, sub };
        const q4k = subBlockScaleOffset(k, v.scale, { scales, offsets, zeros }, at, valid);
        const value = k.mul('f32', k.reg('f32'), code, q4k.scale, { rnd: 'rn' });
        return k.sub('f32', value, value, q4k.offset, { rnd: 'rn' });
      }
      /** q5k: the nibble of weight i = col mod 256 of super-block g with its high bit (see quantizedQ5k.ts). */
      function q5kElement(id: R32, col: R32, valid: Pred, low: R32): F32 {
        const u = () => k.reg('u32');
        const g = k.shr('u32', u(), col, 8);
        const i = k.and('b32', u(), col, 255);
        const superAt = k.madLo('u32', u(), g, Q5K_SUPER_WORDS, k.mulLo('u32', u(), id, rowWords));
        const at = q5kWordsOf(k, superAt, i);
        const high = k.mov('b32', u(), 0);
        k.predicated(valid, () => {
          k.ldGlobal('u32', low, k.elementAddress(packed, at.low, 4), { nc: true });
          k.ldGlobal('u32', high, k.elementAddress(packed, at.high, 4), { nc: true });
        });
        const nibble = k.and(
          'b32',
          u(),
          k.shr('b32', u(), low, k.shl('b32', u(), k.and('b32', u(), i, 7), 2)),
          0xf,
        );
        const bit = k.and('b32', u(), k.shr('b32', u(), high, at.bit), 1);
        const q = k.or('b32', u(), nibble, k.shl('b32', u(), bit, 4));
        const code = k.cvt('f32', 'u32', k.reg('f32'), q, { rnd: 'rn' });
        return subBlockValue(id, col, g, k.madLo('u32', u(), id, groups, g), code, valid);
      }
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

export const QUANTIZED_EMBEDDING_KERNELS: readonly AnyCudaKernel[] = [
  cudaKernel(
    quantizedEmbedding,
    (encoder, { inputs, outputs, attrs }) => {
      const [ids, packed, scales, zeros, offsets] = inputs;
      const y = outputs[0]!;
      if (y.size === 0) return;
      checkElementCount(quantizedEmbedding.name, 'y', y.size);
      const layout = quantLayout(attrs.format, attrs.dim);
      const out = storageOf(y);
      const words = embeddingWordsApply(attrs.format, attrs.dim, STORAGE_BYTES[out], y.ptr);
      const variant: QuantEmbeddingVariant = {
        format: attrs.format,
        zeros: zeros !== undefined && layout.zeroPoints,
        scale: storageOf(scales!),
        out,
        words,
        // sm_80 converts f32 pairs to bf16 in one instruction.
        ...(words && out === 'bf16' && encoder.device.computeCapability[0] >= 8 ? { cvtBf16: true } : {}),
      };
      const common = {
        ids: ids!,
        packed: packed!,
        scales: scales!,
        // Unused without them; any valid address.
        zeros: zeros ?? packed!,
        offsets: offsets ?? scales!,
        y,
        vocab: packed!.shape[0]!,
        rowWords: layout.rowWords,
        groups: layout.groups,
        zeroWords: layout.zeroWords,
      };
      // A thread per word of codes where the rows are whole words, else one per element.
      const items = words ? y.size / layout.perWord : y.size;
      encoder.launch({
        key: quantEmbeddingKey(variant),
        module: () => quantEmbeddingModule(variant),
        entry: words ? QUANT_EMBEDDING_WORDS_ENTRY : QUANT_EMBEDDING_ENTRY,
        grid: gridFor(encoder.device, items),
        block: BLOCK,
        args: words
          ? { ...common, words: items, yRowWords: attrs.dim / layout.perWord }
          : { ...common, total: items, dim: attrs.dim },
      });
    },
    // The scales (and offsets) in f32, f16 or bf16; y in `to`'s dtype.
    { dtypes: FLOAT },
  ),
];
