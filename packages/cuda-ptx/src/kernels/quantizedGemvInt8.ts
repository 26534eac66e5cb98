import {
  InvalidArgumentError,
  type QgemvShapeVariant,
  type QuantFormat,
  qgemvSlicesFor,
  quantLayout,
} from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R16, type R32, type R64 } from '../ptx/operands.js';
import { loadParams } from './entryParams.js';
import { below } from './gemv.js';
import {
  gemvLaneAt,
  QGEMV_PARAMS,
  type QgemvWeight,
  qgemvArgs,
  qgemvWeightParams,
  storeGemvSums,
} from './quantizedGemv.js';
import { loadSubBlockWords, subBlockFromWords } from './quantizedSubBlocks.js';
import { type FloatStorage, halfToF32, loadAsF32, STORAGE_BYTES, storageKey, storageOf } from './storage.js';

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
//   times d (and less offset · d·Σq).
// y is the product of W and x̃ = q·d, x's int8 blocks, up to f32 rounding,
// so it differs from the exact product by at most Σ over x blocks of
// d/2 · Σ|w| of the block's weights.

export const QGEMV_INT8_ENTRY = 'quantized_gemv_int8';
const WARPS = 8;
const THREADS = WARPS * 32;
/** Elements of x per int8 block (one scale each). */
const X_BLOCK = 32;
/** Shared bytes per block of x and row: 32 codes, d, and −8·Σq or d·Σq. */
const X_BLOCK_BYTES = X_BLOCK + 8;

/** The formats it reads: 4- or 8-bit codes whose groups (or sub-blocks) hold whole 32-element blocks of x. */
export const QGEMV_INT8_FORMATS = [
  'q8',
  'q4g32',
  'q4g128',
  'q8g32',
  'q4g32a',
  'q8g32a',
  'q4k',
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
  /** Warps of a block that split K for the same columns: 1, 2, 4 or 8. */
  readonly slices: 1 | 2 | 4 | 8;
}

export function qgemvInt8Key(v: QgemvInt8Config): string {
  const what = `${v.pair ? 'gateup/' : ''}${v.format}${v.withC ? '/c' : ''}`;
  const shape = `m${v.rows}/c${v.cols}s${v.slices}/${v.stagedX ? 'staged' : 'scalar'}`;
  return `quantized/gemv-int8/${shape}/${what}${storageKey([v.types.act, v.types.scale])}`;
}

/** Dynamic shared bytes for `rows` rows of x of length `k`: the int8 blocks, and x itself where staged. */
export function qgemvInt8SharedBytes(
  rows: number,
  k: number,
  staged: { actBytes: number } | undefined,
): number {
  return rows * Math.ceil(k / X_BLOCK) * X_BLOCK_BYTES + (staged ? rows * k * staged.actBytes : 0);
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
}

/** A float loaded as stored (f32, or a half's bits), widened when used. */
type Stored = F32 | R16;

function loadStored(k: KernelBuilder, type: FloatStorage, at: R64, ok: Pred): Stored {
  if (type === 'f32') {
    const r = k.mov('f32', k.reg('f32'), 0);
    k.predicated(ok, () => k.ldGlobal('f32', r, at, { nc: true }));
    return r;
  }
  const r = k.mov('b16', k.reg('b16'), 0);
  k.predicated(ok, () => k.ldGlobal('b16', r, at, { nc: true }));
  return r;
}

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
  readonly subWords: [R32, R32, R32] | undefined;
}

/**
 * Block (bx, by) computes rows by·R … +R of y for columns
 * (bx · 8/S + g) · C … +C, g = warp / S. Warp (g, s) reads chunks
 * s·32 + l + i·32·S of those C rows of W (a chunk is 16 bytes, lane l's at
 * step i) and x's int8 blocks for the same k from shared memory.
 */
