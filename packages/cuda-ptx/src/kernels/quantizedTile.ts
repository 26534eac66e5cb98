import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32 } from '../ptx/operands.js';
import { loadParams } from './entryParams.js';
import { below } from './gemv.js';
import {
  checkZeros,
  codesOf,
  fixedBias,
  groupAt,
  isQ5g32,
  layoutOf,
  PARAMS,
  QUANT_TILE_ENTRY,
  type QuantVariant,
  rowGeometry,
  storeOutput,
  THREADS,
  zeroBias,
} from './quantizedCodes.js';
import { q5kCodes } from './quantizedQ5k.js';
import { int8At, q6kCodes, q6kScale } from './quantizedQ6k.js';
import { subBlockScaleOffset } from './quantizedSubBlocks.js';
import { loadAsF32, loadOneAsF32, STORAGE_BYTES } from './storage.js';

// quantizedMatmul's tiled kernel, for more rows of x than the streaming
// kernel takes (quantized.ts has the design of both).

export const TILE_M = 64;
export const TILE_N = 64;
const TILE_K = 32;
/** Shared rows padded by 4 floats: `.v4` reads stay aligned and transposing stores spread over banks. */
const PITCH_M = TILE_M + 4;
const PITCH_N = TILE_N + 4;

/**
 * Block (x, y) computes y[64y … +64, 64x … +64], thread t a 4 × 4 micro-tile
 * (rows 4 · (t / 16), columns 4 · (t % 16)). Each 32-k step stages x as
 * xs[k][m] (thread t: row t / 4, k 8 · (t % 4) … +8) and W dequantized as
 * ws[k][n] (thread t: column t / 4, its quarter of the column's 32 codes),
 * then every thread takes 32 steps of 4 + 4 shared values and 16 FMAs.
 */
