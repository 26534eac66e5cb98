import {
  DEFAULT_QGEMV_VARIANT,
  FLOAT,
  type QuantActivations,
  type QuantFormat,
  quantizedMatmul,
} from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type KernelEncoder, type Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type R32, type R64 } from '../ptx/operands.js';
import { checkElementCount } from './common.js';
import { loadParams } from './entryParams.js';
import { blockInverseRms } from './foldedNorm.js';
import { below, warpColumn, warpSum } from './gemv.js';
import { normedScratch } from './normalization.js';
import {
  checkRows,
  checkZeros,
  codesOf,
  fixedBias,
  groupAt,
  isQ5g32,
  layoutOf,
  NORM_PARAMS,
  QUANT_DOT_ENTRY,
  QUANT_DOT_MAX_ROWS,
  QUANT_TILE_ENTRY,
  type QuantDotVariant,
  type QuantVariant,
  quantDotKey,
  quantTileKey,
  rowGeometry,
  storeOutput,
  THREADS,
  WARPS,
  zeroBias,
} from './quantizedCodes.js';
import { encodeQuantizedGemv, qgemvReads } from './quantizedGemv.js';
import { encodeQuantizedGemvInt8 } from './quantizedGemvInt8.js';
import { encodeQuantizedMma, qmmaApplies } from './quantizedMma.js';
import { q5kCodes } from './quantizedQ5k.js';
import { int8At, q6kCodes, q6kScale } from './quantizedQ6k.js';
import { subBlockScaleOffset } from './quantizedSubBlocks.js';
import { quantTileModule, TILE_M, TILE_N } from './quantizedTile.js';
import { loadAsF32, loadOneAsF32, STORAGE_BYTES, storageOf } from './storage.js';

// quantizedMatmul: y = x · dequant(W)ᵀ (+ beta · c) with W [N, K] stored as
// int8 or 4-bit codes (core's quant/layout.ts has the bits). Decoding reads
// the codes once, so the small-M kernel is shaped around them: warp w of a
// block owns output column n, its lanes read the row's 16-byte words (16
// int8 or 32 nibbles each) with `.v4` loads through the non-coherent cache,
// the block stages the matching x in shared memory, each lane turns its
// codes into exact f32s in registers (the code ORed into the mantissa of
// 2^23, then 2^23 + zero subtracted: no int-to-float convert), and the
// warp sums its lanes with shuffles. Group-scaled formats sum each 16-byte
// word before its group scale multiplies it (q8g16's words are one group,
// q8g32's two words one); q8 scales the row's sum once; q4g32a also sums
// the word's x and subtracts offset · Σx, and q4k likewise with its word's
// sub-block scale d · sc and offset dmin · m formed from the super-block's
// d, dmin and 6-bit sc, m as the word is loaded (q5k too, its lane reading
// its sub-block's word of high bits beside its 16 bytes; q5g32 and q5g32a
// read their group's as q4g32 and q4g32a read the rest); q6k's lane reads its
// word's 8 bytes of high pairs too (a super-block's 64 contiguous over its
// eight lanes, as its 128 bytes of nibbles), and its two 16-weight
// sub-blocks are summed apart, each scaled by f32(d · sc). More rows of x
// go to a tiled kernel that dequantizes a 64-column × 32-k tile of W into
// shared memory per step and computes a 64 × 64 tile of y from it.

/**
 * Warp w of block x owns column n = x · 8 + w for every row of x (up to
 * QUANT_DOT_MAX_ROWS). The block walks K in tiles of 32 code words per
 * row: lane l reads word l of the tile (its codes, scale and zero point),
 * the block stages the tile's x in shared memory (coalesced, widened to f32,
 * 0 past K), and lane l reads its word's 32 (q4) or 16 (q8) x values from
 * there. In global memory those lie 64 or 128 bytes apart from lane to lane,
 * which would cost a cache line per lane and load; in shared memory each
 * lane's 16-byte units are XOR-swizzled so that a `.v4` read of 8 lanes
 * touches 8 different bank groups. The warp's shuffles give every lane
 * every row's sum, and lane r stores row r.
 */