export function qgemvInt8Module(v: QgemvInt8Config): PtxModule {
  check(v);
  const layout = quantLayout(v.format, 1);
  const q4 = layout.bits === 4;
  const kq = layout.subBlockScales;
  const offsetted = layout.offsets;
  const rowScaled = layout.scalePerRow;
  /** 4-bit codes without offsets are centred on 8. */
  const centred = q4 && !offsetted;
  const { act, scale } = v.types;
  const actBytes = STORAGE_BYTES[act];
  const scaleBytes = STORAGE_BYTES[scale];
  const C = v.cols;
  const R = v.rows;
  const S = v.slices;
  const P = v.pair ? 2 : 1;
  /** Weights per 16-byte chunk. */
  const E = q4 ? 32 : 16;
  // sm_80: max.NaN, so that a NaN in x reaches y.
  const m = new PtxModule({ target: 'sm_80' });
  const xShared = m.dynamicShared('xq', 16);
  m.entry(
    QGEMV_INT8_ENTRY,
    QGEMV_PARAMS,
    (k, p) => {
      const { n, k: kDim, m: mDim } = loadParams(k, p, 'n', 'k', 'm');
      const red = k.sharedArray('red', 'f32', WARPS * P * C * R, 16);
      const redBase = k.sharedAddress(red);
      const at = gemvLaneAt(k, { cols: C, rows: R, slices: S });
      const { tid, lane, slice, colBase, row0 } = at;
      const lastM = k.sub('u32', k.reg('u32'), mDim, 1);

      // Row geometry of W (core's quantLayout): whole groups for 4-bit codes, whole 32-blocks for 8-bit.
      const unit = q4 ? layout.groupSize : 32;
      const blocks = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, unit - 1), unit);
      const rowWords = k.mulLo('u32', k.reg('u32'), blocks, unit / layout.perWord);
      const zeroWords = kq ? k.mulLo('u32', k.reg('u32'), blocks, 3) : undefined;
      const chunk0 = k.madLo('u32', k.reg('u32'), slice, 32, lane);
      const lastN = k.sub('u32', k.reg('u32'), n, 1);
      const weightSets = qgemvWeightParams(p, P);
      // Per weight and column: the lane's code pointer and its rows of scales (offsets, sub-block words).
      // Columns past N read row N − 1 (never stored).
      const cols = weightSets.map((set) => {
        const packed = k.globalPointer(set.packed);
        const scales = k.globalPointer(set.scales);
        const offsets = offsetted ? k.globalPointer(set.offsets) : undefined;
        const zeros = kq ? k.globalPointer(set.zeros) : undefined;
        return Array.from({ length: C }, (_, c) => {
          const wRow = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), colBase, c), lastN);
          const w = k.elementAddress(
            packed,
            k.madLo('u32', k.reg('u32'), wRow, rowWords, k.mulLo('u32', k.reg('u32'), chunk0, 4)),
            4,
          );
          return {
            w,
            scales,
            offsets,
            zeros,
            scaleRow: k.mulLo('u32', k.reg('u32'), wRow, rowScaled ? 1 : blocks),
            zeroRow: zeroWords ? k.mulLo('u32', k.reg('u32'), wRow, zeroWords) : undefined,
          };
        });
      });

      /** Bytes of W and k one step moves on. */
      const stepK = 32 * S * E;
      const stepBytes = 32 * S * 16;
      const loadStep = (kk: R32, ahead: number): ColumnStep[][] => {
        const ok = below(k, kk, kDim);
        const groupIndex = rowScaled ? kk : k.shr('u32', k.reg('u32'), kk, Math.log2(layout.groupSize));
        return cols.map((set) =>
          set.map((col) => {
            const words = k.regs('u32', 4);
            for (const r of words) k.mov('b32', r, 0);
            const at = addr(col.w, ahead * stepBytes);
            k.predicated(ok, () => k.ldGlobal('b32', words as unknown as Vec4<R32>, at, { nc: true }));
            const entry = rowScaled ? col.scaleRow : k.add('u32', k.reg('u32'), col.scaleRow, groupIndex);
            return {
              words,
              scale: rowScaled
                ? undefined
                : loadStored(k, scale, k.elementAddress(col.scales, entry, scaleBytes), ok),
              offset: offsetted
                ? loadStored(k, scale, k.elementAddress(col.offsets!, entry, scaleBytes), ok)
                : undefined,
              subWords: kq
                ? loadSubBlockWords(
                    k,
                    col.zeros!,
                    k.madLo('u32', k.reg('u32'), groupIndex, 3, col.zeroRow!),
                    ok,
                  )
                : undefined,
            };
          }),
        );
      };
      // The first step's codes are on their way while x is quantized.
      const kk = k.mulLo('u32', k.reg('u32'), chunk0, E);
      const current = loadStep(kk, 0);

      // x's rows as int8 blocks in shared memory: four lanes a block, eight elements each. Staged,
      // x itself lies first (R·K·actBytes, a multiple of 64), the blocks after it.
      const xBlocks = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, X_BLOCK - 1), X_BLOCK);
      const stage = k.sharedAddress(xShared);
      const xBase = v.stagedX ? k.madLo('u32', k.reg('u32'), kDim, R * actBytes, stage) : stage;
      const xRowBytes = k.mulLo('u32', k.reg('u32'), xBlocks, X_BLOCK);
      const dBase = k.madLo('u32', k.reg('u32'), xRowBytes, R, xBase);
      const zBase = k.madLo('u32', k.reg('u32'), xBlocks, R * 4, dBase);
      quantizeX(k, {
        x: k.globalPointer(p.x),
        act,
        actBytes,
        stage: v.stagedX ? stage : undefined,
        rows: R,
        row0,
        lastM,
        kDim,
        xBlocks,
        tid,
        shared: { codes: xBase, d: dBase, z: zBase },
        q4,
        centred,
        offsetted,
      });
      k.barSync();

      const acc = Array.from({ length: P }, () =>
        Array.from({ length: C }, () => Array.from({ length: R }, () => k.mov('f32', k.reg('f32'), 0))),
      );
      const sliceK = k.mulLo('u32', k.reg('u32'), slice, 32 * E);
      k.forRange(sliceK, sliceK, kDim, stepK, () => {
        const next = loadStep(k.add('u32', k.reg('u32'), kk, stepK), 1);
        useStep(current, kk);
        // The next step's registers become this one's.
        current.forEach((set, pi) => {
          set.forEach((col, c) => {
            const from = next[pi]![c]!;
            const words = [...col.words, ...(col.subWords ?? [])];
            const fromWords = [...from.words, ...(from.subWords ?? [])];
            words.forEach((w, i) => {
              k.mov('b32', w, fromWords[i]!);
            });
            if (col.scale) moveStored(k, col.scale, from.scale!);
            if (col.offset) moveStored(k, col.offset, from.offset!);
          });
        });
        for (const set of cols) for (const col of set) k.add('u64', col.w, col.w, stepBytes);
        k.add('u32', kk, kk, stepK);
      });

      function useStep(step: ColumnStep[][], at: R32): void {
        const ok = below(k, at, kDim);
        const block = k.shr('u32', k.reg('u32'), at, 5);
        // Each column's scale (and offset) and its codes as dp4a operands: low and high nibbles apart.
        const sub = kq ? k.and('b32', k.reg('u32'), block, 7) : undefined;
        const columns = step.map((set) =>
          set.map((col) => {
            let groupScale = col.scale ? widen(k, scale, col.scale) : undefined;
            let offset = col.offset ? widen(k, scale, col.offset) : undefined;
            if (kq) {
              const parts = subBlockFromWords(k, groupScale!, offset!, col.subWords!, sub!);
              groupScale = parts.scale;
              offset = parts.offset;
            }
            const codes = q4
              ? col.words.flatMap((w) => [
                  k.and('b32', k.reg('u32'), w, 0x0f0f0f0f),
                  k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), w, 4), 0x0f0f0f0f),
                ])
              : col.words;
            return { groupScale, negOffset: offset ? k.neg('f32', k.reg('f32'), offset) : undefined, codes };
          }),
        );
        // 8-bit chunks are half a block: the block's offset term goes with its first half.
        const zOk =
          q4 || !offsetted
            ? ok
            : k.and(
                'pred',
                k.reg('pred'),
                ok,
                k.setp('eq', 'u32', k.reg('pred'), k.and('b32', k.reg('u32'), at, 16), 0),
              );
        for (let r = 0; r < R; r++) {
          // The row's x words for the chunk (4-bit: the block's 8; 8-bit: the chunk's half, 4), d and z.
          const xWords = k.regs('u32', q4 ? 8 : 4);
          for (const reg of xWords) k.mov('b32', reg, 0);
          const rowAt = r === 0 ? xBase : k.madLo('u32', k.reg('u32'), xRowBytes, r, xBase);
          const codesAt = k.add('u32', k.reg('u32'), rowAt, q4 ? k.shl('b32', k.reg('u32'), block, 5) : at);
          k.predicated(ok, () => {
            k.ldShared('b32', xWords.slice(0, 4) as unknown as Vec4<R32>, codesAt);
            if (q4) k.ldShared('b32', xWords.slice(4, 8) as unknown as Vec4<R32>, addr(codesAt, 16));
          });
          const entry = k.shl(
            'b32',
            k.reg('u32'),
            r === 0 ? block : k.madLo('u32', k.reg('u32'), xBlocks, r, block),
            2,
          );
          const dx = k.mov('f32', k.reg('f32'), 0);
          k.predicated(ok, () => k.ldShared('f32', dx, k.add('u32', k.reg('u32'), entry, dBase)));
          let zx: R32 | undefined;
          if (centred || offsetted) {
            const z = k.mov('b32', k.reg('u32'), 0);
            k.predicated(zOk, () => k.ldShared('b32', z, k.add('u32', k.reg('u32'), entry, zBase)));
            zx = z;
          }
          columns.forEach((set, pi) => {
            set.forEach((col, c) => {
              const a = acc[pi]![c]![r]!;
              const dot = k.mov('b32', k.reg('u32'), centred ? zx! : 0);
              col.codes.forEach((w, i) => {
                k.dp4a(q4 ? 'u32' : 's32', 's32', dot, w, xWords[i]!, dot);
              });
              const sum = k.cvt('f32', 's32', k.reg('f32'), dot, { rnd: 'rn' });
              const factor = col.groupScale
                ? k.mul('f32', k.reg('f32'), col.groupScale, dx, { rnd: 'rn' })
                : dx;
              k.fma('f32', a, sum, factor, a, { rnd: 'rn' });
              // Offsets: less offset · d·Σq.
              if (col.negOffset)
                k.fma('f32', a, col.negOffset, k.mov('b32', k.reg('f32'), zx!), a, { rnd: 'rn' });
            });
          });
        }
      }

      storeGemvSums(k, p, {
        acc,
        weights: weightSets,
        at,
        sizes: { n, m: mDim, cols: C, rows: R, slices: S },
        red: redBase,
        pair: v.pair,
        withC: v.withC,
        rowScaled,
        types: v.types,
      });
    },
    // No .maxntid: with it ptxas holds some 4-row configurations to 64 registers and spills.
  );
  return m;
}

