import { codeRange, FLOAT, type QuantFormat, quantizeRows, quantLayout, reciprocalOf } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Pred, R32, R64 } from '../ptx/operands.js';
import { BLOCK, checkElementCount, gridFor } from './common.js';
import { loadAllParams } from './entryParams.js';
import { asStored, nearestQuotient, positiveZero } from './quantizeArithmetic.js';
import {
  QUANTIZE_SUPER_BLOCKS_ENTRY,
  type QuantizeSuperBlocksVariant,
  quantizeSuperBlocksKey,
  quantizeSuperBlocksModule,
} from './quantizeSuperBlocks.js';
import {
  type FloatStorage,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// quantizeRows: a dense weight [N, K] to one of core's quantized layouts
// (quant/layout.ts), bit for bit as the host quantizer (quant/rounding.ts):
// a thread per group (per 8 groups with zero points, whose nibbles share a
// word, so that no two threads write one word). It reads its group twice:
// once for the range, once to write the codes word by word. Scales are
// range · f32(1 / levels) rounded to their storage; a code is the integer
// nearest to t / scale, ties up (quantizeArithmetic.ts); q5g32's and
// q5g32a's thread writes its group's high word too. q4k, q5k and q6k have a
// module of their own (quantizeSuperBlocks.ts). A group with a weight that
// is not finite writes a NaN scale (and offset), codes 0 and zero point 0.

export const QUANTIZE_ROWS_ENTRY = 'quantize_rows';

export interface QuantizeRowsVariant {
  readonly format: QuantFormat;
  readonly zeros: boolean;
  readonly weight: FloatStorage;
  readonly scale: FloatStorage;
}

export function quantizeRowsKey(v: QuantizeRowsVariant): string {
  return `quantizeRows/${v.format}${v.zeros ? '/zeros' : ''}${storageKey([v.weight, v.scale])}`;
}

export function quantizeRowsModule(v: QuantizeRowsVariant): PtxModule {
  const layout = quantLayout(v.format, 1);
  const bytes = STORAGE_BYTES[v.weight];
  const scaleBytes = STORAGE_BYTES[v.scale];
  const perThread = v.zeros ? 8 : 1;
  const offsets = layout.offsets;
  const { lowest, levels } = codeRange(layout);
  const m = new PtxModule();
  m.entry(
    QUANTIZE_ROWS_ENTRY,
    {
      w: 'ptr',
      packed: 'ptr',
      scales: 'ptr',
      extra: 'ptr',
      total: 'u32',
      k: 'u32',
      units: 'u32',
      groups: 'u32',
      groupSize: 'u32',
      rowWords: 'u32',
      zeroWords: 'u32',
    },
    (k, p) => {
      const {
        w,
        packed,
        scales,
        extra,
        total,
        k: kd,
        units,
        groups,
        groupSize,
        rowWords,
        zeroWords,
      } = loadAllParams(k, p);
      k.gridStrideLoop(total, (t) => {
        const row = k.div('u32', k.reg('u32'), t, units);
        const unit = k.sub('u32', k.reg('u32'), t, k.mulLo('u32', k.reg('u32'), row, units));
        const rowStart = k.mulLo('u32', k.reg('u32'), row, kd);
        const firstGroup = k.mulLo('u32', k.reg('u32'), unit, perThread);
        const lastGroup = k.min(
          'u32',
          k.reg('u32'),
          groups,
          k.add('u32', k.reg('u32'), firstGroup, perThread),
        );
        const zeroWord = k.mov('b32', k.reg('u32'), 0);
        const g = k.reg('u32');
        k.forRange(g, firstGroup, lastGroup, 1, () => {
          const first = k.mulLo('u32', k.reg('u32'), g, groupSize);
          const end = k.add('u32', k.reg('u32'), first, groupSize);
          const last = k.min('u32', k.reg('u32'), kd, end);
          const lo = k.mov('f32', k.reg('f32'), 0);
          const hi = k.mov('f32', k.reg('f32'), 0);
          const amax = k.mov('f32', k.reg('f32'), 0);
          const min = k.mov('f32', k.reg('f32'), Number.POSITIVE_INFINITY);
          const max = k.mov('f32', k.reg('f32'), Number.NEGATIVE_INFINITY);
          const bad = k.mov('b32', k.reg('u32'), 0);
          const c = k.reg('u32');
          k.forRange(c, first, last, 1, () => {
            const at = k.elementAddress(w, k.add('u32', k.reg('u32'), rowStart, c), bytes);
            const x = loadOneAsF32(k, v.weight, at);
            const exponent = k.and('b32', k.reg('u32'), k.mov('b32', k.reg('u32'), x), 0x7f800000);
            const nonFinite = k.setp('eq', 'u32', k.reg('pred'), exponent, 0x7f800000);
            k.selp('b32', bad, 1, bad, nonFinite);
            if (offsets) {
              k.min('f32', min, min, x);
              k.max('f32', max, max, x);
            } else if (v.zeros) {
              k.min('f32', lo, lo, x);
              k.max('f32', hi, hi, x);
            } else {
              k.max('f32', amax, amax, k.abs('f32', k.reg('f32'), x));
            }
          });
          let scale: F32;
          let zero: R32 | number = layout.bits === 8 || offsets ? 0 : layout.offset;
          let offset: F32 | undefined;
          const stepOf = (range: F32, n: number) =>
            asStored(k, v.scale, k.mul('f32', k.reg('f32'), range, reciprocalOf(n), { rnd: 'rn' }));
          const positive = () => k.setp('gt', 'f32', k.reg('pred'), scale, 0);
          if (offsets) {
            const low = positiveZero(k, min);
            const range = k.sub('f32', k.reg('f32'), positiveZero(k, max), low, { rnd: 'rn' });
            scale = stepOf(range, levels);
            const scaled = k.mul('f32', k.reg('f32'), scale, lowest, { rnd: 'rn' });
            offset = asStored(k, v.scale, k.sub('f32', k.reg('f32'), scaled, low, { rnd: 'rn' }));
          } else if (v.zeros) {
            const low = positiveZero(k, lo);
            const range = k.sub('f32', k.reg('f32'), positiveZero(k, hi), low, { rnd: 'rn' });
            scale = stepOf(range, 15);
            const q = nearestQuotient(k, k.neg('f32', k.reg('f32'), low), scale);
            const clamped = k.min('s32', k.reg('s32'), q, 15);
            zero = k.selp('s32', k.reg('s32'), clamped, 0, positive());
          } else {
            // Symmetric around 8 (q4) or 16 (q5g32): a step of max|w| / 7 or / 15.
            scale = stepOf(amax, layout.bits === 8 ? 127 : layout.offset - 1);
          }
          const ok = k.setp('eq', 'u32', k.reg('pred'), bad, 0);
          const groupAt = k.madLo('u32', k.reg('u32'), row, groups, g);
          const scaleOut = k.selp('f32', k.reg('f32'), scale, Number.NaN, ok);
          storeFromF32(k, v.scale, k.elementAddress(scales, groupAt, scaleBytes), scaleOut);
          if (offset) {
            const offsetOut = k.selp('f32', k.reg('f32'), offset, Number.NaN, ok);
            storeFromF32(k, v.scale, k.elementAddress(extra, groupAt, scaleBytes), offsetOut);
          }
          if (v.zeros) {
            const nibble = k.selp('b32', k.reg('u32'), zero, 0, ok);
            const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), g, 7), 2);
            k.or('b32', zeroWord, zeroWord, k.shl('b32', k.reg('u32'), nibble, shift));
          }
          writeCodes(k, {
            // No format quantized here has 6 bits; q5g32's and q5g32a's high words follow the row's nibbles.
            layout: { bits: layout.bits === 8 ? 8 : layout.bits === 5 ? 5 : 4, perWord: layout.perWord },
            highAt:
              layout.bits === 5
                ? k.add(
                    'u32',
                    k.reg('u32'),
                    k.madLo('u32', k.reg('u32'), row, rowWords, g),
                    k.shl('b32', k.reg('u32'), groups, 2),
                  )
                : undefined,
            weight: v.weight,
            w,
            packed,
            rowStart,
            rowOut: k.mulLo('u32', k.reg('u32'), row, rowWords),
            first,
            end: k.min('u32', k.reg('u32'), end, k.mulLo('u32', k.reg('u32'), rowWords, layout.perWord)),
            last,
            scale,
            zero,
            offset,
            range: [lowest, lowest + levels],
            ok: k.and('pred', k.reg('pred'), ok, positive()),
            okOnly: ok,
          });
        });
        if (layout.bits === 5) {
          // q5g32, q5g32a: the last group's thread zeroes the row's padding high words (after 5G words).
          const lastUnit = k.setp('eq', 'u32', k.reg('pred'), unit, k.sub('u32', k.reg('u32'), units, 1));
          k.ifThen(lastUnit, () => {
            const word = k.reg('u32');
            const rowOut = k.mulLo('u32', k.reg('u32'), row, rowWords);
            k.forRange(word, k.mulLo('u32', k.reg('u32'), groups, 5), rowWords, 1, () => {
              k.stGlobal('b32', k.elementAddress(packed, k.add('u32', k.reg('u32'), rowOut, word), 4), 0);
            });
          });
        }
        if (v.zeros) {
          const zAt = k.madLo('u32', k.reg('u32'), row, zeroWords, unit);
          k.stGlobal('b32', k.elementAddress(extra, zAt, 4), zeroWord);
        }
        if (layout.groupSize === 16) {
          // q8g16: where K mod 32 is 1 to 16 the row ends in a padding half-block no group covers.
          const lastUnit = k.setp('eq', 'u32', k.reg('pred'), unit, k.sub('u32', k.reg('u32'), units, 1));
          k.ifThen(lastUnit, () => {
            const word = k.reg('u32');
            const from = k.shr('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), groups, 16), 2);
            const rowOut = k.mulLo('u32', k.reg('u32'), row, rowWords);
            k.forRange(word, from, rowWords, 1, () => {
              k.stGlobal('b32', k.elementAddress(packed, k.add('u32', k.reg('u32'), rowOut, word), 4), 0);
            });
          });
        }
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

interface CodeWriter {
  readonly layout: { readonly bits: 8 | 5 | 4; readonly perWord: 4 | 8 };
  /** 5 bits: the group's high word in `packed` (the codes' nibbles go where q4's do). */
  readonly highAt?: R32;
  readonly weight: FloatStorage;
  readonly w: R64;
  readonly packed: R64;
  readonly rowStart: R32;
  readonly rowOut: R32;
  readonly first: R32;
  readonly end: R32;
  readonly last: R32;
  readonly scale: F32;
  readonly zero: R32 | number;
  readonly offset: F32 | undefined;
  readonly range: readonly [number, number];
  /** The group is finite and its scale positive: codes from the quotient. */
  readonly ok: Pred;
  /** The group is finite: else every code is 0. */
  readonly okOnly: Pred;
}

/** Writes the group's words [first, end) / perWord: each code from its weight (0 past `last`). */
function writeCodes(k: KernelBuilder, c: CodeWriter): void {
  const { bits, perWord } = c.layout;
  const bytes = STORAGE_BYTES[c.weight];
  const [qMin, qMax] = c.range;
  // Without a positive scale every code is the zero point (the lowest code with offsets).
  const fallback = c.offset ? qMin : c.zero;
  const word = k.reg('u32');
  const firstWord = k.shr('u32', k.reg('u32'), c.first, Math.log2(perWord));
  const endWord = k.shr('u32', k.reg('u32'), c.end, Math.log2(perWord));
  const high = c.highAt ? k.mov('b32', k.reg('u32'), 0) : undefined;
  k.forRange(word, firstWord, endWord, 1, () => {
    const bitsOut = k.mov('b32', k.reg('u32'), 0);
    // 5 bits: code j of the group's nibble word w has its high bit at 8 · (j / 2) + 2w + j mod 2 (q5kHighBit).
    const wordShift = high
      ? k.shl('b32', k.reg('u32'), k.sub('u32', k.reg('u32'), word, firstWord), 1)
      : undefined;
    for (let j = 0; j < perWord; j++) {
      const col = k.madLo('u32', k.reg('u32'), word, perWord, j);
      const inside = k.setp('lt', 'u32', k.reg('pred'), col, c.last);
      const at = k.elementAddress(c.w, k.add('u32', k.reg('u32'), c.rowStart, col), bytes);
      const x = loadOneAsF32(k, c.weight, at, inside);
      const t = c.offset ? k.add('f32', k.reg('f32'), x, c.offset, { rnd: 'rn' }) : x;
      let q = nearestQuotient(k, t, c.scale);
      if (c.zero !== 0) q = k.add('s32', k.reg('s32'), q, c.zero);
      q = k.selp('s32', k.reg('s32'), q, fallback, c.ok);
      const clamped = k.max('s32', k.reg('s32'), k.min('s32', k.reg('s32'), q, qMax), qMin);
      const code = k.and('b32', k.reg('u32'), clamped, bits === 8 ? 0xff : 0xf);
      if (high && wordShift) {
        const shift = k.add('u32', k.reg('u32'), wordShift, 8 * (j >> 1) + (j & 1));
        k.or('b32', high, high, k.shl('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), clamped, 4), shift));
      }
      k.or('b32', bitsOut, bitsOut, k.shl('b32', k.reg('u32'), code, (bits === 5 ? 4 : bits) * j));
    }
    const out = k.selp('b32', k.reg('u32'), bitsOut, 0, c.okOnly);
    k.stGlobal('b32', k.elementAddress(c.packed, k.add('u32', k.reg('u32'), c.rowOut, word), 4), out);
  });
  if (high && c.highAt) {
    k.stGlobal(
      'b32',
      k.elementAddress(c.packed, c.highAt, 4),
      k.selp('b32', k.reg('u32'), high, 0, c.okOnly),
    );
  }
}

export const QUANTIZE_ROWS_KERNELS: readonly AnyCudaKernel[] = [
  cudaKernel(
    quantizeRows,
    (encoder, { inputs, outputs, attrs }) => {
      const w = inputs[0]!;
      const [packed, scales, extra] = outputs;
      const [n, kd] = w.shape as [number, number];
      checkElementCount(quantizeRows.name, 'w', w.size);
      const layout = quantLayout(attrs.format, kd);
      if (attrs.format === 'q4k' || attrs.format === 'q5k' || attrs.format === 'q6k') {
        const variant: QuantizeSuperBlocksVariant = {
          format: attrs.format,
          weight: storageOf(w),
          scale: storageOf(scales!),
        };
        encoder.launch({
          key: quantizeSuperBlocksKey(variant),
          module: () => quantizeSuperBlocksModule(variant),
          entry: QUANTIZE_SUPER_BLOCKS_ENTRY,
          grid: gridFor(encoder.device, n * layout.groups),
          block: BLOCK,
          args: {
            w,
            packed: packed!,
            scales: scales!,
            zeros: extra!,
            // q6k has no offsets (any valid address).
            offsets: outputs[3] ?? scales!,
            total: n * layout.groups,
            k: kd,
            units: layout.groups,
          },
        });
        return;
      }
      const units = attrs.zeroPoints ? layout.zeroWords : layout.groups;
      const variant: QuantizeRowsVariant = {
        format: attrs.format,
        zeros: attrs.zeroPoints,
        weight: storageOf(w),
        scale: storageOf(scales!),
      };
      encoder.launch({
        key: quantizeRowsKey(variant),
        module: () => quantizeRowsModule(variant),
        entry: QUANTIZE_ROWS_ENTRY,
        grid: gridFor(encoder.device, n * units),
        block: BLOCK,
        args: {
          w,
          packed: packed!,
          scales: scales!,
          // Zero points or offsets; unused without them (any valid address).
          extra: extra ?? scales!,
          total: n * units,
          k: kd,
          units,
          groups: layout.groups,
          groupSize: layout.groupSize,
          rowWords: layout.rowWords,
          zeroWords: layout.zeroWords,
        },
      });
    },
    { dtypes: FLOAT },
  ),
];
