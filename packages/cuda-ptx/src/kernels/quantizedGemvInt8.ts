import {
  InvalidArgumentError,
  QGEMV_SHAPES,
  type QgemvShapeVariant,
  type QuantActivations,
  type QuantFormat,
  qgemvSlicesFor,
  quantLayout,
  takesInt8Activations,
} from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { type ParamHandles, PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type Pred, type R16, type R32, type R64 } from '../ptx/operands.js';
import { loadParams } from './entryParams.js';
import { below } from './gemv.js';
import {
  gemvLaneAt,
  QGEMV_PARAMS,
  type QgemvWeight,
  qgemvArgs,
  qgemvWeightParams,
  storeGemvOutput,
  storeGemvSums,
} from './quantizedGemv.js';
import { type Int8X, int8X, qgemvInt8SharedBytes } from './quantizedGemvInt8X.js';
import { bytePlanes, int8At, Q5K_PLANE, Q6K_PLANE } from './quantizedQ6k.js';
import { subBlockOf, subBlockShifts } from './quantizedSubBlocks.js';
import { type FloatStorage, STORAGE_BYTES, storageKey, storageOf } from './storage.js';

// The small-M quantized GEMV on integer dot products, the cuda backend's
// `qgemvActivations: 'int8'` (a precision choice; llama.cpp's CUDA GEMVs
// make the same one). Decoding a code to an exact f32 and multiplying costs
// 3–7 instructions a weight, which keeps the exact GEMV (quantizedGemv.ts)
// issue-bound at a third of the bandwidth for 4-bit codes. Here:
// - each block first quantizes the rows of x it needs to int8 in shared
//   memory, per block of 32 elements: d = max|x| / 127 and q = round(x / d),
//   with, per block, d and either −8·Σq (codes centred on 8) or d·Σq
//   (formats with offsets). 4-bit blocks keep the even elements of each 8
//   in one word and the odd ones in the next, as a code word's low and high
//   nibbles lie;
// - lane l of a warp reads 16 bytes of codes (32 nibbles or 16 bytes) of a
//   512-byte run of each of its C rows of W, one load each, the next step's
//   loads issued before this step's arithmetic;
// - a word of nibbles is two dp4a (masked low nibbles, shifted high ones)
//   against the x words, a word of bytes one: 8 weights in 5 instructions;
// - the chunk's integer sum becomes f32 once and takes the group scale
//   times d (and less offset · d·Σq);
// - where N is wide enough, blocks are persistent: as many as the SMs hold,
//   each quantizing x once and taking units of columns until none are left
//   (qgemvInt8Module says how).
// y is the product of W and x̃ = q·d, x's int8 blocks, up to f32 rounding,
// so it differs from the exact product by at most Σ over x blocks of
// d/2 · Σ|w| of the block's weights.

export const QGEMV_INT8_ENTRY = 'quantized_gemv_int8';
const WARPS = 8;
const THREADS = WARPS * 32;

/** The formats it reads: 4- or 8-bit codes whose groups (or sub-blocks) hold whole 32-element blocks of x. */
export const QGEMV_INT8_FORMATS = [
  'q8',
  'q4g32',
  'q4g128',
  'q8g32',
  'q4g32a',
  'q8g32a',
  'q4k',
  'q5k',
  'q6k',
  'q5g32',
  'q5g32a',
] as const satisfies readonly QuantFormat[];

export function qgemvInt8Reads(format: QuantFormat): boolean {
  return (QGEMV_INT8_FORMATS as readonly string[]).includes(format);
}

export interface QgemvInt8Config {
  readonly format: QuantFormat;
  /** Two weights of one shape: y = silu(x·Wgᵀ) ⊙ (x·Wuᵀ); never with `withC`. */
  readonly pair: boolean;
  /** Adds beta · c. */
  readonly withC: boolean;
  /** Storage of x, c and y, and of the scales. */
  readonly types: { readonly act: FloatStorage; readonly scale: FloatStorage };
  /** Rows of x per block, 1 to 4. */
  readonly rows: number;
  /**
   * x copied into shared memory first (cp.async, 16 bytes a copy, all in
   * flight at once) and quantized from there: K a multiple of 32, x 16-byte
   * aligned and room for the copy; else read element by element.
   */
  readonly stagedX: boolean;
  /** Columns of y per warp. */
  readonly cols: number;
  /** Warps of a block that split K for the same columns: 1, 2, 4 or 8 (1 when persistent). */
  readonly slices: 1 | 2 | 4 | 8;
  /** Blocks stay and take units of columns until none are left (see qgemvInt8Module). */
  readonly persistent: boolean;
  /**
   * Persistent: the blocks each SM holds at once (the grid is that many per
   * SM); blocked: the blocks each SM should hold (registers capped to fit
   * them), or 0 for no cap.
   */
  readonly blocksPerSm: number;
  /**
   * Sets of registers the loop keeps codes in: 1, the next step's loaded
   * into fresh ones and moved into the current step's; D ≥ 2, a ring whose
   * other D − 1 sets are on their way while one is used (no moves).
   */
  readonly depth: 1 | 2 | 3;
  /**
   * Each warp brings its columns' rows of W into L2 before it waits for the
   * kernel before it (dependent launch), then loads them as usual: with an
   * early trigger there, the weights stream in while that kernel runs.
   */
  readonly prefetch: boolean;
  /**
   * The first steps' codes are loaded before the dependency wait (as with
   * `prefetch`, without the L2 prefetches): they come in while the kernel
   * before it finishes. Only for weights no kernel still in flight writes.
   */
  readonly earlyLoads: boolean;
  /**
   * Persistent: the next kernel may launch as soon as all blocks have
   * started (`griddepcontrol.launch_dependents` first), so that its early
   * loads overlap this one's tail. Every block is resident at once, so the
   * next kernel's blocks never hold back one of this kernel's.
   */
  readonly triggerDependents: boolean;
  /** An rmsNorm folded in: x · normWeight quantized, each row's sums scaled by its inverse RMS. */
  readonly norm: boolean;
}

/** The GEMVs' parameters, and the folded norm's weight and eps (unused without it). */
const INT8_PARAMS = { ...QGEMV_PARAMS, normWeight: 'ptr', eps: 'f32' } as const;