function moveStored(k: KernelBuilder, to: Stored, from: Stored): void {
  if (to.cls === 'f32') k.mov('f32', to as F32, from as F32);
  else k.mov('b16', to as R16, from as R16);
}

/**
 * x's rows row0 … +R (rows past M read row M − 1) as int8 blocks of 32 in
 * shared memory: `codes` holds each row's blocks (32 bytes each; 4-bit
 * formats keep the even elements of each 8 in one word and the odd ones in
 * the next), `d` each block's max|x| / 127 and `z` its −8·Σq (centred
 * codes) or d·Σq (offsets). Thread t takes quarter t mod 4 (8 elements) of a
 * block; the four lanes of a block meet through shuffles.
 */
function quantizeX(
  k: KernelBuilder,
  o: {
    readonly x: R64;
    readonly act: FloatStorage;
    readonly actBytes: number;
    /** Where x is staged, if it is. */
    readonly stage: R32 | undefined;
    readonly rows: number;
    readonly row0: R32;
    readonly lastM: R32;
    readonly kDim: R32;
    readonly xBlocks: R32;
    readonly tid: R32;
    readonly shared: { readonly codes: R32; readonly d: R32; readonly z: R32 };
    readonly q4: boolean;
    readonly centred: boolean;
    readonly offsetted: boolean;
  },
): void {
  if (o.stage) stageX(k, { ...o, stage: o.stage });
  const quarters = k.mulLo('u32', k.reg('u32'), o.xBlocks, 4 * o.rows);
  // Every lane runs every round (the shuffles need the whole warp); those past the end neither read nor write.
  const rounds = k.mulLo(
    'u32',
    k.reg('u32'),
    k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), quarters, THREADS - 1), THREADS),
    THREADS,
  );
  const perRow = k.mulLo('u32', k.reg('u32'), o.xBlocks, 4);
  const q = k.reg('u32');
  k.forRange(q, 0, rounds, THREADS, () => {
    const item = k.add('u32', k.reg('u32'), q, o.tid);
    const inside = below(k, item, quarters);
    const r = k.div('u32', k.reg('u32'), item, perRow);
    const rem = k.sub('u32', k.reg('u32'), item, k.mulLo('u32', k.reg('u32'), r, perRow));
    const first = k.shl('b32', k.reg('u32'), rem, 3);
    const values = k.regs('f32', 8);
    if (o.stage) {
      // Quarter `item` of the staged rows starts at element 8·item (K is a multiple of 32).
      for (const v of values) k.mov('f32', v, 0);
      const at = k.madLo('u32', k.reg('u32'), item, 8 * o.actBytes, o.stage);
      k.predicated(inside, () => loadSharedAsF32(k, o.act, values, at));
    } else {
      const row = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), o.row0, r), o.lastM);
      const at = k.elementAddress(o.x, k.madLo('u32', k.reg('u32'), row, o.kDim, first), o.actBytes);
      values.forEach((value, j) => {
        const ok = k.and(
          'pred',
          k.reg('pred'),
          inside,
          below(k, k.add('u32', k.reg('u32'), first, j), o.kDim),
        );
        loadAsF32(k, o.act, [value], addr(at, j * o.actBytes), { ok });
      });
    }
    quantizeQuarter(k, o, { item, inside, r, rem, values });
  });
}