export function quantTileModule(v: QuantVariant): PtxModule {
  checkZeros(v);
  const layout = layoutOf(v.format);
  const { act, scale } = v.types;
  const actBytes = STORAGE_BYTES[act];
  const scaleBytes = STORAGE_BYTES[scale];
  /** u32 words of one column's 32 codes each thread takes: 1 nibble word or 2 byte words. */
  const wordsPerThread = layout.bits === 8 ? 2 : 1;
  const m = new PtxModule();
  m.entry(
    QUANT_TILE_ENTRY,
    PARAMS,
    (k, p) => {
      const { m: mDim, n, k: kDim } = loadParams(k, p, 'm', 'n', 'k');
      const xs = k.sharedArray('xs', 'f32', TILE_K * PITCH_M, 16);
      const ws = k.sharedArray('ws', 'f32', TILE_K * PITCH_N, 16);
      const xBase = k.sharedAddress(xs);
      const wBase = k.sharedAddress(ws);
      const tid = k.tid();
      const row0 = k.mulLo('u32', k.reg('u32'), k.ctaid('y'), TILE_M);
      const col0 = k.mulLo('u32', k.reg('u32'), k.ctaid(), TILE_N);
      const { rowWords, groups, zeroWords } = rowGeometry(k, layout, kDim);
      const quarter = k.and('b32', k.reg('u32'), tid, 3);
      // Thread t's byte offset in a staging tile of `pitch` floats per k: k 8 · (t % 4), mn t / 4.
      const stagingSlot = (pitch: number, base: R32) =>
        k.madLo(
          'u32',
          k.reg('u32'),
          k.shl('b32', k.reg('u32'), quarter, 3),
          pitch * 4,
          k.madLo('u32', k.reg('u32'), k.shr('u32', k.reg('u32'), tid, 2), 4, base),
        );

      // Staging x: row t / 4 of the tile, k 8 · (t % 4) … +8 of the step; rows past M read as 0.
      const xRow = k.add('u32', k.reg('u32'), row0, k.shr('u32', k.reg('u32'), tid, 2));
      const xRowOk = below(k, xRow, mDim);
      const xPtr = k.elementAddress(
        k.globalPointer(p.x),
        k.madLo('u32', k.reg('u32'), xRow, kDim, k.shl('b32', k.reg('u32'), quarter, 3)),
        actBytes,
      );
      const xAt = stagingSlot(PITCH_M, xBase);
      const xK = k.shl('b32', k.reg('u32'), quarter, 3);

      // Staging W: column t / 4 (clamped to N − 1: read, never stored), its codes
      // 8 · (t % 4) … +8 (q4: word t % 4 of the step's 16 bytes; q8: words 2 · (t % 4) and +1).
      const wCol = k.min(
        'u32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), col0, k.shr('u32', k.reg('u32'), tid, 2)),
        k.sub('u32', k.reg('u32'), n, 1),
      );
      const wPtr = k.elementAddress(
        k.globalPointer(p.packed),
        k.madLo('u32', k.reg('u32'), wCol, rowWords, k.mulLo('u32', k.reg('u32'), quarter, wordsPerThread)),
        4,
      );
      const wAt = stagingSlot(PITCH_N, wBase);
      const { scales, zeros, offsets } = loadParams(k, p, 'scales', 'zeros', 'offsets');
      const scaleRow = groups ? k.mulLo('u32', k.reg('u32'), wCol, groups) : wCol;
      const zeroRow = zeroWords ? k.mulLo('u32', k.reg('u32'), wCol, zeroWords) : undefined;
      const rowScale = layout.scalePerRow
        ? loadOneAsF32(k, scale, k.elementAddress(scales, wCol, scaleBytes))
        : undefined;

      // q6k: the step's 32 k are chunk c = (kStep / 32) mod 8 of super-block g = kStep / 256; this thread's
      // 8 codes are nibble word 4c + t % 4 of it, with the high pairs of word 32 + 2c + (t % 4) / 2 (the
      // upper half of its bytes for odd t), and lie in sub-block 2c + (t % 4) / 2.
      const q6k = layout.bits === 6;
      const q6kStager = () => {
        const packedBase = k.globalPointer(p.packed);
        const q6kRow = k.mulLo('u32', k.reg('u32'), wCol, rowWords);
        const highShift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), quarter, 1), 2);
        const half = k.shr('u32', k.reg('u32'), quarter, 1);
        return () => {
          const g = k.shr('u32', k.reg('u32'), kStep, 8);
          const c = k.and('b32', k.reg('u32'), k.shr('u32', k.reg('u32'), kStep, 5), 7);
          const superAt = k.madLo('u32', k.reg('u32'), g, 48, q6kRow);
          const lowAt = k.add('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), c, 4, superAt), quarter);
          const highAt = k.add(
            'u32',
            k.reg('u32'),
            k.madLo('u32', k.reg('u32'), c, 2, superAt),
            k.add('u32', k.reg('u32'), half, 32),
          );
          const low = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(packedBase, lowAt, 4), { nc: true });
          const high = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(packedBase, highAt, 4), { nc: true });
          const sub = k.madLo('u32', k.reg('u32'), c, 2, half);
          const scaleWord = k.add(
            'u32',
            k.reg('u32'),
            k.madLo('u32', k.reg('u32'), g, 4, zeroRow!),
            k.shr('u32', k.reg('u32'), sub, 2),
          );
          const scWord = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(zeros, scaleWord, 4), { nc: true });
          const sc = int8At(k, scWord, k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), sub, 3), 3));
          const d = loadOneAsF32(
            k,
            scale,
            k.elementAddress(scales, k.add('u32', k.reg('u32'), scaleRow, g), scaleBytes),
          );
          const s = q6kScale(k, d, sc);
          const codes = q6kCodes(k, low, k.shr('b32', k.reg('u32'), high, highShift));
          codes.forEach((code, j) => {
            // ggml's value: f32(f32(d · sc) · (q − 32)).
            const w = k.mul('f32', k.reg('f32'), code, s, { rnd: 'rn' });
            k.stShared('f32', addr(wAt, j * PITCH_N * 4), w);
          });
        };
      };
      const stageQ6k = q6k ? q6kStager() : undefined;
      // q5k: the step's 32 k are sub-block c = (kStep / 32) mod 8 of super-block g = kStep / 256; this
      // thread's 8 codes are nibble word 4c + t % 4 of it, with the high bits of word 32 + c shifted by 2 · (t % 4).
      const q5k = v.format === 'q5k';
      const q5kRow = q5k ? k.mulLo('u32', k.reg('u32'), wCol, rowWords) : undefined;
      const q5kShift = q5k ? k.shl('b32', k.reg('u32'), quarter, 1) : undefined;
      // q5g32: the step's 32 k are group kStep / 32, its nibbles read as q4g32's, its high bits word 4G + kStep / 32
      // of the row shifted by 2 · (t % 4).
      const q5g = isQ5g32(layout);
      const q5gHigh = q5g
        ? k.madLo('u32', k.reg('u32'), wCol, rowWords, k.shl('b32', k.reg('u32'), groups!, 2))
        : undefined;
      const q5gShift = q5g ? k.shl('b32', k.reg('u32'), quarter, 1) : undefined;
      const ty = k.shr('u32', k.reg('u32'), tid, 4);
      const tx = k.and('b32', k.reg('u32'), tid, 15);
      const readX = k.madLo('u32', k.reg('u32'), ty, 16, xBase);
      const readW = k.madLo('u32', k.reg('u32'), tx, 16, wBase);
      const acc = Array.from({ length: 4 }, () => k.regs('f32', 4));
      for (const row of acc) for (const r of row) k.mov('f32', r, 0);

      const kStep = k.reg('u32');
      const stageCodes = () => {
        const words = k.regs('u32', wordsPerThread);
        let high: R32 | undefined;
        if (q5kRow && q5kShift) {
          const packedBase = k.globalPointer(p.packed);
          const superAt = k.madLo('u32', k.reg('u32'), k.shr('u32', k.reg('u32'), kStep, 8), 40, q5kRow);
          const c = k.and('b32', k.reg('u32'), k.shr('u32', k.reg('u32'), kStep, 5), 7);
          const lowAt = k.add('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), c, 4, superAt), quarter);
          const highAt = k.add('u32', k.reg('u32'), superAt, k.add('u32', k.reg('u32'), c, 32));
          k.ldGlobal('b32', words[0]!, k.elementAddress(packedBase, lowAt, 4), { nc: true });
          high = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(packedBase, highAt, 4), { nc: true });
          k.shr('b32', high, high, q5kShift);
        } else {
          if (wordsPerThread === 2) k.ldGlobal('b32', words as unknown as Vec2<R32>, wPtr, { nc: true });
          else k.ldGlobal('b32', words[0]!, wPtr, { nc: true });
          k.add('u64', wPtr, wPtr, (TILE_K / layout.perWord) * 4);
          if (q5gHigh && q5gShift) {
            const at = k.add('u32', k.reg('u32'), q5gHigh, k.shr('u32', k.reg('u32'), kStep, 5));
            high = k.ldGlobal('b32', k.reg('u32'), k.elementAddress(k.globalPointer(p.packed), at, 4), {
              nc: true,
            });
            k.shr('b32', high, high, q5gShift);
          }
        }
        let s: F32;
        let bias: F32 | number = fixedBias(layout);
        let offset: F32 | undefined;
        if (rowScale) s = rowScale;
        else {
          // The group of this thread's 8 codes (a q8g16 step holds two groups).
          const g = groupAt(k, layout, k.add('u32', k.reg('u32'), kStep, xK), groups!);
          const at = k.add('u32', k.reg('u32'), scaleRow, g);
          if (layout.subBlockScales) {
            // q4k, q5k: the step's 32 k are sub-block (kStep / 32) mod 8 of super-block g.
            const words = k.madLo('u32', k.reg('u32'), g, 3, zeroRow!);
            const sub = k.and('b32', k.reg('u32'), k.shr('u32', k.reg('u32'), kStep, 5), 7);
            ({ scale: s, offset } = subBlockScaleOffset(
              k,
              scale,
              { scales, offsets, zeros },
              { scale: at, words, sub },
            ));
          } else {
            s = loadOneAsF32(k, scale, k.elementAddress(scales, at, scaleBytes));
            if (v.zeros) bias = zeroBias(k, zeros, zeroRow!, g);
            if (layout.offsets) offset = loadOneAsF32(k, scale, k.elementAddress(offsets, at, scaleBytes));
          }
        }
        const codes = high
          ? q5kCodes(k, words[0]!, high, layout.offset)
          : words.flatMap((word) => codesOf(k, layout, word, bias));
        codes.forEach((code, j) => {
          // ggml's value: f32(q · scale) (− offset, rounded again, for q4g32a, q5g32a, q4k and q5k).
          const w = k.mul('f32', k.reg('f32'), code, s, { rnd: 'rn' });
          if (offset) k.sub('f32', w, w, offset, { rnd: 'rn' });
          k.stShared('f32', addr(wAt, j * PITCH_N * 4), w);
        });
      };
      k.forRange(kStep, 0, kDim, TILE_K, () => {
        // x: 8 consecutive k of one row, 0 past K and past M.
        const xv = k.regs('f32', 8);
        xv.forEach((reg, j) => {
          const kk = k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kStep, xK), j);
          const ok: Pred = k.and('pred', k.reg('pred'), xRowOk, below(k, kk, kDim));
          loadAsF32(k, act, [reg], addr(xPtr, j * actBytes), { ok });
          k.stShared('f32', addr(xAt, j * PITCH_M * 4), reg);
        });
        k.add('u64', xPtr, xPtr, TILE_K * actBytes);
        // W: this thread's codes, dequantized with their group's scale (and zero point).
        if (stageQ6k) stageQ6k();
        else stageCodes();
        k.barSync();
        for (let kk = 0; kk < TILE_K; kk++) {
          const a = k.regs('f32', 4);
          const b = k.regs('f32', 4);
          k.ldShared('f32', a as unknown as Vec4<F32>, addr(readX, kk * PITCH_M * 4));
          k.ldShared('f32', b as unknown as Vec4<F32>, addr(readW, kk * PITCH_N * 4));
          for (let i = 0; i < 4; i++) {
            for (let j = 0; j < 4; j++) k.fma('f32', acc[i]![j]!, a[i]!, b[j]!, acc[i]![j]!);
          }
        }
        k.barSync();
      });

      const out = { y: k.globalPointer(p.y), c: k.globalPointer(p.c), beta: k.ldParam(p.beta), n };
      const outRow0 = k.madLo('u32', k.reg('u32'), ty, 4, row0);
      const outCol0 = k.madLo('u32', k.reg('u32'), tx, 4, col0);
      acc.forEach((values, i) => {
        const row = k.add('u32', k.reg('u32'), outRow0, i);
        values.forEach((value, j) => {
          const col = k.add('u32', k.reg('u32'), outCol0, j);
          const inside = k.and('pred', k.reg('pred'), below(k, row, mDim), below(k, col, n));
          k.ifThen(inside, () => storeOutput(k, v, out, row, col, value));
        });
      });
    },
    { maxThreadsPerBlock: THREADS, minBlocksPerSm: 2 },
  );
  return m;
}
