import {
  GATE_UP_FORMATS,
  InvalidArgumentError,
  isGateUpFormat,
  QGEMV_GROUPS,
  type QgemvShapeVariant,
  type QuantFormat,
  qgemvProblem,
  quantLayout,
} from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { type ParamHandles, PtxModule } from '../ptx/module.js';
import { addr, type F32, type Param, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { activationF32 } from './activations.js';
import { loadParams } from './entryParams.js';
import { below } from './gemv.js';
import { MAGIC, MAGIC_BITS, type QuantVariant } from './quantizedCodes.js';
import { subBlockScaleOffset } from './quantizedSubBlocks.js';
import {
  type FloatStorage,
  loadAsF32,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// The small-M quantized GEMV (M <= 4 rows of x; decoding has one). Its cost
// is reading the codes once, so it is shaped to keep many bytes in flight on
// every SM and little else in the way:
// - lane l of a warp reads u32 word (or v2/v4 words) l of a 32-lane run of
//   C rows of W at once, so each load instruction is one coalesced 128-byte
//   (or 256/512-byte) line per row, and the matching x (32 contiguous bytes
//   per lane for q4 in f32) comes straight from global memory through L1,
//   read once per step and used for the C columns: no shared-memory stage,
//   no barrier in the loop;
// - the warps of a block split K (S slices) when N alone gives too few warps
//   for the SMs, and meet once at the end in shared memory;
// - U steps' loads are issued before any of them is used;
// - a code becomes an exact f32 in two instructions: the nibble (or byte)
//   masked in place and ORed into the mantissa of 2^23 reads as
//   2^23 + q·16^j, and one fma by 16^-j with −(2^23·16^-j + zero) gives
//   q − zero exactly (no shift per nibble, no int-to-float convert).
// The same kernel with two weights is the fused gate·up·SwiGLU of decoding,
// for every format of 8- or 4-bit codes (core's GATE_UP_FORMATS). A lane's
// chunk lies in one group: its scale multiplies the chunk's sum; with
// offsets (q4g32a, q8g32a, q4k) the sum is scale·Σ q·x − offset·Σ x, with
// Σ x made once per step and row; q4k's lane forms its sub-block's
// f32(d·sc) and f32(dmin·m) as it loads the chunk (quantizedSubBlocks.ts).
// Single products take it for the formats quantized.ts routes here.
// Its shapes (C columns and W words per lane) are core's QGEMV_SHAPES; the
// backend's `qgemvVariant` and `qgemvSlices` options force one for
// measurements.

export const QGEMV_ENTRY = 'quantized_gemv';
/** Warps per block, as core's split of K counts them. */
const WARPS = QGEMV_GROUPS;
const THREADS = WARPS * 32;
/** The most rows of x one block takes; more rows take more blocks (grid y). */
export const QGEMV_MAX_ROWS = 4;

export interface QgemvConfig extends QuantVariant {
  /** Two weights of one shape: y = silu(x·Wgᵀ) ⊙ (x·Wuᵀ); never with `withC`. */
  readonly pair: boolean;
  /** Rows of x per block, 1 to QGEMV_MAX_ROWS. */
  readonly rows: number;
  /** x read in 16-byte pieces: K a multiple of 32 and x 16-byte aligned; else element by element. */
  readonly vecX: boolean;
  /** Columns of y per warp. */
  readonly cols: number;
  /** u32 code words per lane and step: 1, 2 or 4 (one ld, .v2 or .v4). */
  readonly words: 1 | 2 | 4;
  /** Warps of a block that split K for the same columns: 1, 2, 4 or 8. */
  readonly slices: 1 | 2 | 4 | 8;
}

/** Whether the kernel reads `format`: the gate·up pair's formats (codes of 8 or 4 bits), since the pair runs on it. */
export function qgemvReads(format: QuantFormat): boolean {
  return isGateUpFormat(format);
}

export function qgemvKey(v: QgemvConfig): string {
  const what = `${v.pair ? 'gateup/' : ''}${v.format}${v.zeros ? '/zeros' : ''}${v.withC ? '/c' : ''}`;
  const shape = `m${v.rows}/c${v.cols}w${v.words}s${v.slices}/${v.vecX ? 'v4' : 'scalar'}`;
  return `quantized/gemv/${shape}/${what}${storageKey([v.types.act, v.types.scale])}`;
}

export const QGEMV_PARAMS = {
  x: 'ptr',
  packed: 'ptr',
  scales: 'ptr',
  zeros: 'ptr',
  packed2: 'ptr',
  scales2: 'ptr',
  zeros2: 'ptr',
  offsets: 'ptr',
  offsets2: 'ptr',
  c: 'ptr',
  y: 'ptr',
  m: 'u32',
  n: 'u32',
  k: 'u32',
  beta: 'f32',
} as const;

/** Steps whose loads are issued together: as many as about 64 registers of codes, scales and x hold. */
export function unrollOf(v: QgemvConfig): number {
  const layout = quantLayout(v.format, 1);
  // Per step: each weight's code words, scale (and zero point; q4k's offset and sub-block words) per
  // column, and x (and q4k's Σ x) for each row.
  const perColumn = v.words + 1 + (v.zeros ? 2 : 0) + (layout.subBlockScales ? 4 : 0);
  const perStep =
    (v.pair ? 2 : 1) * v.cols * perColumn +
    v.rows * (layout.perWord * v.words + (layout.subBlockScales ? 1 : 0));
  return Math.max(1, Math.min(4, Math.floor(64 / perStep)));
}

function check(v: QgemvConfig): void {
  const fail = (argument: string, expected: string, actual: string) => {
    throw new InvalidArgumentError('the quantized GEMV cannot take this configuration', {
      operation: 'quantizedMatmul',
      argument,
      expected,
      actual,
    });
  };
  if (!Number.isInteger(v.rows) || v.rows < 1 || v.rows > QGEMV_MAX_ROWS)
    fail('rows', `an integer from 1 to ${QGEMV_MAX_ROWS}`, String(v.rows));
  if (![1, 2, 4, 8].includes(v.slices)) fail('slices', '1, 2, 4 or 8', String(v.slices));
  if (![1, 2, 4].includes(v.words)) fail('words', '1, 2 or 4', String(v.words));
  if (!Number.isInteger(v.cols) || v.cols < 1 || v.cols * v.rows > 32)
    fail('cols', 'columns · rows of at most 32 (one lane stores each)', String(v.cols));
  const layout = quantLayout(v.format, 1);
  if (v.zeros && !layout.zeroPoints) fail('zeros', 'zero points with q4g32 and q4g128 only', v.format);
  if (!qgemvReads(v.format)) fail('format', `one of ${GATE_UP_FORMATS.join(', ')}`, v.format);
  if (v.pair && v.withC) fail('c', 'no c with the gate·up pair', 'c');
}

/**
 * Block (bx, by) computes rows by·R … +R of y for columns
 * (bx · 8/S + g) · C … +C, g = warp / S. Warp (g, s) reads chunks
 * s·32 + l + i·32·S of those C rows of W (a chunk is `words` u32 words,
 * lane l's at step i) and the same k range of x, so the S warps of a
 * column group read adjacent runs; each lane keeps C·R (two for a pair)
 * sums. At the end the warps' sums meet in shared memory and lane
 * c·R + r of the group's first warp stores y(r, c).
 */
export function qgemvModule(v: QgemvConfig): PtxModule {
  check(v);
  const layout = quantLayout(v.format, 1);
  const q4 = layout.bits === 4;
  /** A scale per group of K (all but q8, whose row scale multiplies the row's sum once). */
  const grouped = !layout.scalePerRow;
  /** q4k: a scale and offset per 32-weight sub-block, from its super-block's d, dmin and 6-bit sc, m. */
  const kq = layout.subBlockScales;
  /** q4g32a, q8g32a, q4k: less an offset per group (sub-block) times its Σ x. */
  const offsetted = layout.offsets;
  const { act, scale } = v.types;
  const actBytes = STORAGE_BYTES[act];
  const scaleBytes = STORAGE_BYTES[scale];
  const C = v.cols;
  const R = v.rows;
  const S = v.slices;
  const P = v.pair ? 2 : 1;
  const V = v.words;
  /** Weights per lane and step. */
  const E = layout.perWord * V;
  const U = unrollOf(v);
  /** Sums per warp: P weights × C columns × R rows. */
  const perWarp = P * C * R;
  const m = new PtxModule();
  m.entry(
    QGEMV_ENTRY,
    QGEMV_PARAMS,
    (k, p) => {
      const { n, k: kDim, m: mDim } = loadParams(k, p, 'n', 'k', 'm');
      const red = k.sharedArray('red', 'f32', WARPS * perWarp, 16);
      const redBase = k.sharedAddress(red);
      const at = gemvLaneAt(k, { cols: C, rows: R, slices: S });
      const { lane, slice, colBase, row0 } = at;
      // Row geometry for K (see quantLayout): whole 32-weight blocks, and whole groups for q4.
      // Rows are padded to whole groups (4-bit) or 32-weight blocks (8-bit); q8g16's groups halve a block.
      const unit = q4 ? layout.groupSize : 32;
      const blocks = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, unit - 1), unit);
      const rowWords = k.mulLo('u32', k.reg('u32'), blocks, unit / layout.perWord);
      // Groups per row (q8g16's: K / 16 rounded up, not two per block).
      const units =
        layout.groupSize === unit
          ? blocks
          : k.div(
              'u32',
              k.reg('u32'),
              k.add('u32', k.reg('u32'), kDim, layout.groupSize - 1),
              layout.groupSize,
            );
      const zeroWords = kq
        ? k.mulLo('u32', k.reg('u32'), units, 3)
        : k.shr('u32', k.reg('u32'), k.add('u32', k.reg('u32'), units, 7), 3);
      // This lane's first chunk and first k.
      const chunk0 = k.madLo('u32', k.reg('u32'), slice, 32, lane);
      const lastN = k.sub('u32', k.reg('u32'), n, 1);
      const weightSets = qgemvWeightParams(p, P);
      // Per weight and column: the lane's code pointer, its scale row and zero row. Columns past N
      // read row N − 1 (never stored).
      const cols = weightSets.map((set) => {
        const packed = k.globalPointer(set.packed);
        const scales = k.globalPointer(set.scales);
        const zeros = v.zeros || kq ? k.globalPointer(set.zeros) : undefined;
        const offsets = offsetted ? k.globalPointer(set.offsets) : undefined;
        return Array.from({ length: C }, (_, c) => {
          const wRow = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), colBase, c), lastN);
          const w = k.elementAddress(
            packed,
            k.madLo('u32', k.reg('u32'), wRow, rowWords, k.mulLo('u32', k.reg('u32'), chunk0, V)),
            4,
          );
          const scaleRow = grouped ? k.mulLo('u32', k.reg('u32'), wRow, units) : wRow;
          const zeroRow = zeros ? k.mulLo('u32', k.reg('u32'), wRow, zeroWords) : undefined;
          return { w, scales, zeros, offsets, scaleRow, zeroRow };
        });
      });
      const lastM = k.sub('u32', k.reg('u32'), mDim, 1);
      const x = k.globalPointer(p.x);
      const firstK = k.mulLo('u32', k.reg('u32'), chunk0, E);
      const xRows: R64[] = Array.from({ length: R }, (_, r) => {
        const row = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, r), lastM);
        return k.elementAddress(x, k.madLo('u32', k.reg('u32'), row, kDim, firstK), actBytes);
      });
      const acc = Array.from({ length: P }, () =>
        Array.from({ length: C }, () => Array.from({ length: R }, () => k.mov('f32', k.reg('f32'), 0))),
      );
      /** Chunks, k and bytes one step moves on. */
      const stepK = 32 * S * E;
      const stepWordBytes = 32 * S * V * 4;
      const stepXBytes = stepK * actBytes;
      type Step = {
        words: R32[][][];
        scales: F32[][];
        zeros: F32[][] | undefined;
        /** q4k: each column's sub-block offset f32(dmin · m), and each row's Σ x over the chunk. */
        offsets: F32[][] | undefined;
        sumX: F32[] | undefined;
        xs: F32[][];
      };
      const loadStep = (u: number, kk: R32): Step => {
        const ok: Pred = below(k, kk, kDim);
        const group = grouped ? k.shr('u32', k.reg('u32'), kk, Math.log2(layout.groupSize)) : undefined;
        const words = cols.map((set) =>
          set.map((col) => {
            const regs = k.regs('u32', V);
            for (const r of regs) k.mov('b32', r, 0);
            const at = addr(col.w, u * stepWordBytes);
            k.predicated(ok, () => {
              if (V === 1) k.ldGlobal('b32', regs[0]!, at, { nc: true });
              else if (V === 2) k.ldGlobal('b32', regs as unknown as Vec2<R32>, at, { nc: true });
              else k.ldGlobal('b32', regs as unknown as Vec4<R32>, at, { nc: true });
            });
            return regs;
          }),
        );
        // q4k: the chunk's sub-block scale and offset (a sub-block holds whole chunks); 0 past K.
        const subBlocks = kq
          ? cols.map((set) =>
              set.map((col) =>
                subBlockScaleOffset(
                  k,
                  scale,
                  { scales: col.scales, offsets: col.offsets!, zeros: col.zeros! },
                  {
                    scale: k.add('u32', k.reg('u32'), col.scaleRow, group!),
                    words: k.madLo('u32', k.reg('u32'), group!, 3, col.zeroRow!),
                    sub: k.and('b32', k.reg('u32'), k.shr('u32', k.reg('u32'), kk, 5), 7),
                  },
                  ok,
                ),
              ),
            )
          : undefined;
        // The chunk's group scale (one group holds whole chunks); 0 past K, so that nothing there counts.
        const groupValue = (pick: (col: (typeof cols)[number][number]) => R64) =>
          cols.map((set) =>
            set.map((col) =>
              loadOneAsF32(
                k,
                scale,
                k.elementAddress(pick(col), k.add('u32', k.reg('u32'), col.scaleRow, group!), scaleBytes),
                ok,
              ),
            ),
          );
        const scales = subBlocks
          ? subBlocks.map((set) => set.map((s) => s.scale))
          : grouped
            ? groupValue((col) => col.scales)
            : [];
        const zeros = v.zeros
          ? cols.map((set) =>
              set.map((col) => {
                const word = k.mov('b32', k.reg('u32'), 0);
                const at = k.add('u32', k.reg('u32'), col.zeroRow!, k.shr('u32', k.reg('u32'), group!, 3));
                k.predicated(ok, () => {
                  k.ldGlobal('b32', word, k.elementAddress(col.zeros!, at, 4), { nc: true });
                });
                const shift = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), group!, 7), 2);
                const nibble = k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), word, shift), 0xf);
                return k.cvt('f32', 'u32', k.reg('f32'), nibble, { rnd: 'rn' });
              }),
            )
          : undefined;
        const xs = xRows.map((xRow) => {
          const regs = k.regs('f32', E);
          const base = addr(xRow, u * stepXBytes);
          if (v.vecX) {
            // K is a multiple of 32: a chunk lies wholly inside or past K.
            for (let first = 0; first < E; first += 8) {
              loadAsF32(
                k,
                act,
                regs.slice(first, first + 8),
                addr(base.base, base.offset + first * actBytes),
                {
                  ok,
                },
              );
            }
          } else {
            regs.forEach((reg, j) => {
              const inside = below(k, k.add('u32', k.reg('u32'), kk, j), kDim);
              loadAsF32(k, act, [reg], addr(base.base, base.offset + j * actBytes), { ok: inside });
            });
          }
          return regs;
        });
        const sumX = offsetted
          ? xs.map((regs) => {
              const total = k.mov('f32', k.reg('f32'), 0);
              for (const x of regs) k.add('f32', total, total, x, { rnd: 'rn' });
              return total;
            })
          : undefined;
        const offsets = subBlocks
          ? subBlocks.map((set) => set.map((s) => s.offset))
          : offsetted
            ? groupValue((col) => col.offsets!)
            : undefined;
        return { words, scales, zeros, offsets, sumX, xs };
      };
      /** −(2^23 · 2^-shift + zero) for each in-place position of a code (shift 0, bits, 2·bits, 3·bits). */
      const positions = q4 ? 4 : 2;
      // 8-bit codes read as q + 128 (their sign bits flipped); 4-bit ones from 0, centred on 8 but with offsets.
      const fixedZero = q4 ? (offsetted ? 0 : 8) : 128;
      const useStep = (st: Step) => {
        cols.forEach((set, pi) => {
          set.forEach((_, c) => {
            const zero = st.zeros ? st.zeros[pi]![c] : undefined;
            const offsets: (F32 | number)[] = Array.from({ length: positions }, (_, j) => {
              const top = -(MAGIC / 2 ** (j * layout.bits));
              return zero ? k.fma('f32', k.reg('f32'), zero, -1, top, { rnd: 'rn' }) : top - fixedZero;
            });
            const parts = Array.from({ length: R }, () => k.mov('f32', k.reg('f32'), 0));
            st.words[pi]![c]!.forEach((word, wi) => {
              // q8's bytes are two's complement: flipping each sign bit makes them q + 128.
              const lo = q4 ? word : k.xor('b32', k.reg('u32'), word, 0x80808080);
              const hi = k.shr('b32', k.reg('u32'), lo, 16);
              for (let e = 0; e < layout.perWord; e++) {
                const j = e % positions;
                const src = e < positions ? lo : hi;
                const mask = ((q4 ? 0xf : 0xff) << (j * layout.bits)) >>> 0;
                const bits = k.and('b32', k.reg('u32'), src, mask);
                k.or('b32', bits, bits, MAGIC_BITS);
                const f = k.mov('b32', k.reg('f32'), bits);
                const code = k.fma('f32', k.reg('f32'), f, 2 ** (-j * layout.bits), offsets[j]!, {
                  rnd: 'rn',
                });
                const at = wi * layout.perWord + e;
                for (let r = 0; r < R; r++)
                  k.fma('f32', parts[r]!, code, st.xs[r]![at]!, parts[r]!, { rnd: 'rn' });
              }
            });
            for (let r = 0; r < R; r++) {
              const a = acc[pi]![c]![r]!;
              if (grouped) k.fma('f32', a, parts[r]!, st.scales[pi]![c]!, a, { rnd: 'rn' });
              else k.add('f32', a, a, parts[r]!, { rnd: 'rn' });
              // Offsets: less offset · Σ x.
              if (st.offsets) {
                const offset = k.neg('f32', k.reg('f32'), st.offsets[pi]![c]!);
                k.fma('f32', a, offset, st.sumX![r]!, a, { rnd: 'rn' });
              }
            }
          });
        });
      };
      const kk = k.mov('u32', k.reg('u32'), firstK);
      const base = k.mulLo('u32', k.reg('u32'), slice, 32 * E);
      k.forRange(base, base, kDim, U * stepK, () => {
        const steps = Array.from({ length: U }, (_, u) =>
          loadStep(u, u === 0 ? kk : k.add('u32', k.reg('u32'), kk, u * stepK)),
        );
        for (const st of steps) useStep(st);
        for (const set of cols) for (const col of set) k.add('u64', col.w, col.w, U * stepWordBytes);
        for (const xRow of xRows) k.add('u64', xRow, xRow, U * stepXBytes);
        k.add('u32', kk, kk, U * stepK);
      });
      storeGemvSums(k, p, {
        acc,
        weights: weightSets,
        at,
        sizes: { n, m: mDim, cols: C, rows: R, slices: S },
        red: redBase,
        pair: v.pair,
        withC: v.withC,
        rowScaled: !grouped,
        types: v.types,
      });
    },
    // No minimum of blocks per SM: the decode configurations take 40–80 registers as they are
    // (3–6 blocks per SM), and a bound makes the wide ones spill.
    { maxThreadsPerBlock: THREADS },
  );
  return m;
}