export function quantDotModule(v: QuantDotVariant): PtxModule {
  checkRows(v.rows);
  checkZeros(v);
  const layout = layoutOf(v.format);
  const { act, scale } = v.types;
  const actBytes = STORAGE_BYTES[act];
  const scaleBytes = STORAGE_BYTES[scale];
  /** Weights per 16-byte code word, 16-byte units of x per word, x elements per tile. */
  const perChunk = 4 * layout.perWord;
  const units = perChunk / 4;
  const tileElems = 32 * perChunk;
  /** Lanes of one 8-lane phase of a `.v4` shared read that share a chunk's 8-unit bank cycle. */
  const lanesPerCycle = 8 / units;
  const m = new PtxModule();
  m.entry(
    QUANT_DOT_ENTRY,
    NORM_PARAMS,
    (k, p) => {
      const { n, k: kDim, m: rowsTotal } = loadParams(k, p, 'n', 'k', 'm');
      const xTile = k.sharedArray('xTile', 'f32', v.rows * tileElems, 16);
      const base = k.sharedAddress(xTile);
      const { tid, lane, col } = warpColumn(k, WARPS);
      const { rowWords, groups, zeroWords } = rowGeometry(k, layout, kDim);
      const q6k = layout.bits === 6;
      const q5k = v.format === 'q5k';
      const q5g = isQ5g32(layout);
      // q6k, q5k: 8 chunks of 32 weights per super-block of 48 or 40 words (32 of nibbles, then the high bits);
      // q5g32: a chunk per group, its nibbles where q4g32's lie (the high words follow them).
      const chunks =
        q6k || q5k
          ? k.shl('b32', k.reg('u32'), groups!, 3)
          : q5g
            ? groups!
            : k.shr('u32', k.reg('u32'), rowWords, 2);
      // Columns past N read the last row of W (never stored): every warp takes part in the barriers.
      const wRow = k.min('u32', k.reg('u32'), col, k.sub('u32', k.reg('u32'), n, 1));
      const lastRow = k.sub('u32', k.reg('u32'), rowsTotal, 1);
      const x = k.globalPointer(p.x);
      const xRows: R64[] = Array.from({ length: v.rows }, (_, r) => {
        const row = k.min('u32', k.reg('u32'), k.mov('u32', k.reg('u32'), r), lastRow);
        return k.elementAddress(x, k.mulLo('u32', k.reg('u32'), row, kDim), actBytes);
      });
      // Lane l's word: chunk l of the tile; q6k's (q5k's) chunk l is nibble word 4 · (l mod 8) of super-block l / 8.
      const laneWord = () =>
        q6k || q5k
          ? k.madLo(
              'u32',
              k.reg('u32'),
              k.shr('u32', k.reg('u32'), lane, 3),
              q6k ? 48 : 40,
              k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), lane, 7), 2),
            )
          : k.shl('b32', k.reg('u32'), lane, 2);
      const wPtr = k.elementAddress(
        k.globalPointer(p.packed),
        k.madLo('u32', k.reg('u32'), wRow, rowWords, laneWord()),
        4,
      );
      // q6k: its high pairs, word 32 + 2 · (l mod 8) of the super-block; a tile is 4 super-blocks.
      const highPtr = q6k
        ? k.elementAddress(
            wPtr,
            k.sub(
              'u32',
              k.reg('u32'),
              32,
              k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), lane, 7), 1),
            ),
            4,
          )
        : undefined;
      // q5k: its high bits, word 32 + l mod 8 of the super-block.
      const q5kHighPtr = q5k
        ? k.elementAddress(
            wPtr,
            k.sub(
              'u32',
              k.reg('u32'),
              32,
              k.mulLo('u32', k.reg('u32'), k.and('b32', k.reg('u32'), lane, 7), 3),
            ),
            4,
          )
        : undefined;
      // q5g32: its group's high word, word 4G + l of the row: a tile's 32 lanes read 128 contiguous bytes.
      const q5gHighPtr = q5g
        ? k.elementAddress(
            k.globalPointer(p.packed),
            k.add(
              'u32',
              k.reg('u32'),
              k.madLo('u32', k.reg('u32'), wRow, rowWords, k.shl('b32', k.reg('u32'), groups!, 2)),
              lane,
            ),
            4,
          )
        : undefined;
      const tileBytes = q6k ? 4 * 192 : q5k ? 4 * 160 : 32 * 16;
      const { scales, zeros, offsets } = loadParams(k, p, 'scales', 'zeros', 'offsets');
      const scaleRow = groups ? k.mulLo('u32', k.reg('u32'), wRow, groups) : wRow;
      const zeroRow = zeroWords ? k.mulLo('u32', k.reg('u32'), wRow, zeroWords) : undefined;
      // Where lane l finds unit j of its word: l · units + (j XOR swizzle), swizzle = (l / lanesPerCycle) mod units.
      const swizzle = k.and(
        'b32',
        k.reg('u32'),
        k.shr('u32', k.reg('u32'), lane, Math.log2(lanesPerCycle)),
        units - 1,
      );
      const laneBase = k.madLo('u32', k.reg('u32'), lane, units * 16, base);
      const unitAt = Array.from({ length: units }, (_, j) =>
        k.madLo('u32', k.reg('u32'), k.xor('b32', k.reg('u32'), swizzle, j), 16, laneBase),
      );
      // Staging: thread t widens x elements 4t … 4t + 3 of the tile (q8 tiles take half the threads).
      const stager = k.shl('b32', k.reg('u32'), tid, 2);
      const stageUnit = tid;
      const stageLane = k.shr('u32', k.reg('u32'), stageUnit, Math.log2(units));
      const stageSwizzle = k.and(
        'b32',
        k.reg('u32'),
        k.shr('u32', k.reg('u32'), stageLane, Math.log2(lanesPerCycle)),
        units - 1,
      );
      const stageAt = k.madLo(
        'u32',
        k.reg('u32'),
        k.or(
          'b32',
          k.reg('u32'),
          k.and('b32', k.reg('u32'), stageUnit, ~(units - 1) >>> 0),
          k.xor('b32', k.reg('u32'), k.and('b32', k.reg('u32'), stageUnit, units - 1), stageSwizzle),
        ),
        16,
        base,
      );
      const stages = below(k, stager, tileElems);
      const acc = k.regs('f32', v.rows);
      for (const a of acc) k.mov('f32', a, 0);
      // A folded norm: each stager's sums of x² per row, and the norm's weights beside x.
      const squares = v.norm ? acc.map(() => k.mov('f32', k.reg('f32'), 0)) : undefined;
      const normWeight = v.norm ? k.globalPointer(p.normWeight) : undefined;
      // A tile's code word, scale and zero point are loaded one tile ahead, so
      // that they are in flight while the tile before is staged and summed.
      // negOffset: q4g32a's −offset of the word's group.
      // q6k: high, its word's high pairs, and s2, the scale of its second sub-block.
      type TileCodes = { words: R32[]; s: F32; bias: F32; negOffset: F32; high: R32[]; s2: F32 | undefined };
      const tileCodes = (): TileCodes => ({
        words: k.regs('u32', 4),
        s: k.reg('f32'),
        bias: k.reg('f32'),
        negOffset: k.reg('f32'),
        high: q6k ? k.regs('u32', 2) : q5k || q5g ? k.regs('u32', 1) : [],
        s2: q6k ? k.reg('f32') : undefined,
      });
      const loadTile = (c: R32, into: TileCodes) => {
        for (const w of [...into.words, ...into.high]) k.mov('b32', w, 0);
        k.predicated(below(k, c, chunks), () => {
          k.ldGlobal('b32', into.words as unknown as Vec4<R32>, wPtr, { nc: true });
          if (highPtr) k.ldGlobal('b32', into.high as unknown as Vec2<R32>, highPtr, { nc: true });
          if (q5kHighPtr) k.ldGlobal('b32', into.high[0]!, q5kHighPtr, { nc: true });
          if (q5gHighPtr) k.ldGlobal('b32', into.high[0]!, q5gHighPtr, { nc: true });
        });
        k.add('u64', wPtr, wPtr, tileBytes);
        if (highPtr) k.add('u64', highPtr, highPtr, tileBytes);
        if (q5kHighPtr) k.add('u64', q5kHighPtr, q5kHighPtr, tileBytes);
        if (q5gHighPtr) k.add('u64', q5gHighPtr, q5gHighPtr, 32 * 4);
        if (layout.scalePerRow) return;
        // The group of the word's first weight (c · perChunk); past the row, the last word's.
        const last = k.min('u32', k.reg('u32'), c, k.sub('u32', k.reg('u32'), chunks, 1));
        const g = groupAt(k, layout, k.mulLo('u32', k.reg('u32'), last, perChunk), groups!);
        const at = k.add('u32', k.reg('u32'), scaleRow, g);
        if (q6k) {
          // Sub-blocks 2j and 2j + 1 (j = c mod 8): the half j mod 2 of zeros word j / 2 of super-block g.
          const j = k.and('b32', k.reg('u32'), last, 7);
          const word = k.add(
            'u32',
            k.reg('u32'),
            zeroRow!,
            k.madLo('u32', k.reg('u32'), g, 4, k.shr('u32', k.reg('u32'), j, 1)),
          );
          const pair = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(zeros, word, 4), { nc: true });
          const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), j, 1), 4);
          const d = loadOneAsF32(k, scale, k.elementAddress(scales, at, scaleBytes));
          k.mov('f32', into.s, q6kScale(k, d, int8At(k, pair, shift)));
          k.mov('f32', into.s2!, q6kScale(k, d, int8At(k, pair, k.add('u32', k.reg('u32'), shift, 8))));
          return;
        }
        if (layout.subBlockScales) {
          // q4k, q5k: a word is one sub-block, j = c mod 8 of super-block g.
          const words = k.madLo('u32', k.reg('u32'), g, 3, zeroRow!);
          const sub = k.and('b32', k.reg('u32'), last, 7);
          const q4k = subBlockScaleOffset(k, scale, { scales, offsets, zeros }, { scale: at, words, sub });
          k.mov('f32', into.s, q4k.scale);
          k.neg('f32', into.negOffset, q4k.offset);
          return;
        }
        k.mov('f32', into.s, loadOneAsF32(k, scale, k.elementAddress(scales, at, scaleBytes)));
        if (v.zeros) k.mov('f32', into.bias, zeroBias(k, zeros, zeroRow!, g));
        if (layout.offsets) {
          const offset = loadOneAsF32(k, scale, k.elementAddress(offsets, at, scaleBytes));
          k.neg('f32', into.negOffset, offset);
        }
      };
      const current = tileCodes();
      loadTile(lane, current);
      const first = k.reg('u32');
      k.forRange(first, 0, chunks, 32, () => {
        const next = tileCodes();
        loadTile(k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), first, 32), lane), next);
        const { words } = current;
        const s = layout.scalePerRow ? undefined : current.s;
        const bias: F32 | number = v.zeros ? current.bias : fixedBias(layout);
        k.barSync(); // the previous tile's x has been read
        k.ifThen(stages, () => {
          const kk = k.madLo('u32', k.reg('u32'), first, perChunk, stager);
          // Four elements from kk, 0 past K: one vector load, or elements.
          const quad = (from: R64) => {
            const xs = k.regs('f32', 4);
            const at = k.elementAddress(from, kk, actBytes);
            if (v.vecX) loadAsF32(k, act, xs, at, { ok: below(k, kk, kDim) });
            else {
              xs.forEach((reg, j) => {
                const inside = below(k, k.add('u32', k.reg('u32'), kk, j), kDim);
                loadAsF32(k, act, [reg], addr(at, j * actBytes), { ok: inside });
              });
            }
            return xs;
          };
          const weights = normWeight ? quad(normWeight) : undefined;
          xRows.forEach((xRow, r) => {
            const xs = quad(xRow);
            if (weights)
              xs.forEach((value, j) => {
                k.fma('f32', squares![r]!, value, value, squares![r]!);
                k.mul('f32', value, value, weights[j]!, { rnd: 'rn' });
              });
            k.stShared('f32', addr(stageAt, r * tileElems * 4), xs as unknown as Vec4<F32>);
          });
        });
        k.barSync();
        const sums = layout.scalePerRow ? acc : acc.map(() => k.mov('f32', k.reg('f32'), 0));
        // q6k: words 2 and 3 are the second sub-block, summed apart.
        const sums2 = q6k ? acc.map(() => k.mov('f32', k.reg('f32'), 0)) : undefined;
        // q4g32a: Σx of the word, which its offset multiplies.
        const xSums = layout.offsets ? acc.map(() => k.mov('f32', k.reg('f32'), 0)) : undefined;
        words.forEach((word, i) => {
          // q6k: word i's high pairs, from the upper half of each byte for odd i.
          const high = () => current.high[i >> 1]!;
          // q5k: word i's high bits at bits 2i and 2i + 1 of each byte of its sub-block's high word.
          const codes = q6k
            ? q6kCodes(k, word, i & 1 ? k.shr('b32', k.reg('u32'), high(), 4) : high())
            : q5k || q5g
              ? q5kCodes(
                  k,
                  word,
                  i ? k.shr('b32', k.reg('u32'), current.high[0]!, 2 * i) : current.high[0]!,
                  layout.offset,
                )
              : codesOf(k, layout, word, bias);
          const wordSums = sums2 && i >= 2 ? sums2 : sums;
          for (let r = 0; r < v.rows; r++) {
            // Word i of the chunk covers units i · perWord / 4 … of the lane's x.
            for (let q = 0; q < layout.perWord / 4; q++) {
              const xs = k.regs('f32', 4);
              const unit = (i * layout.perWord) / 4 + q;
              k.ldShared('f32', xs as unknown as Vec4<F32>, addr(unitAt[unit]!, r * tileElems * 4));
              for (let j = 0; j < 4; j++) k.fma('f32', wordSums[r]!, codes[q * 4 + j]!, xs[j]!, wordSums[r]!);
              if (xSums)
                for (let j = 0; j < 4; j++) k.add('f32', xSums[r]!, xSums[r]!, xs[j]!, { rnd: 'rn' });
            }
          }
        });
        if (s) {
          const scaleOf = s;
          sums.forEach((sum, r) => {
            k.fma('f32', acc[r]!, sum, scaleOf, acc[r]!);
          });
        }
        sums2?.forEach((sum, r) => {
          k.fma('f32', acc[r]!, sum, current.s2!, acc[r]!);
        });
        xSums?.forEach((xSum, r) => {
          k.fma('f32', acc[r]!, xSum, current.negOffset, acc[r]!);
        });
        [...current.words, ...current.high].forEach((w, i) => {
          k.mov('b32', w, [...next.words, ...next.high][i]!);
        });
        if (q6k) k.mov('f32', current.s2!, next.s2!);
        if (!layout.scalePerRow) k.mov('f32', current.s, next.s);
        if (v.zeros) k.mov('f32', current.bias, next.bias);
        if (layout.offsets) k.mov('f32', current.negOffset, next.negOffset);
      });
      for (const a of acc) warpSum(k, [a]);
      if (squares) {
        const invRms = blockInverseRms(k, squares, { tid, kDim, eps: k.ldParam(p.eps), warps: WARPS });
        acc.forEach((a, r) => {
          k.mul('f32', a, a, invRms[r]!, { rnd: 'rn' });
        });
      }
      const rowScale = layout.scalePerRow
        ? loadOneAsF32(k, scale, k.elementAddress(scales, wRow, scaleBytes))
        : undefined;
      const out = { y: k.globalPointer(p.y), c: k.globalPointer(p.c), beta: k.ldParam(p.beta), n };
      // Lane r stores row r, so the stores go out in parallel.
      acc.forEach((a, r) => {
        const row = k.mov('u32', k.reg('u32'), r);
        const mine = k.and(
          'pred',
          k.reg('pred'),
          k.and('pred', k.reg('pred'), k.setp('eq', 'u32', k.reg('pred'), lane, r), below(k, row, rowsTotal)),
          below(k, col, n),
        );
        k.ifThen(mine, () => {
          const sum = rowScale ? k.mul('f32', k.reg('f32'), a, rowScale, { rnd: 'rn' }) : a;
          storeOutput(k, v, out, row, col, sum);
        });
      });
    },
    { maxThreadsPerBlock: THREADS, minBlocksPerSm: v.rows === 1 ? 4 : v.rows === 2 ? 2 : 1 },
  );
  return m;
}

