import type { MatmulLaunch } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { Vec4 } from '../ptx/instructionTypes.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import type { HalfDType } from './common.js';
import { pairsAligned, storePair } from './pairStores.js';

// The product of up to 16 rows of a by half weights b stored [N, K] (a batch
// of decoding sequences' projections) on tensor cores, shaped like the GEMV
// rather than like a tile: each lane streams 16-byte pieces of b's rows
// from global memory straight into mma.sync's B fragments, so nothing waits
// on shared memory or barriers, and every row of b is read in long
// contiguous runs. The tiled kernel reads b 64 bytes a row at a time through
// shared stages, which for a few rows left it at a third of the bandwidth.
//
// A lane (groupID g, threadInGroup t) loads k = 8t … 8t + 7 of a 32-k chunk
// for column g of its warp's 8 and the same k of rows g and g + 8 of a. The
// mma's k order is permuted alike for a and b (its logical k 2t, 2t + 1,
// 2t + 8, 2t + 9 are the chunk's 8t … 8t + 3 in the first product, 8t + 4 …
// 8t + 7 in the second), which leaves the sum unchanged.

export const FEW_ROWS_ENTRY = 'matmul_mma_rows';
/** The most rows of a the kernel takes: one m16 fragment. */
const FEW_ROWS_MAX = 16;
/** Columns of y a block computes; its 8 warps split K between them. */
const FEW_ROWS_COLUMNS = 8;
const WARPS = 8;
const THREADS = WARPS * 32;
/** K a chunk covers: 4 lanes of 8 elements per column. */
const CHUNK_K = 32;

export interface FewRowsVariant {
  /** b's dtype, and the dtype a is multiplied in. */
  readonly dtype: HalfDType;
  /** a is stored f32 and rounded (nearest even) to `dtype` as it is loaded. */
  readonly aF32: boolean;
  /** Adds beta · c. */
  readonly withC: boolean;
  /** y's (and c's) dtype. */
  readonly out: HalfDType | 'f32';
}

/** Chunks each lane has in flight: fewer for an f32 a, whose rows take twice the registers. */
function chunksInFlight(v: FewRowsVariant): number {
  return v.aF32 ? 4 : 8;
}

export function fewRowsKey(v: FewRowsVariant): string {
  return `matmul/mmarows/${v.dtype}/${v.aF32 ? 'af32' : 'a'}/y${v.out}${v.withC ? '/c' : ''}`;
}

/**
 * y = alpha · a · bᵀ (+ beta · c) for a [M ≤ 16, K], b [N, K] half, K a
 * multiple of 8 and both bases 16-byte aligned. Block x computes columns
 * 8x … 8x + 7; warp w takes chunks w, w + 8, … of K, several in flight a
 * lane, and the warps' partial sums meet in shared memory for warp 0 to store.
 */