/** The weight operands of one product. */
export interface QgemvWeight {
  readonly packed: Operand;
  readonly scales: Operand;
  /** Zero points, or q4k's sub-block scales. */
  readonly zeros: Operand | undefined;
  /** q4k's dmin. */
  readonly offsets?: Operand | undefined;
}

const aligned16 = (ptr: bigint) => ptr % 16n === 0n;

/**
 * Launches the GEMV of `variant` (not `a`) for x [M, K] against one weight
 * (y = x·Wᵀ + beta·c) or a gate·up pair (y = silu(x·Wgᵀ) ⊙ (x·Wuᵀ)).
 */
export function encodeQuantizedGemv(
  encoder: KernelEncoder,
  variant: QgemvShapeVariant,
  ops: { x: Operand; weights: readonly QgemvWeight[]; c: Operand | undefined; y: Operand },
  attrs: { format: QuantFormat; beta: number },
): void {
  const { x, weights, c, y } = ops;
  const problem = qgemvProblem(variant, x.shape, y.shape, attrs.format, {
    units: encoder.device.multiprocessors,
    slices: encoder.tuning.qgemvSlices,
  });
  if (!problem) return;
  const { m, k: kDim, n, shape, slices } = problem;
  const { cols, words } = shape;
  const rows = Math.min(m, QGEMV_MAX_ROWS);
  const first = weights[0]!;
  const config: QgemvConfig = {
    format: attrs.format,
    zeros: first.zeros !== undefined && problem.layout.zeroPoints,
    withC: c !== undefined,
    pair: weights.length === 2,
    types: { act: storageOf(x), scale: storageOf(first.scales) },
    rows,
    vecX: kDim % 32 === 0 && aligned16(x.ptr),
    cols,
    words,
    slices,
  };
  encoder.launch({
    key: qgemvKey(config),
    module: () => qgemvModule(config),
    entry: QGEMV_ENTRY,
    grid: [Math.ceil(n / ((cols * WARPS) / config.slices)), Math.ceil(m / rows), 1],
    block: THREADS,
    args: qgemvArgs(ops, { m, n, k: kDim, beta: attrs.beta }),
  });
}