/** The formats whose products of up to 4 rows take quantizedGemv.ts's kernel unless asked otherwise. */
const GEMV_BY_DEFAULT: ReadonlySet<QuantFormat> = new Set(['q4g32', 'q4g128', 'q8g32', 'q8g32a']);

const aligned16 = (ptr: bigint) => ptr % 16n === 0n;

function encodeQuantized(
  encoder: KernelEncoder,
  inputs: readonly (Operand | undefined)[],
  y: Operand,
  attrs: { format: QuantFormat; beta: number; eps: number; activations: QuantActivations },
): void {
  const [xIn, packed, scales, zeros, c, offsets, normWeight] = inputs;
  const [m, kDim] = xIn!.shape as [number, number];
  const n = y.shape[1]!;
  if (m === 0 || n === 0) return;
  checkElementCount(quantizedMatmul.name, 'x', xIn!.size);
  checkElementCount(quantizedMatmul.name, 'packed', packed!.size * 8);
  checkElementCount(quantizedMatmul.name, 'y', y.size);
  const norm = normWeight ? { weight: normWeight, eps: attrs.eps } : undefined;
  // One row of 4-bit codes with K in whole groups: the tensor-core GEMV where the qgemvMma switch asks.
  const problem = { m, k: kDim, format: attrs.format, x: xIn!.ptr };
  const mma = encoder.tuning.qgemvMma === 'on' && qmmaApplies(encoder.device, problem);
  // The small-M kernels: the int8 GEMV, quantizedGemv.ts's, or this file's dot kernel. The int8 one
  // and the dot kernel fold a norm; the others take x normed first.
  const byDefault = GEMV_BY_DEFAULT.has(attrs.format) ? DEFAULT_QGEMV_VARIANT : 'a';
  const gemv = encoder.tuning.qgemvVariant ?? byDefault;
  const viaGemv = m <= QUANT_DOT_MAX_ROWS && gemv !== 'a' && qgemvReads(attrs.format);
  const viaDot = m <= QUANT_DOT_MAX_ROWS && !viaGemv && !mma;
  if (
    !mma &&
    m <= QUANT_DOT_MAX_ROWS &&
    encodeQuantizedGemvInt8(
      encoder,
      { x: xIn!, weights: [{ packed: packed!, scales: scales!, zeros, offsets }], c, y, norm },
      attrs,
    )
  )
    return;
  const x = norm && !viaDot ? normedScratch(encoder, xIn!, norm.weight, norm.eps) : xIn;
  const variant: QuantVariant = {
    format: attrs.format,
    zeros: zeros !== undefined && layoutOf(attrs.format).zeroPoints,
    withC: c !== undefined,
    types: { act: storageOf(x!), scale: storageOf(scales!) },
  };
  const args = {
    x: x!,
    packed: packed!,
    scales: scales!,
    // Unused without them; any valid address.
    zeros: zeros ?? packed!,
    c: c ?? y,
    y,
    offsets: offsets ?? scales!,
    m,
    n,
    k: kDim,
    beta: attrs.beta,
  };
  // Small M: quantizedGemv.ts's kernel for 4-bit weights, this file's for
  // int8 (on an H100, 1×4096×4096: q4g32 8.8 against 8.5 µs, but the decode
  // shapes 1×2048×5632 6.5 against 8.2 µs and 1×5632×2048 7.3 against 9.4;
  // q8 14.8 against 10.8), unless the qgemvVariant option picks one ('a': this file's).
  if (mma) {
    const weight = { packed: packed!, scales: scales!, zeros, offsets };
    encodeQuantizedMma(
      encoder,
      { x: x!, weights: [weight], c, y },
      { beta: attrs.beta, format: problem.format },
    );
    return;
  }
  // By default q4g32, q4g128, q8g32 and q8g32a take quantizedGemv.ts's kernel (on an H200, 1×4096×14336
  // q8g32 24.6 against 27.1 µs, 1×4096×11008 q8g32a 20.8 against 25.4); the other formats it reads
  // (q4g32a 18.6 against 23.2 µs, q4k 24.9 against 25.4, q8g16 unmeasured) where the qgemvVariant option asks.
  if (viaGemv) {
    const weight = { packed: packed!, scales: scales!, zeros, offsets };
    encodeQuantizedGemv(encoder, gemv, { x: x!, weights: [weight], c, y }, attrs);
    return;
  }
  if (viaDot) {
    const dot: QuantDotVariant = {
      ...variant,
      rows: m,
      vecX: kDim % 32 === 0 && aligned16(x!.ptr) && (!norm || aligned16(norm.weight.ptr)),
      ...(norm ? { norm: true } : {}),
    };
    encoder.launch({
      key: quantDotKey(dot),
      module: () => quantDotModule(dot),
      entry: QUANT_DOT_ENTRY,
      grid: [Math.ceil(n / WARPS), 1, 1],
      block: THREADS,
      // The norm's weight and eps, unused without one (any valid address).
      args: { ...args, normWeight: norm?.weight ?? x!, eps: norm?.eps ?? 0 },
    });
    return;
  }
  encoder.launch({
    key: quantTileKey(variant),
    module: () => quantTileModule(variant),
    entry: QUANT_TILE_ENTRY,
    grid: [Math.ceil(n / TILE_N), Math.ceil(m / TILE_M), 1],
    block: THREADS,
    args,
  });
}

export const QUANTIZED_KERNELS: readonly AnyCudaKernel[] = [
  cudaKernel(
    quantizedMatmul,
    (encoder, { inputs, outputs, attrs }) => {
      encodeQuantized(encoder, inputs, outputs[0]!, attrs);
    },
    // x, c and y in f32, f16 or bf16; scales in any of them (widened as loaded, summed in f32).
    { dtypes: FLOAT },
  ),
];