/**
 * x's rows row0 … +R (rows past M copy row M − 1) into shared memory at
 * `stage`, 16 bytes a copy: every copy is issued before any is awaited.
 */
function stageX(
  k: KernelBuilder,
  o: {
    readonly x: R64;
    readonly actBytes: number;
    readonly rows: number;
    readonly row0: R32;
    readonly lastM: R32;
    readonly kDim: R32;
    readonly tid: R32;
    readonly stage: R32;
  },
): void {
  const perRow = k.shr('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), o.kDim, o.actBytes), 4);
  const pieces = k.mulLo('u32', k.reg('u32'), perRow, o.rows);
  const piece = k.reg('u32');
  k.forRange(piece, o.tid, pieces, THREADS, () => {
    const r = k.div('u32', k.reg('u32'), piece, perRow);
    const inRow = k.sub('u32', k.reg('u32'), piece, k.mulLo('u32', k.reg('u32'), r, perRow));
    const row = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), o.row0, r), o.lastM);
    const src = k.elementAddress(o.x, k.madLo('u32', k.reg('u32'), row, perRow, inRow), 16);
    k.cpAsync('cg', k.madLo('u32', k.reg('u32'), piece, 16, o.stage), src, 16);
  });
  k.cpAsyncWaitAll();
  k.barSync();
}