export function qgemvInt8Key(v: QgemvInt8Config): string {
  const what = `${v.pair ? 'gateup/' : ''}${v.format}${v.withC ? '/c' : ''}${v.norm ? '/norm' : ''}`;
  const mode = v.persistent
    ? `p${v.blocksPerSm}`
    : `s${v.slices}${v.blocksPerSm > 0 ? `b${v.blocksPerSm}` : ''}`;
  const shape = `m${v.rows}/c${v.cols}${mode}${v.depth > 1 ? `d${v.depth}` : ''}${v.prefetch ? 'pf' : v.earlyLoads ? 'el' : ''}${v.triggerDependents ? 't' : ''}/${v.stagedX ? 'staged' : 'scalar'}`;
  return `quantized/gemv-int8/${shape}/${what}${storageKey([v.types.act, v.types.scale])}`;
}

function check(v: QgemvInt8Config): void {
  const fail = (argument: string, expected: string, actual: string) => {
    throw new InvalidArgumentError('the int8 quantized GEMV cannot take this configuration', {
      operation: 'quantizedMatmul',
      argument,
      expected,
      actual,
    });
  };
  if (!qgemvInt8Reads(v.format)) fail('format', `one of ${QGEMV_INT8_FORMATS.join(', ')}`, v.format);
  if (!Number.isInteger(v.rows) || v.rows < 1 || v.rows > 4)
    fail('rows', 'an integer from 1 to 4', String(v.rows));
  if (![1, 2, 4, 8].includes(v.slices)) fail('slices', '1, 2, 4 or 8', String(v.slices));
  if (!Number.isInteger(v.cols) || v.cols < 1 || v.cols * v.rows * (v.pair ? 2 : 1) > 32)
    fail('cols', 'weights · columns · rows of at most 32 (one lane stores each)', String(v.cols));
  if (v.pair && v.withC) fail('c', 'no c with the gate·up pair', 'c');
  if (v.persistent && v.slices !== 1) fail('slices', '1 when persistent', String(v.slices));
  if (v.triggerDependents && !v.persistent)
    fail('triggerDependents', 'only persistent blocks (all resident at once)', 'blocked');
  const sums = v.cols * v.rows * (v.pair ? 2 : 1);
  const deepest = deepestFor(sums, v.blocksPerSm);
  if (![1, 2, 3].includes(v.depth) || v.depth > deepest)
    fail(
      'depth',
      `1 to ${deepest} for ${sums} sums a lane (weights · columns · rows) at ${v.blocksPerSm} blocks an SM`,
      String(v.depth),
    );
  if (v.persistent && ![1, 2, 3, 4].includes(v.blocksPerSm))
    fail('blocksPerSm', '1 to 4 when persistent', String(v.blocksPerSm));
  if (![0, 1, 2, 3, 4].includes(v.blocksPerSm)) fail('blocksPerSm', '0 to 4', String(v.blocksPerSm));
}

/** A float loaded as stored (f32, or a half's bits), widened when used. */
type Stored = F32 | R16;

function widen(k: KernelBuilder, type: FloatStorage, v: Stored): F32 {
  if (type === 'f32') return v as F32;
  if (type === 'f16') return k.cvt('f32', 'f16', k.reg('f32'), v as R16);
  const word = k.cvt('u32', 'u16', k.reg('u32'), v as R16);
  return k.mov('b32', k.reg('f32'), k.shl('b32', k.reg('u32'), word, 16));
}

/** One column's loads for a step: 4 code words, and its group's scale, offset or q4k sub-block words. */
interface ColumnStep {
  readonly words: R32[];
  readonly scale: Stored | undefined;
  readonly offset: Stored | undefined;
  readonly subWords: R32[] | undefined;
}

/** Moves a loaded step's registers into another's. */
function moveStep(k: KernelBuilder, to: ColumnStep[][], from: ColumnStep[][]): void {
  to.forEach((set, pi) => {
    set.forEach((col, c) => {
      const src = from[pi]![c]!;
      const fromWords = [...src.words, ...(src.subWords ?? [])];
      [...col.words, ...(col.subWords ?? [])].forEach((w, i) => {
        k.mov('b32', w, fromWords[i]!);
      });
      for (const key of ['scale', 'offset'] as const) {
        const dest = col[key];
        if (dest?.cls === 'f32') k.mov('f32', dest as F32, src[key] as F32);
        else if (dest) k.mov('b16', dest as R16, src[key] as R16);
      }
    });
  });
}

/** Sums of a lane: [weight][column][row]. */
type Sums = F32[][][];

/**
 * What both modes do with a step of 16-byte chunks: `load` issues a lane's
 * loads for chunk `chunk` of the given rows of W (one row per column, the
 * same for both weights of a pair) into fresh registers or `into`, and
 * `use` adds their products with x's int8 blocks to the sums. A chunk past
 * K is loaded from the row's last one (every load lies in its row, none is
 * predicated) and meets zeros of x: `use` adds nothing for it. A lane's
 * chunks are lane + 32·i, so its place in a unit of chunks (a q4k
 * super-block's sub-block) never changes: what depends on it is worked out
 * once.
 */