/** Where a lane of the GEMV sits: its thread, warp, lane, K slice, column group, first column and first row. */
export interface GemvLaneAt {
  readonly tid: R32;
  readonly warp: R32;
  readonly lane: R32;
  readonly slice: R32;
  readonly group: R32;
  readonly colBase: R32;
  readonly row0: R32;
}

/**
 * Block (bx, by) of a small-M GEMV computes rows by·R … +R of y for columns
 * (bx · 8/S + g) · C … +C, g = warp / S; warp (g, s) takes slice s of K.
 */
export function gemvLaneAt(
  k: KernelBuilder,
  v: { readonly cols: number; readonly rows: number; readonly slices: number },
): GemvLaneAt {
  const tid = k.tid();
  const warp = k.shr('u32', k.reg('u32'), tid, 5);
  const lane = k.and('b32', k.reg('u32'), tid, 31);
  const slice = k.and('b32', k.reg('u32'), warp, v.slices - 1);
  const group = k.shr('u32', k.reg('u32'), warp, Math.log2(v.slices));
  const colBase = k.mulLo(
    'u32',
    k.reg('u32'),
    k.madLo('u32', k.reg('u32'), k.ctaid(), WARPS / v.slices, group),
    v.cols,
  );
  const row0 = k.mulLo('u32', k.reg('u32'), k.ctaid('y'), v.rows);
  return { tid, warp, lane, slice, group, colBase, row0 };
}