/** Eight consecutive elements of `type` at shared address `at` (16-byte aligned), as f32. */
function loadSharedAsF32(k: KernelBuilder, type: FloatStorage, values: readonly F32[], at: R32): void {
  if (type === 'f32') {
    k.ldShared('f32', values.slice(0, 4) as unknown as Vec4<F32>, at);
    k.ldShared('f32', values.slice(4, 8) as unknown as Vec4<F32>, addr(at, 16));
    return;
  }
  const words = k.regs('u32', 4);
  k.ldShared('b32', words as unknown as Vec4<R32>, at);
  words.forEach((word, i) => {
    k.mov('f32', values[2 * i]!, halfToF32(k, type, word, false));
    k.mov('f32', values[2 * i + 1]!, halfToF32(k, type, word, true));
  });
}

/** One thread's quarter of a block of x: its 8 codes stored, and the block's d and z by its first quarter. */
function quantizeQuarter(
  k: KernelBuilder,
  o: {
    readonly xBlocks: R32;
    readonly shared: { readonly codes: R32; readonly d: R32; readonly z: R32 };
    readonly q4: boolean;
    readonly centred: boolean;
    readonly offsetted: boolean;
  },
  { item, inside, r, rem, values }: { item: R32; inside: Pred; r: R32; rem: R32; values: readonly F32[] },
): void {
  const amax = k.mov('f32', k.reg('f32'), 0);
  for (const value of values) k.max('f32', amax, amax, k.abs('f32', k.reg('f32'), value), { nan: true });
  for (const offset of [1, 2])
    k.max('f32', amax, amax, k.shflSync('bfly', k.reg('f32'), amax, offset), { nan: true });
  const d = k.div('f32', k.reg('f32'), amax, 127, 'rn');
  // 127 / max, or 0 for a block of zeros (its codes are then 0).
  const inverse = k.div('f32', k.reg('f32'), 127, amax, 'rn');
  const zero = k.setp('eq', 'f32', k.reg('pred'), amax, 0);
  k.selp('f32', inverse, 0, inverse, zero);
  const codes = values.map((value) =>
    k.cvt('s32', 'f32', k.reg('u32'), k.mul('f32', k.reg('f32'), value, inverse, { rnd: 'rn' }), {
      rnd: 'rni',
    }),
  );
  // Four codes in one word's bytes, first in the lowest.
  const pack = (a: R32, b: R32, c: R32, e: R32) =>
    k.prmt(k.reg('u32'), k.prmt(k.reg('u32'), a, b, 0x0040), k.prmt(k.reg('u32'), c, e, 0x0040), 0x5410);
  const [c0, c1, c2, c3, c4, c5, c6, c7] = codes as [R32, R32, R32, R32, R32, R32, R32, R32];
  const words = o.q4
    ? [pack(c0, c2, c4, c6), pack(c1, c3, c5, c7)]
    : [pack(c0, c1, c2, c3), pack(c4, c5, c6, c7)];
  // Block b = rem / 4 of row r: its codes at (r·blocks + b)·32 + quarter·8, its d and z at (r·blocks + b)·4.
  const entry = k.add(
    'u32',
    k.reg('u32'),
    k.mulLo('u32', k.reg('u32'), r, o.xBlocks),
    k.shr('u32', k.reg('u32'), rem, 2),
  );
  k.predicated(inside, () =>
    k.stShared('b32', k.madLo('u32', k.reg('u32'), item, 8, o.shared.codes), words as unknown as Vec2<R32>),
  );
  // Σq over the block: −8·Σq for centred codes, Σ x̃ = d·Σq for offsets.
  let z: R32 | F32 | undefined;
  if (o.centred || o.offsetted) {
    const sum = k.mov('b32', k.reg('u32'), 0);
    for (const code of codes) k.add('s32', sum, sum, code);
    for (const offset of [1, 2]) k.add('s32', sum, sum, k.shflSync('bfly', k.reg('u32'), sum, offset));
    z = o.centred
      ? k.mulLo('s32', k.reg('u32'), sum, -8)
      : k.mul('f32', k.reg('f32'), k.cvt('f32', 's32', k.reg('f32'), sum, { rnd: 'rn' }), d, { rnd: 'rn' });
  }
  const lead = k.and(
    'pred',
    k.reg('pred'),
    inside,
    k.setp('eq', 'u32', k.reg('pred'), k.and('b32', k.reg('u32'), rem, 3), 0),
  );
  k.predicated(lead, () => {
    const at4 = k.mulLo('u32', k.reg('u32'), entry, 4);
    k.stShared('f32', k.add('u32', k.reg('u32'), at4, o.shared.d), d);
    if (z) k.stShared('b32', k.add('u32', k.reg('u32'), at4, o.shared.z), z);
  });
}