export function fewRowsModule(v: FewRowsVariant): PtxModule {
  const m = new PtxModule({ target: 'sm_80' });
  const partials = m.dynamicShared('partials', 16);
  const inFlight = chunksInFlight(v);
  const aBytes = v.aF32 ? 4 : 2;
  m.entry(
    FEW_ROWS_ENTRY,
    { a: 'ptr', b: 'ptr', c: 'ptr', y: 'ptr', m: 'u32', n: 'u32', k: 'u32', alpha: 'f32', beta: 'f32' },
    (k, p) => {
      const [mDim, nDim, kDim] = [k.ldParam(p.m), k.ldParam(p.n), k.ldParam(p.k)];
      const tid = k.tid();
      const warp = k.shr('u32', k.reg('u32'), tid, 5);
      const { groupId: g, threadInGroup: t } = k.mmaLaneCoordinates();
      const col0 = k.mulLo('u32', k.reg('u32'), k.ctaid('x'), FEW_ROWS_COLUMNS);
      const column = k.add('u32', k.reg('u32'), col0, g);
      const columnOk = k.setp('lt', 'u32', k.reg('pred'), column, nDim);
      const rows = [g, k.add('u32', k.reg('u32'), g, 8)].map((row) => ({
        row,
        ok: k.setp('lt', 'u32', k.reg('pred'), row, mDim),
      }));
      // The lane's first element of chunk 0: column (or row) · K + 8t.
      const laneK = k.shl('b32', k.reg('u32'), t, 3);
      const bLane = k.elementAddress(
        k.globalPointer(p.b),
        k.madLo('u32', k.reg('u32'), column, kDim, laneK),
        2,
      );
      const aLanes = rows.map(({ row }) =>
        k.elementAddress(k.globalPointer(p.a), k.madLo('u32', k.reg('u32'), row, kDim, laneK), aBytes),
      );
      const chunks = k.div('u32', k.reg('u32'), k.add('u32', k.reg('u32'), kDim, CHUNK_K - 1), CHUNK_K);
      const acc = k.regs('f32', 4);
      for (const x of acc) k.mov('f32', x, 0);

      const chunk = k.reg('u32');
      k.forRange(chunk, warp, chunks, WARPS * inFlight, () => {
        // The chunk's first k of this lane, and the byte offsets of its pieces of a and b.
        const kAt = k.madLo('u32', k.reg('u32'), chunk, CHUNK_K, laneK);
        const stepOffset = (bytes: number) => k.mulWide('u32', k.reg('u64'), chunk, CHUNK_K * bytes);
        const bAt = k.add('u64', k.reg('u64'), bLane, stepOffset(2));
        const aOffset = stepOffset(aBytes);
        const aAt = aLanes.map((lane) => k.add('u64', k.reg('u64'), lane, aOffset));
        // Every load of the chunks in flight first; K ends on a multiple of 8, so a lane's piece is whole or absent.
        const pieces = Array.from({ length: inFlight }, (_, u) => {
          const inside = k.setp(
            'lt',
            'u32',
            k.reg('pred'),
            k.add('u32', k.reg('u32'), kAt, u * WARPS * CHUNK_K),
            kDim,
          );
          // `count` words from base + offset (16 bytes a load), zero where the piece is outside.
          const load = (count: number, ok: Pred, base: R64, offset: number, type: 'u32' | 'f32') => {
            const words = Array.from({ length: count }, () => k.mov(type, k.reg(type), 0) as R32);
            const both = k.and('pred', k.reg('pred'), inside, ok);
            for (let q = 0; q < count / 4; q++) {
              const part = words.slice(4 * q, 4 * q + 4) as unknown as Vec4<R32>;
              k.predicated(both, () =>
                k.ldGlobal(type, part as never, addr(base, offset + 16 * q), { nc: true }),
              );
            }
            return words;
          };
          const b = load(4, columnOk, bAt, u * WARPS * CHUNK_K * 2, 'u32');
          const a = rows.map(({ ok }, h) =>
            load(v.aF32 ? 8 : 4, ok, aAt[h]!, u * WARPS * CHUNK_K * aBytes, v.aF32 ? 'f32' : 'u32'),
          );
          return { a, b };
        });
        for (const { a, b } of pieces) {
          // Words of a's two rows: half pairs, an f32 a's rounded as a tile load would round them.
          const words = a.map((row) =>
            v.aF32
              ? [0, 1, 2, 3].map((w) =>
                  k.cvtPack(
                    v.dtype,
                    k.reg('u32'),
                    row[2 * w] as unknown as F32,
                    row[2 * w + 1] as unknown as F32,
                  ),
                )
              : row,
          );
          const [lo, hi] = words as [R32[], R32[]];
          for (const half of [0, 1]) {
            const w = 2 * half;
            const fa = [lo[w]!, hi[w]!, lo[w + 1]!, hi[w + 1]!] as Vec4<R32>;
            k.mmaSync('m16n8k16', v.dtype, acc, fa, [b[w]!, b[w + 1]!], acc);
          }
        }
      });

      // Warps 1 … 7 leave their sums in shared memory; warp 0 adds them and stores y.
      const base = k.sharedAddress(partials);
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const slot = k.madLo('u32', k.reg('u32'), tid, 16, base);
      const laneSlot = k.madLo('u32', k.reg('u32'), lane, 16, base);
      const isFirst = k.setp('eq', 'u32', k.reg('pred'), warp, 0);
      k.predicated(isFirst, () => k.stShared('f32', slot, acc), { negate: true });
      k.barSync();
      k.ifThen(isFirst, () => {
        for (let w = 1; w < WARPS; w++) {
          const other = k.ldShared('f32', k.regs('f32', 4), addr(laneSlot, w * 512));
          for (let e = 0; e < 4; e++) k.add('f32', acc[e]!, acc[e]!, other[e]!);
        }
        const alpha = k.ldParam(p.alpha);
        const beta = k.ldParam(p.beta);
        const yBase = k.globalPointer(p.y);
        const cBase = v.withC ? k.globalPointer(p.c) : undefined;
        const col = k.add('u32', k.reg('u32'), col0, k.shl('b32', k.reg('u32'), t, 1));
        const ok0 = k.setp('lt', 'u32', k.reg('pred'), col, nDim);
        const ok1 = k.setp('lt', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), col, 1), nDim);
        // A pair store needs both columns inside and an aligned address (pairsAligned).
        const pairsOk = pairsAligned(k, v.out, nDim, [yBase, cBase]);
        const pairCols = k.and('pred', k.reg('pred'), ok1, pairsOk);
        rows.forEach(({ row, ok }, h) => {
          const pairOk = k.and('pred', k.reg('pred'), ok, pairCols);
          const singleOk = [ok0, ok1].map((inside) => {
            const s = k.and('pred', k.reg('pred'), ok, inside);
            return k.and('pred', s, s, k.not('pred', k.reg('pred'), pairCols));
          }) as [Pred, Pred];
          const values = [0, 1].map((e) => k.mul('f32', k.reg('f32'), acc[2 * h + e]!, alpha));
          const element = k.madLo('u32', k.reg('u32'), row, nDim, col);
          storePair(k, v.out, yBase, cBase, element, values, beta, pairOk, singleOk);
        });
      });
    },
    { maxThreadsPerBlock: THREADS, minBlocksPerSm: 2 },
  );
  return m;
}