/** The parameters of the first weight, and of the second for a pair (`count` 2). */
export function qgemvWeightParams(p: ParamHandles<typeof QGEMV_PARAMS>, count: number) {
  return [
    { packed: p.packed, scales: p.scales, zeros: p.zeros, offsets: p.offsets },
    { packed: p.packed2, scales: p.scales2, zeros: p.zeros2, offsets: p.offsets2 },
  ].slice(0, count);
}

/** The launch arguments of both small-M GEMVs: one weight (and c) or a gate·up pair. */
export function qgemvArgs(
  ops: { x: Operand; weights: readonly QgemvWeight[]; c: Operand | undefined; y: Operand },
  sizes: { m: number; n: number; k: number; beta: number },
) {
  const { x, weights, c, y } = ops;
  const first = weights[0]!;
  const second = weights[1] ?? first;
  return {
    x,
    packed: first.packed,
    scales: first.scales,
    // Unused without them; any valid address.
    zeros: first.zeros ?? first.packed,
    packed2: second.packed,
    scales2: second.scales,
    zeros2: second.zeros ?? second.packed,
    offsets: first.offsets ?? first.packed,
    offsets2: second.offsets ?? second.packed,
    c: c ?? y,
    y,
    ...sizes,
  };
}

/**
 * The small-M GEMVs' end: each lane's sums (P weights × C columns × R rows)
 * added across the warp and then across the block's S slices in `red`
 * (WARPS · P·C·R f32), and lane c·R + r of a column group's first warp
 * stores y(row0 + r, colBase + c): times q8's row scale (`rowScaled`), as
 * silu(gate) ⊙ up for a pair, or plus beta·c.
 */