function int8Chunks(
  k: KernelBuilder,
  v: QgemvInt8Config,
  p: ParamHandles<typeof QGEMV_PARAMS>,
  kDim: R32,
  lane: R32,
) {
  const layout = quantLayout(v.format, 1);
  /** Codes of 4, 5 or 6 bits: nibble words (and q5k's, q6k's high bits), 32 weights a chunk. */
  const nib = layout.bits < 8;
  const q6 = layout.bits === 6;
  /** High-bit words per chunk: q5k's one, q6k's two. */
  const highWords = layout.bits === 5 ? 1 : q6 ? 2 : 0;
  /** q4k and q5k: a scale and offset per 32-weight sub-block from 6-bit sc and m. */
  const kq = layout.subBlockScales && !q6;
  const offsetted = layout.offsets;
  const rowScaled = layout.scalePerRow;
  /** Nibble codes without offsets are centred on 8 (q5g32's on 16; q6k's on 32, taken per half-chunk). */
  const zero = nib && !q6 && !offsetted ? layout.offset : 0;
  const centred = zero > 0;
  /** q5g32, q5g32a: the row's high words follow all its nibbles, one per group (core's q5g32RowWords). */
  const highAfterRow = layout.bits === 5 && layout.groupSize === 32;
  const { scale } = v.types;
  const scaleBytes = STORAGE_BYTES[scale];
  /** Weights per 16-byte chunk of codes. */
  const E = nib ? 32 : 16;
  /**
   * Nibble words without high bits: the high nibbles are masked in place
   * (16 × the code) rather than shifted down, the low nibbles' sum is
   * multiplied by 16 before they are added, and x's d is taken / 16. The
   * integer sums stay exact, so y is the same to the bit.
   */
  const sixteenths = nib && highWords === 0;
  /** The last chunk of a row: loads past K read it instead. */
  const lastChunk = k.sub(
    'u32',
    k.reg('u32'),
    k.shr('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, E - 1), Math.log2(E)),
    1,
  );
  const subBlock = kq ? subBlockShifts(k, lane) : undefined;
  // Row geometry of W (core's quantLayout): whole groups (super-blocks) for nibble codes, whole
  // 32-blocks for 8-bit ones; a unit's words hold its chunks of codes (then q5k's, q6k's high words).
  const unit = nib ? layout.groupSize : 32;
  // q5g32's units (groups) hold only their nibbles: the high words lie after the row's.
  const unitWords = layout.bits === 5 && layout.groupSize === 32 ? 4 : quantLayout(v.format, unit).rowWords;
  const chunksPerUnit = unit / E;
  const blocks = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, unit - 1), unit);
  const rowWords = highAfterRow
    ? k.madLo(
        'u32',
        k.reg('u32'),
        blocks,
        4,
        k.and('b32', k.reg('u32'), k.add('u32', k.reg('u32'), blocks, 3), ~3 >>> 0),
      )
    : k.mulLo('u32', k.reg('u32'), blocks, unitWords);
  const zeroWords = layout.subBlockScales
    ? k.mulLo('u32', k.reg('u32'), blocks, quantLayout(v.format, unit).zeroWords)
    : undefined;
  const weights = qgemvWeightParams(p, v.pair ? 2 : 1).map((set) => ({
    packed: k.globalPointer(set.packed),
    scales: k.globalPointer(set.scales),
    offsets: offsetted ? k.globalPointer(set.offsets) : undefined,
    zeros: layout.subBlockScales ? k.globalPointer(set.zeros) : undefined,
  }));

  const load = (rows: readonly R32[], chunk: R32, into?: ColumnStep[][]): ColumnStep[][] => {
    const at = k.min('u32', k.reg('u32'), chunk, lastChunk);
    const kk = k.mulLo('u32', k.reg('u32'), at, E);
    const groupIndex = rowScaled ? kk : k.shr('u32', k.reg('u32'), kk, Math.log2(layout.groupSize));
    // The chunk's words in its row: unit u = chunk / chunksPerUnit, chunk j of it at word 4j of the unit.
    const j = chunksPerUnit === 1 ? 0 : k.and('b32', k.reg('u32'), at, chunksPerUnit - 1);
    const unitAt = chunksPerUnit === 1 ? at : k.shr('u32', k.reg('u32'), at, Math.log2(chunksPerUnit));
    const inRow = k.mulLo('u32', k.reg('u32'), unitAt, unitWords);
    const codesAt = j === 0 ? inRow : k.madLo('u32', k.reg('u32'), j, 4, inRow);
    return weights.map((w, pi) =>
      rows.map((row, c) => {
        const dest = into?.[pi]?.[c];
        const rowAt = k.mulLo('u32', k.reg('u32'), row, rowWords);
        const words = dest ? dest.words.slice(0, 4) : k.regs('u32', 4);
        const codesPtr = k.elementAddress(w.packed, k.add('u32', k.reg('u32'), rowAt, codesAt), 4);
        k.ldGlobal('b32', words as unknown as Vec4<R32>, codesPtr, { nc: true });
        // q5k: its sub-block's high word 32 + j; q6k: its two, 32 + 2j and 33 + 2j; q5g32: word
        // 4G + g, after the row's 4G words of nibbles.
        const high: R32[] = dest ? dest.words.slice(4) : k.regs('u32', highWords);
        if (highWords > 0) {
          const highAt = highAfterRow
            ? k.add('u32', k.reg('u32'), rowAt, k.madLo('u32', k.reg('u32'), blocks, 4, at))
            : k.madLo('u32', k.reg('u32'), j as R32, highWords, k.add('u32', k.reg('u32'), rowAt, inRow));
          const hp = highAfterRow
            ? k.elementAddress(w.packed, highAt, 4)
            : addr(k.elementAddress(w.packed, highAt, 4), 4 * 32);
          if (highWords === 1) k.ldGlobal('b32', high[0]!, hp, { nc: true });
          else k.ldGlobal('b32', high as unknown as Vec2<R32>, hp, { nc: true });
        }
        const entry = rowScaled ? row : k.madLo('u32', k.reg('u32'), row, blocks, groupIndex);
        // q4k, q5k: the super-block's three words of 6-bit scales; q6k: the word of its chunk's two int8 scales.
        let subWords: R32[] | undefined;
        if (w.zeros) {
          const first = q6
            ? k.madLo(
                'u32',
                k.reg('u32'),
                row,
                zeroWords!,
                k.madLo('u32', k.reg('u32'), groupIndex, 4, k.shr('u32', k.reg('u32'), j as R32, 1)),
              )
            : k.madLo('u32', k.reg('u32'), row, zeroWords!, k.mulLo('u32', k.reg('u32'), groupIndex, 3));
          const base = k.elementAddress(w.zeros, first, 4);
          const to = dest?.subWords ?? k.regs('u32', q6 ? 1 : 3);
          to.forEach((word, i) => {
            k.ldGlobal('b32', word, addr(base, 4 * i), { nc: true });
          });
          subWords = to;
        }
        const stored = (ptr: R64, to: Stored | undefined): Stored => {
          const r = to ?? (scale === 'f32' ? k.reg('f32') : k.reg('b16'));
          const at = k.elementAddress(ptr, entry, scaleBytes);
          if (scale === 'f32') k.ldGlobal('f32', r as F32, at, { nc: true });
          else k.ldGlobal('b16', r as R16, at, { nc: true });
          return r;
        };
        return {
          words: [...words, ...high],
          scale: rowScaled ? undefined : stored(w.scales, dest?.scale),
          offset: w.offsets ? stored(w.offsets, dest?.offset) : undefined,
          subWords,
        };
      }),
    );
  };

  /**
   * A column's codes as dp4a operands, in x's word order (each 8 weights'
   * even ones, then odd ones): nibbles masked and shifted; q5k's and q6k's
   * high bits joined in through byte masks (quantizedQ6k.ts's planes).
   */
  const operands = (words: readonly R32[]): R32[] => {
    if (!nib) return words.slice(0, 4);
    const low = words.slice(0, 4);
    if (sixteenths)
      return low.flatMap((w) => [
        k.and('b32', k.reg('u32'), w, 0x0f0f0f0f),
        k.and('b32', k.reg('u32'), w, 0xf0f0f0f0),
      ]);
    return low.flatMap((w, i) => {
      // q5k: the high word shifted by 2i; q6k: high word i / 2, shifted by 4 for the pair's second word.
      const source = q6 ? words[4 + (i >> 1)]! : words[4]!;
      const by = q6 ? 4 * (i & 1) : 2 * i;
      const high = by === 0 ? source : k.shr('b32', k.reg('u32'), source, by);
      return bytePlanes(k, w, high, q6 ? Q6K_PLANE : Q5K_PLANE);
    });
  };

  /** Adds the products of `step` (chunk `chunk`) and x's rows to `acc`. */
  const use = (step: ColumnStep[][], chunk: R32, x: Int8X, acc: Sums): void => {
    const at = k.mulLo('u32', k.reg('u32'), chunk, E);
    const ok = below(k, at, kDim);
    const block = k.shr('u32', k.reg('u32'), at, 5);
    // Each column's scale (and offset; q6k's two half-chunk scales) and its codes as dp4a operands.
    const columns = step.map((set) =>
      set.map((col) => {
        let groupScale = col.scale ? widen(k, scale, col.scale) : undefined;
        let offset = col.offset ? widen(k, scale, col.offset) : undefined;
        let halves: F32[] | undefined;
        if (kq) {
          const parts = subBlockOf(k, groupScale!, offset!, col.subWords as [R32, R32, R32], subBlock!);
          groupScale = parts.scale;
          offset = parts.offset;
        } else if (q6) {
          // Sub-blocks 2j and 2j + 1: bytes 2 (j mod 2) and 2 (j mod 2) + 1 of the word; f32(d · sc) each.
          const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), block, 1), 4);
          const word = k.shr('b32', k.reg('u32'), col.subWords![0]!, shift);
          halves = [0, 8].map((bit) =>
            k.mul('f32', k.reg('f32'), groupScale!, int8At(k, word, bit), { rnd: 'rn' }),
          );
        }
        return {
          groupScale,
          halves,
          negOffset: offset ? k.neg('f32', k.reg('f32'), offset) : undefined,
          codes: operands(col.words),
        };
      }),
    );
    // 8-bit chunks are half a block: the block's offset term goes with its first half.
    const zOk =
      nib || !offsetted
        ? ok
        : k.and(
            'pred',
            k.reg('pred'),
            ok,
            k.setp('eq', 'u32', k.reg('pred'), k.and('b32', k.reg('u32'), at, 16), 0),
          );
    for (let r = 0; r < v.rows; r++) {
      // The row's x words for the chunk (nibble codes: the block's 8; 8-bit: the chunk's half, 4), d and z.
      const xWords = k.regs('u32', nib ? 8 : 4);
      for (const reg of xWords) k.mov('b32', reg, 0);
      const rowAt = r === 0 ? x.xBase : k.madLo('u32', k.reg('u32'), x.xRowBytes, r, x.xBase);
      const codesAt = k.add('u32', k.reg('u32'), rowAt, nib ? k.shl('b32', k.reg('u32'), block, 5) : at);
      k.predicated(ok, () => {
        k.ldShared('b32', xWords.slice(0, 4) as unknown as Vec4<R32>, codesAt);
        if (nib) k.ldShared('b32', xWords.slice(4, 8) as unknown as Vec4<R32>, addr(codesAt, 16));
      });
      const entry = k.shl(
        'b32',
        k.reg('u32'),
        r === 0 ? block : k.madLo('u32', k.reg('u32'), x.xBlocks, r, block),
        2,
      );
      const dx = k.mov('f32', k.reg('f32'), 0);
      k.predicated(ok, () => k.ldShared('f32', dx, k.add('u32', k.reg('u32'), entry, x.dBase)));
      const codeScale = sixteenths ? k.mul('f32', k.reg('f32'), dx, 1 / 16, { rnd: 'rn' }) : dx;
      let zx: R32 | undefined;
      if (centred || offsetted) {
        const z = k.mov('b32', k.reg('u32'), 0);
        k.predicated(zOk, () => k.ldShared('b32', z, k.add('u32', k.reg('u32'), entry, x.zBase)));
        zx = z;
      }
      // q6k: −32 · Σq of each half of the block, where its codes' sums start.
      const halfStarts = q6
        ? [0, 4].map((first) => {
            const sum = k.mov('b32', k.reg('u32'), 0);
            for (let i = first; i < first + 4; i++) k.dp4a('u32', 's32', sum, 0x01010101, xWords[i]!, sum);
            return k.mulLo('s32', k.reg('u32'), sum, -32);
          })
        : undefined;
      columns.forEach((set, pi) => {
        set.forEach((col, c) => {
          const a = acc[pi]![c]![r]!;
          const type = nib ? 'u32' : 's32';
          if (halfStarts) {
            // q6k: each half-chunk's sum takes its own sub-block scale.
            halfStarts.forEach((start, h) => {
              const dot = k.mov('b32', k.reg('u32'), start);
              for (let i = 4 * h; i < 4 * h + 4; i++)
                k.dp4a(type, 's32', dot, col.codes[i]!, xWords[i]!, dot);
              const sum = k.cvt('f32', 's32', k.reg('f32'), dot, { rnd: 'rn' });
              k.fma('f32', a, sum, k.mul('f32', k.reg('f32'), col.halves![h]!, dx, { rnd: 'rn' }), a, {
                rnd: 'rn',
              });
            });
            return;
          }
          const dot = k.mov('b32', k.reg('u32'), centred ? zx! : 0);
          if (sixteenths) {
            // The low nibbles (words 0, 2, 4, 6), 16 × their sum, then the high nibbles in place.
            for (const i of [0, 2, 4, 6]) k.dp4a(type, 's32', dot, col.codes[i]!, xWords[i]!, dot);
            k.shl('b32', dot, dot, 4);
            for (const i of [1, 3, 5, 7]) k.dp4a(type, 's32', dot, col.codes[i]!, xWords[i]!, dot);
          } else
            col.codes.forEach((w, i) => {
              k.dp4a(type, 's32', dot, w, xWords[i]!, dot);
            });
          const sum = k.cvt('f32', 's32', k.reg('f32'), dot, { rnd: 'rn' });
          const factor = col.groupScale
            ? k.mul('f32', k.reg('f32'), col.groupScale, codeScale, { rnd: 'rn' })
            : codeScale;
          k.fma('f32', a, sum, factor, a, { rnd: 'rn' });
          // Offsets: less offset · d·Σq.
          if (col.negOffset)
            k.fma('f32', a, col.negOffset, k.mov('b32', k.reg('f32'), zx!), a, { rnd: 'rn' });
        });
      });
    }
  };

  /**
   * Brings rows' codes, scales, sub-block scales and offsets into L2: lines
   * first, first + step, … of each row (see prefetchElements).
   */
  const prefetch = (rows: readonly R32[], first: R32, step: R32 | number): void => {
    const scaleCount = rowScaled ? 1 : blocks;
    for (const w of weights)
      for (const row of rows) {
        const arrays: [R64, R32 | number, number][] = [
          [w.packed, rowWords, 4],
          [w.scales, scaleCount, scaleBytes],
          ...(w.zeros && zeroWords ? [[w.zeros, zeroWords, 4] as [R64, R32, number]] : []),
          ...(w.offsets ? [[w.offsets, scaleCount, scaleBytes] as [R64, R32 | number, number]] : []),
        ];
        for (const [base, count, size] of arrays) {
          const at = count === 1 ? row : k.mulLo('u32', k.reg('u32'), row, count);
          prefetchElements(k, { base, first: at, count, size }, first, step);
        }
      }
  };

  return { load, use, prefetch, E, nib, zero, offsetted, rowScaled };
}