/** The columns per warp each measured shape (the qgemvVariant option) asks for here: 16-byte chunks throughout. */
const COLUMNS: Readonly<Record<QgemvShapeVariant, number>> = { b: 4, c: 2, d: 8 };

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
  const chosen = forced ? COLUMNS[forced] : (bits === 8 ? 8 : 4) / (pair ? 2 : 1);
  return Math.max(1, Math.min(chosen, Math.floor(8 / (rows * (pair ? 2 : 1)))));
}

/**
 * Launches the int8 GEMV for x [M, K] against one weight (y = x·Wᵀ + beta·c)
 * or a gate·up pair, where the `qgemvActivations: 'int8'` switch asks and
 * the kernel reads the case (format, no zero points, 16-byte aligned codes,
 * x within shared memory); false where it does not, for the caller's kernel.
 */
export function encodeQuantizedGemvInt8(
  encoder: KernelEncoder,
  ops: { x: Operand; weights: readonly QgemvWeight[]; c: Operand | undefined; y: Operand },
  attrs: { format: QuantFormat; beta: number },
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
  const applies =
    encoder.tuning.qgemvActivations === 'int8' &&
    qgemvInt8Reads(attrs.format) &&
    weights.every((w) => w.packed.ptr % 16n === 0n && (layout.zeroPoints ? w.zeros === undefined : true)) &&
    sharedBytes <= limit;
  if (!applies) return false;
  if (m === 0 || n === 0) return true;
  const pair = weights.length === 2;
  const forced = encoder.tuning.qgemvVariant === 'a' ? undefined : encoder.tuning.qgemvVariant;
  const cols = qgemvInt8Columns(forced, rows, pair, layout.bits);
  const slices =
    encoder.tuning.qgemvSlices ??
    qgemvSlicesFor(n, kDim, { cols, words: 4 }, layout.perWord, encoder.device.multiprocessors);
  const first = weights[0]!;
  const config: QgemvInt8Config = {
    format: attrs.format,
    pair,
    withC: c !== undefined,
    types: { act: storageOf(x), scale: storageOf(first.scales) },
    rows,
    stagedX,
    cols,
    slices,
  };
  encoder.launch({
    key: qgemvInt8Key(config),
    module: () => qgemvInt8Module(config),
    entry: QGEMV_INT8_ENTRY,
    grid: [Math.ceil(n / ((cols * WARPS) / slices)), Math.ceil(m / rows), 1],
    block: THREADS,
    sharedBytes,
    args: qgemvArgs(ops, { m, n, k: kDim, beta: attrs.beta }),
  });
  return true;
}