export function storeGemvSums(
  k: KernelBuilder,
  p: ParamHandles<typeof QGEMV_PARAMS>,
  g: {
    readonly acc: readonly (readonly (readonly F32[])[])[];
    readonly weights: readonly { readonly scales: Param<'ptr'> }[];
    readonly at: GemvLaneAt;
    readonly sizes: {
      readonly n: R32;
      readonly m: R32;
      readonly cols: number;
      readonly rows: number;
      readonly slices: number;
    };
    readonly red: R32;
    readonly pair: boolean;
    readonly withC: boolean;
    readonly rowScaled: boolean;
    readonly types: { readonly act: FloatStorage; readonly scale: FloatStorage };
  },
): void {
  const { acc, weights: weightSets, red: redBase } = g;
  const { warp, lane, slice, group, colBase, row0 } = g.at;
  const { n, m: mDim, cols: C, rows: R, slices: S } = g.sizes;
  const perWarp = weightSets.length * C * R;
  // Each sum across the warp; one lane writes it to the warp's row of `red`.
  const warpRow = k.madLo('u32', k.reg('u32'), warp, perWarp * 4, redBase);
  acc.forEach((set, pi) => {
    set.forEach((rows, c) => {
      rows.forEach((a, r) => {
        for (let offset = 16; offset >= 1; offset /= 2) {
          const other = k.shflSync('bfly', k.reg('f32'), a, offset);
          k.add('f32', a, a, other, { rnd: 'rn' });
        }
        const idx = (pi * C + c) * R + r;
        k.ifThen(k.setp('eq', 'u32', k.reg('pred'), lane, idx % 32), () => {
          k.stShared('f32', addr(warpRow, idx * 4), a);
        });
      });
    });
  });
  k.barSync();
  // Lane o = c·R + r of slice 0 adds the S slices' sums and stores y(row0 + r, colBase + c).
  const o = lane;
  const c = k.div('u32', k.reg('u32'), o, R);
  const r = k.rem('u32', k.reg('u32'), o, R);
  const col = k.add('u32', k.reg('u32'), colBase, c);
  const row = k.add('u32', k.reg('u32'), row0, r);
  const mine = [
    k.setp('eq', 'u32', k.reg('pred'), slice, 0),
    below(k, o, C * R),
    below(k, col, n),
    below(k, row, mDim),
  ].reduce((a, b) => k.and('pred', k.reg('pred'), a, b));
  k.ifThen(mine, () => {
    const groupRow = k.madLo(
      'u32',
      k.reg('u32'),
      group,
      S * perWarp * 4,
      k.madLo('u32', k.reg('u32'), o, 4, redBase),
    );
    const sums = weightSets.map((_, pi) => {
      const sum = k.mov('f32', k.reg('f32'), 0);
      for (let s = 0; s < S; s++) {
        const part = k.ldShared('f32', k.reg('f32'), addr(groupRow, (s * perWarp + pi * C * R) * 4));
        k.add('f32', sum, sum, part, { rnd: 'rn' });
      }
      return sum;
    });
    storeGemvOutput(k, p, { ...g, sums, col, row, n });
  });
}