/**
 * Two modes. Blocked: block (bx, by) computes rows by·R … +R of y for
 * columns (bx · 8/S + g) · C … +C, g = warp / S, and warp (g, s) reads
 * chunks s·32 + l + i·32·S of those C rows of W (a chunk is 16 bytes, lane
 * l's at step i); the slices meet in shared memory at the end. Persistent
 * (S = 1): as many blocks as the SMs hold at once (`blocksPerSm` each), each
 * quantizing x once; global warp w takes columns u·C … +C for units
 * u = w, w + W, … (W warps in all), all of K each, its loads one step ahead
 * across units too, and stores a unit's sums when its last step is added.
 */
export function qgemvInt8Module(v: QgemvInt8Config): PtxModule {
  check(v);
  const C = v.cols;
  const R = v.rows;
  const S = v.slices;
  const P = v.pair ? 2 : 1;
  // sm_80: max.NaN, so that a NaN in x reaches y.
  const m = new PtxModule({ target: 'sm_80' });
  const xShared = m.dynamicShared('xq', 16);
  m.entry(
    QGEMV_INT8_ENTRY,
    INT8_PARAMS,
    (k, p) => {
      const { n, k: kDim, m: mDim } = loadParams(k, p, 'n', 'k', 'm');
      const at = gemvLaneAt(k, { cols: C, rows: R, slices: S });
      const { tid, warp, lane, slice, colBase, row0 } = at;
      const lastM = k.sub('u32', k.reg('u32'), mDim, 1);
      const lastN = k.sub('u32', k.reg('u32'), n, 1);
      const chunks = int8Chunks(k, v, p, kDim, lane);
      const { E } = chunks;
      const quantizeX = () =>
        int8X(k, {
          shared: k.sharedAddress(xShared),
          staged: v.stagedX,
          x: k.globalPointer(p.x),
          act: v.types.act,
          rows: R,
          row0,
          lastM,
          kDim,
          tid,
          q4: chunks.nib,
          zero: chunks.zero,
          offsetted: chunks.offsetted,
          ...(v.norm ? { norm: { weight: k.globalPointer(p.normWeight), eps: k.ldParam(p.eps) } } : {}),
        });
      /** Scales each row's sums by its inverse RMS where a norm is folded in (a partial sum too: it is linear). */
      const normalise = (x: Int8X) => {
        if (!x.invRms) return;
        for (const set of acc)
          for (const column of set)
            column.forEach((a, r) => {
              k.mul('f32', a, a, x.invRms![r]!, { rnd: 'rn' });
            });
      };
      const acc: Sums = Array.from({ length: P }, () =>
        Array.from({ length: C }, () => Array.from({ length: R }, () => k.mov('f32', k.reg('f32'), 0))),
      );
      /** Rows of W for columns first … first + C − 1; columns past N read row N − 1 (never stored). */
      const rowsFrom = (first: R32) =>
        Array.from({ length: C }, (_, c) =>
          k.min('u32', k.reg('u32'), c === 0 ? first : k.add('u32', k.reg('u32'), first, c), lastN),
        );

      if (!v.persistent) {
        const rows = rowsFrom(colBase);
        const chunk = k.madLo('u32', k.reg('u32'), slice, 32, lane);
        // The first steps' codes are on their way while x is quantized.
        const sets: (ColumnStep[][] | undefined)[] = Array.from({ length: v.depth }, () => undefined);
        const chunkAt = (s: number) => (s === 0 ? chunk : k.add('u32', k.reg('u32'), chunk, 32 * S * s));
        // The S warps of these columns share their lines.
        if (v.prefetch) chunks.prefetch(rows, chunk, 32 * S);
        sets[0] = chunks.load(rows, chunk);
        for (let s = 1; s < v.depth - 1; s++) sets[s] = chunks.load(rows, chunkAt(s));
        if (v.prefetch || v.earlyLoads) k.dependencyWait();
        const x = quantizeX();
        const sliceK = k.mulLo('u32', k.reg('u32'), slice, 32 * E);
        if (v.depth === 1) {
          const current = sets[0];
          k.forRange(sliceK, sliceK, kDim, 32 * S * E, () => {
            const nextChunk = k.add('u32', k.reg('u32'), chunk, 32 * S);
            const next = chunks.load(rows, nextChunk);
            chunks.use(current, chunk, x, acc);
            moveStep(k, current, next);
            k.mov('u32', chunk, nextChunk);
          });
        } else {
          // D steps a turn: step s loads step s + D − 1 into the set used D − 1 steps ago, then adds set s.
          const D = v.depth;
          const stepOfTurn = (s: number): void => {
            const ahead = (s + D - 1) % D;
            const at = chunkAt(s);
            sets[ahead] = chunks.load(rows, chunkAt(s + D - 1), sets[ahead]);
            chunks.use(sets[s]!, at, x, acc);
            if (s === D - 1) {
              k.mov('u32', chunk, k.add('u32', k.reg('u32'), chunk, 32 * S * D));
              return;
            }
            k.ifThen(below(k, k.add('u32', k.reg('u32'), sliceK, 32 * S * E * (s + 1)), kDim), () =>
              stepOfTurn(s + 1),
            );
          };
          k.forRange(sliceK, sliceK, kDim, D * 32 * S * E, () => stepOfTurn(0));
        }
        normalise(x);
        const red = k.sharedArray('red', 'f32', WARPS * P * C * R, 16);
        storeGemvSums(k, p, {
          acc,
          weights: qgemvWeightParams(p, P),
          at,
          sizes: { n, m: mDim, cols: C, rows: R, slices: S },
          red: k.sharedAddress(red),
          pair: v.pair,
          withC: v.withC,
          rowScaled: chunks.rowScaled,
          types: v.types,
        });
        return;
      }

      // Persistent: this warp's units and steps.
      const warps = k.mulLo('u32', k.reg('u32'), k.nctaid(), WARPS);
      const globalWarp = k.madLo('u32', k.reg('u32'), k.ctaid(), WARPS, warp);
      const units = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), n, C - 1), C);
      const steps = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, 32 * E - 1), 32 * E);
      const left = k.sub('u32', k.reg('u32'), k.max('u32', k.reg('u32'), units, globalWarp), globalWarp);
      const mine = k.div(
        'u32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), left, k.sub('u32', k.reg('u32'), warps, 1)),
        warps,
      );
      const total = k.mulLo('u32', k.reg('u32'), mine, steps);
      const unit = k.mov('u32', k.reg('u32'), globalWarp);
      const step = k.mov('u32', k.reg('u32'), 0);
      const lastStep = k.sub('u32', k.reg('u32'), steps, 1);
      const chunkOf = (s: R32) => k.madLo('u32', k.reg('u32'), s, 32, lane);
      // Units past N load row N − 1 (rowsFrom), steps past K the last chunk: every load is in W.
      // Two cursors over (unit, step): the one loads are issued at, D − 1 steps ahead of the one used.
      const loadStep = k.mov('u32', k.reg('u32'), step);
      const loadUnit = k.mov('u32', k.reg('u32'), unit);
      const advance = (at: { step: R32; unit: R32 }): Pred => {
        const ends = k.setp('eq', 'u32', k.reg('pred'), at.step, lastStep);
        k.selp('u32', at.unit, k.add('u32', k.reg('u32'), at.unit, warps), at.unit, ends);
        k.selp('u32', at.step, 0, k.add('u32', k.reg('u32'), at.step, 1), ends);
        return ends;
      };
      const loadAt = (into?: ColumnStep[][]) =>
        chunks.load(rowsFrom(k.mulLo('u32', k.reg('u32'), loadUnit, C)), chunkOf(loadStep), into);
      const ahead = { step: loadStep, unit: loadUnit };
      const sets: (ColumnStep[][] | undefined)[] = Array.from({ length: v.depth }, () => undefined);
      if (v.prefetch) {
        const mineAt = k.reg('u32');
        k.forRange(mineAt, 0, mine, 1, () => {
          const u = k.madLo('u32', k.reg('u32'), mineAt, warps, globalWarp);
          chunks.prefetch(rowsFrom(k.mulLo('u32', k.reg('u32'), u, C)), lane, 32);
        });
      }
      sets[0] = loadAt();
      for (let s = 1; s < v.depth - 1; s++) {
        advance(ahead);
        sets[s] = loadAt();
      }
      if (v.prefetch || v.earlyLoads) k.dependencyWait();
      const x = quantizeX();
      const t = k.reg('u32');
      /** Adds `now` (the used cursor's step), stores the unit it ends, and moves the cursor on. */
      const useStep = (now: ColumnStep[][]) => {
        chunks.use(now, chunkOf(step), x, acc);
        const ends = k.setp('eq', 'u32', k.reg('pred'), step, lastStep);
        k.ifThen(ends, () => {
          normalise(x);
          storeUnitSums(k, p, {
            acc,
            weights: qgemvWeightParams(p, P),
            lane,
            colBase: k.mulLo('u32', k.reg('u32'), unit, C),
            row0,
            n,
            m: mDim,
            pair: v.pair,
            withC: v.withC,
            rowScaled: chunks.rowScaled,
            types: v.types,
          });
        });
        advance({ step, unit });
      };
      if (v.depth === 1) {
        const current = sets[0];
        k.forRange(t, 0, total, 1, () => {
          advance(ahead);
          const next = loadAt();
          useStep(current);
          moveStep(k, current, next);
        });
      } else {
        // D steps a turn: step s loads D − 1 steps ahead into the set used D − 1 steps ago, then adds set s.
        const D = v.depth;
        const stepOfTurn = (s: number): void => {
          const into = (s + D - 1) % D;
          advance(ahead);
          sets[into] = loadAt(sets[into]);
          useStep(sets[s]!);
          if (s < D - 1)
            k.ifThen(below(k, k.add('u32', k.reg('u32'), t, s + 1), total), () => stepOfTurn(s + 1));
        };
        k.forRange(t, 0, total, D, () => stepOfTurn(0));
      }
    },
    // Persistent blocks must all be resident: at most 65536 / (256 · blocksPerSm) registers. Blocked:
    // the same where asked; else no .maxntid, with which ptxas holds some 4-row configurations to 64
    // registers and spills.
    {
      ...(v.blocksPerSm > 0 ? { maxThreadsPerBlock: THREADS, minBlocksPerSm: v.blocksPerSm } : {}),
      ...(v.triggerDependents ? { triggerDependents: true } : {}),
    },
  );
  return m;
}