/** Shared bytes of the warps' partial sums (warp 0's slots unused). */
const PARTIAL_BYTES = THREADS * 16;

/**
 * Whether the few-rows kernel takes a half product (`dtype`, from
 * `tensorCoreDtype` with a as multiplied): one batch, 2 … 16 rows, a
 * [M, K] and b [N, K] in place, K a multiple of 8 and the bases 16-byte
 * aligned (its loads are 16 bytes), a in `dtype` or f32.
 */
export function fewRowsApplies(call: MatmulLaunch<Operand>): boolean {
  const { a, b, m, k, batch } = call;
  if (batch !== 1 || m < 2 || m > FEW_ROWS_MAX || call.transA || !call.transB) return false;
  return (
    k % 8 === 0 && a.ptr % 16n === 0n && b.ptr % 16n === 0n && (a.dtype === 'f32' || a.dtype === b.dtype)
  );
}

/** Launches a product `fewRowsApplies` takes, in `dtype` (b's). */
export function encodeFewRows(encoder: KernelEncoder, call: MatmulLaunch<Operand>, dtype: HalfDType): void {
  const { a, b, c, y, m, n, k } = call;
  const v: FewRowsVariant = {
    dtype,
    aF32: a.dtype === 'f32',
    withC: c !== undefined,
    out: y.dtype === 'f32' ? 'f32' : dtype,
  };
  encoder.launch({
    key: fewRowsKey(v),
    module: () => fewRowsModule(v),
    entry: FEW_ROWS_ENTRY,
    grid: [Math.ceil(n / FEW_ROWS_COLUMNS), 1, 1],
    block: THREADS,
    sharedBytes: PARTIAL_BYTES,
    args: { a: a.ptr, b: b.ptr, c: c?.ptr ?? y.ptr, y: y.ptr, m, n, k, alpha: call.alpha, beta: call.beta },
  });
}