/**
 * Stores y(row, col) of a small-M GEMV from its weights' sums: times q8's
 * row scale (`rowScaled`), as silu(gate) ⊙ up for a pair, or plus beta·c.
 */
export function storeGemvOutput(
  k: KernelBuilder,
  p: ParamHandles<typeof QGEMV_PARAMS>,
  g: {
    readonly sums: readonly F32[];
    readonly weights: readonly { readonly scales: Param<'ptr'> }[];
    readonly col: R32;
    readonly row: R32;
    readonly n: R32;
    readonly pair: boolean;
    readonly withC: boolean;
    readonly rowScaled: boolean;
    readonly types: { readonly act: FloatStorage; readonly scale: FloatStorage };
  },
): void {
  const { act, scale } = g.types;
  const actBytes = STORAGE_BYTES[act];
  const sums = g.sums.map((sum, pi) => {
    if (!g.rowScaled) return sum;
    // q8: one scale per row of W.
    const scales = k.globalPointer(g.weights[pi]!.scales);
    const rowScale = loadOneAsF32(k, scale, k.elementAddress(scales, g.col, STORAGE_BYTES[scale]));
    return k.mul('f32', k.reg('f32'), sum, rowScale, { rnd: 'rn' });
  });
  const index = k.madLo('u32', k.reg('u32'), g.row, g.n, g.col);
  let value = sums[0]!;
  if (g.pair) value = k.mul('f32', k.reg('f32'), activationF32(k, 'silu', sums[0]!), sums[1]!, { rnd: 'rn' });
  else if (g.withC) {
    const cv = loadOneAsF32(k, act, k.elementAddress(k.globalPointer(p.c), index, actBytes));
    value = k.fma('f32', k.reg('f32'), k.ldParam(p.beta), cv, value, { rnd: 'rn' });
  }
  storeFromF32(k, act, k.elementAddress(k.globalPointer(p.y), index, actBytes), value);
}