/**
 * The most bytes of codes a GEMV prefetches (weightPrefetch): a third of an
 * H200's L2. On an H200 prefetching Llama-3.1-8B's gate·up (66 MB) and down
 * (33 MB) made them 28% and 16% slower: the lines were evicted before use,
 * and x's copy queued behind them.
 */
export const PREFETCH_MAX_BYTES = 16 * 2 ** 20;

/** Bytes of an L2 cache line. */
const LINE_BYTES = 128;

/**
 * `prefetch.global.L2` of the lines that hold elements first … first +
 * count − 1 (of `size` bytes) of `base`: line offsets start, start + step, …
 * from the first element's, and one more for the last element's line (the
 * range need not start on a line). Reads nothing past the range.
 */
function prefetchElements(
  k: KernelBuilder,
  range: { readonly base: R64; readonly first: R32; readonly count: R32 | number; readonly size: number },
  start: R32 | number,
  step: R32 | number,
): void {
  const perLine = LINE_BYTES / range.size;
  const last =
    typeof range.count === 'number'
      ? k.mov('u32', k.reg('u32'), range.count - 1)
      : k.sub('u32', k.reg('u32'), range.count, 1);
  const lines = k.add('u32', k.reg('u32'), k.shr('u32', k.reg('u32'), last, Math.log2(perLine)), 2);
  const i = k.reg('u32');
  k.forRange(i, start, lines, step, () => {
    const offset = k.min('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), i, perLine), last);
    k.prefetchL2(k.elementAddress(range.base, k.add('u32', k.reg('u32'), range.first, offset), range.size));
  });
}

/**
 * A persistent warp's end of a unit: each sum added across the warp, lane
 * c·R + r stores y(row0 + r, colBase + c) (times q8's row scale, as
 * silu(gate) ⊙ up for a pair, or plus beta·c), and the sums start again at 0.
 */
function storeUnitSums(
  k: KernelBuilder,
  p: ParamHandles<typeof QGEMV_PARAMS>,
  g: {
    readonly acc: Sums;
    readonly weights: readonly { readonly scales: Param<'ptr'> }[];
    readonly lane: R32;
    readonly colBase: R32;
    readonly row0: R32;
    readonly n: R32;
    readonly m: R32;
    readonly pair: boolean;
    readonly withC: boolean;
    readonly rowScaled: boolean;
    readonly types: { readonly act: FloatStorage; readonly scale: FloatStorage };
  },
): void {
  const { acc } = g;
  for (const set of acc)
    for (const rows of set)
      for (const a of rows)
        for (let offset = 16; offset >= 1; offset /= 2)
          k.add('f32', a, a, k.shflSync('bfly', k.reg('f32'), a, offset), { rnd: 'rn' });
  const C = acc[0]!.length;
  const R = acc[0]![0]!.length;
  for (let c = 0; c < C; c++) {
    const col = k.add('u32', k.reg('u32'), g.colBase, c);
    for (let r = 0; r < R; r++) {
      const row = k.add('u32', k.reg('u32'), g.row0, r);
      const mine = [
        k.setp('eq', 'u32', k.reg('pred'), g.lane, c * R + r),
        below(k, col, g.n),
        below(k, row, g.m),
      ].reduce((a, b) => k.and('pred', k.reg('pred'), a, b));
      k.ifThen(mine, () => {
        const sums = g.weights.map((_, pi) => acc[pi]![c]![r]!);
        storeGemvOutput(k, p, { ...g, sums, col, row, n: g.n });
      });
    }
  }
  for (const set of acc) for (const rows of set) for (const a of rows) k.mov('f32', a, 0);
}

/**
 * Columns per warp: the forced shape's, else 8 sums of codes a lane for
 * 8-bit codes and 4 for 4-bit ones (weights × columns; on an H200,
 * 1×4096×14336: q8g32 17.9 µs at 8 columns against 21.3 at 4, q4k 15.9 at 4
 * against 16.3 at 2 and 18.4 at 8; the pairs: q4k 26.4 at 2 against 31.4 at
 * 4, q8g32 33.2 at 4 against 35.8 at 2); never more than 8 sums a lane
 * (weights × columns × rows), beyond which q4k's pair of 4 rows spills.
 */
export function qgemvInt8Columns(
  forced: QgemvShapeVariant | undefined,
  rows: number,
  pair: boolean,
  bits: number,
): number {
  // A forced shape gives its columns (core's QGEMV_SHAPES); chunks are 16 bytes whatever its words.
  const chosen = forced ? QGEMV_SHAPES[forced].cols : (bits === 8 ? 8 : 4) / (pair ? 2 : 1);
  return Math.max(1, Math.min(chosen, Math.floor(8 / (rows * (pair ? 2 : 1)))));
}

/**
 * The most sets of registers the loop may keep codes in for `sums` sums a
 * lane (weights × columns × rows) at `blocksPerSm` blocks an SM (0: no
 * register cap): 3 up to 2 sums, 2 up to 4, else 1, and at most 2 where 3
 * or 4 blocks an SM leave 85 or 64 registers. More keep too many columns'
 * codes live at once (two sets of q8g32a's 8 columns spill at 128
 * registers, three of q4k's 2 columns at 85).
 */
export function deepestFor(sums: number, blocksPerSm: number): 1 | 2 | 3 {
  const deepest = sums <= 2 ? 3 : sums <= 4 ? 2 : 1;
  return blocksPerSm > 2 ? (Math.min(deepest, 2) as 1 | 2) : deepest;
}

/**
 * The persistent mode's blocks per SM and grid for N columns of `cols` a
 * warp: where the units keep every resident warp busy and within 75% of
 * even (the last round of units leaves the rest idle); `asked` blocks an SM
 * (the qgemvBlocksPerSm switch), else 2 (128 registers: at 3 or 4 an SM,
 * 85 or 64, most formats spill), and no more than shared memory holds
 * (`fit` blocks). Undefined where N is too narrow for
 * that: the blocked mode then (narrowing the columns to make room was
 * slower on an H200: 1×4096×11008 q4g32 12.6 µs at 1 column against 9.9
 * blocked at 4).
 */
export function persistentShape(
  n: number,
  cols: number,
  multiprocessors: number,
  fit: number,
  asked?: number,
): { blocksPerSm: number; blocks: number } | undefined {
  const blocksPerSm = Math.min(asked ?? 2, Math.floor(fit));
  if (blocksPerSm < 1) return undefined;
  const warps = multiprocessors * blocksPerSm * WARPS;
  const units = Math.ceil(n / cols);
  if (units < warps || units / (Math.ceil(units / warps) * warps) < 0.75) return undefined;
  return { blocksPerSm, blocks: multiprocessors * blocksPerSm };
}

/**
 * Launches the int8 GEMV for x [M, K] against one weight (y = x·Wᵀ + beta·c)
 * or a gate·up pair, where the `qgemvActivations: 'int8'` switch asks and
 * the kernel reads the case (format, no zero points, 16-byte aligned codes,
 * x within shared memory); false where it does not, for the caller's kernel.
 */
export function encodeQuantizedGemvInt8(
  encoder: KernelEncoder,
  ops: {
    x: Operand;
    weights: readonly QgemvWeight[];
    c: Operand | undefined;
    y: Operand;
    /** An rmsNorm to fold in (its weight stored as x is). */
    norm?: { readonly weight: Operand; readonly eps: number } | undefined;
  },
  attrs: { format: QuantFormat; beta: number; activations: QuantActivations },
): boolean {
  const { x, weights, c, y } = ops;
  const layout = quantLayout(attrs.format, 1);
  const [m, kDim] = x.shape as [number, number];
  const n = y.shape[1]!;
  const rows = Math.min(m, 4);
  const actBytes = STORAGE_BYTES[storageOf(x)];
  const staging = kDim % 32 === 0 && x.ptr % 16n === 0n;
  const limit = encoder.device.sharedMemoryPerBlockOptin;
  const stagedX = staging && qgemvInt8SharedBytes(rows, kDim, { actBytes }) <= limit;
  const sharedBytes = qgemvInt8SharedBytes(rows, kDim, stagedX ? { actBytes } : undefined);
  // K = 0 is the exact kernel's (y = beta·c): this one's loads assume a chunk of each row.
  const applies =
    takesInt8Activations(attrs.activations, encoder.tuning.qgemvActivations) &&
    kDim > 0 &&
    qgemvInt8Reads(attrs.format) &&
    weights.every((w) => w.packed.ptr % 16n === 0n && (layout.zeroPoints ? w.zeros === undefined : true)) &&
    sharedBytes <= limit;
  if (!applies) return false;
  if (m === 0 || n === 0) return true;
  const pair = weights.length === 2;
  const forced = encoder.tuning.qgemvVariant === 'a' ? undefined : encoder.tuning.qgemvVariant;
  const cols = qgemvInt8Columns(forced, rows, pair, layout.bits);
  const base = {
    format: attrs.format,
    pair,
    withC: c !== undefined,
    types: { act: storageOf(x), scale: storageOf(weights[0]!.scales) },
    rows,
    stagedX,
    norm: ops.norm !== undefined,
    prefetch:
      encoder.tuning.weightPrefetch === 'on' &&
      weights.length * n * quantLayout(attrs.format, kDim).rowWords * 4 <= PREFETCH_MAX_BYTES,
    earlyLoads: encoder.tuning.weightPrefetch === 'loads' || encoder.tuning.weightPrefetch === 'chain',
  };
  const sums = cols * rows * (pair ? 2 : 1);
  const depthAt = (blocksPerSm: number) =>
    Math.min(encoder.tuning.qgemvDepth ?? 2, deepestFor(sums, blocksPerSm)) as 1 | 2 | 3;
  const asked = encoder.tuning.qgemvBlocksPerSm;
  const persistent =
    encoder.tuning.qgemvPersistent === 'off'
      ? undefined
      : persistentShape(n, cols, encoder.device.multiprocessors, limit / sharedBytes, asked);
  const config: QgemvInt8Config = persistent
    ? {
        ...base,
        cols,
        blocksPerSm: persistent.blocksPerSm,
        slices: 1,
        persistent: true,
        depth: depthAt(persistent.blocksPerSm),
        triggerDependents: encoder.tuning.weightPrefetch === 'chain',
      }
    : {
        ...base,
        cols,
        slices:
          encoder.tuning.qgemvSlices ??
          qgemvSlicesFor(n, kDim, { cols, words: 4 }, layout.perWord, encoder.device.multiprocessors),
        persistent: false,
        triggerDependents: false,
        blocksPerSm: asked ?? 0,
        depth: depthAt(asked ?? 0),
      };
  const blocks = persistent ? persistent.blocks : Math.ceil(n / ((config.cols * WARPS) / config.slices));
  encoder.launch({
    key: qgemvInt8Key(config),
    module: () => qgemvInt8Module(config),
    entry: QGEMV_INT8_ENTRY,
    grid: [blocks, Math.ceil(m / rows), 1],
    block: THREADS,
    sharedBytes,
    args: {
      ...qgemvArgs(ops, { m, n, k: kDim, beta: attrs.beta }),
      normWeight: ops.norm?.weight ?? x,
      eps: ops.norm?.eps ?? 0,
    },
  });
  return true;
}
