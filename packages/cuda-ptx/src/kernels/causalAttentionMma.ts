import type { Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32 } from '../ptx/operands.js';
import { causalBlock, causalModule, rowOf } from './causalAttentionTiled.js';
import { type HalfDType, sharedTiles } from './common.js';
import {
  accumulatorsAsA,
  ldmatrixRoles,
  maskColumns,
  mmaProduct,
  onlineSoftmax,
  swizzled,
  TileFragments,
} from './mmaTiles.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES, storageKey } from './storage.js';

// causalAttention over half caches on tensor cores, FlashAttention-2 shaped
// (sm_80 mma.sync m16n8k16, f32 accumulators). A block takes 64 query rows —
// (token, head) pairs of the query heads of one kv head, so that K and V
// tiles are read once for the whole group — in 4 warps of 16 rows, and walks
// the cache 64 keys at a time: S = q·Kᵀ from ldmatrix fragments, the online
// softmax on S's accumulators (each row's 64 scores lie on the 4 lanes of a
// quad), P rounded to the cache's dtype and fed back as the A fragment of
// O += P·V (V through ldmatrix.trans). K and V tiles come through cp.async
// into two buffers: the next step's copies run under this step's products.
// Tiles past the block's last query are never read; only tiles crossing the
// diagonal mask.

export const MMA_ROWS = 64;
export const MMA_KEYS = 64;
export const MMA_THREADS = 128;
export const MMA_HEAD_DIMS: readonly number[] = [64, 128];
export const MMA_ENTRY = 'causal_attention_mma';

export interface MmaAttentionConfig {
  readonly headDim: number;
  /** The caches' dtype: q and P are rounded to it for the products. */
  readonly cache: HalfDType;
  readonly q: FloatStorage;
  /** out's storage (attrs.out); q's when absent. */
  readonly out?: FloatStorage;
}

export function mmaAttentionKey(c: MmaAttentionConfig): string {
  const out = c.out !== undefined && c.out !== c.q ? `/out_${c.out}` : '';
  return `causalAttention/mma${MMA_ROWS}x${MMA_KEYS}/d${c.headDim}${storageKey([c.q, c.cache])}${out}`;
}

/** q's tile and two buffers of K and V tiles, each 64 rows of headDim halves. */
export function mmaSharedBytes(headDim: number): number {
  return 5 * MMA_ROWS * headDim * 2;
}

export function mmaAttentionModule(c: MmaAttentionConfig): PtxModule {
  const hd = c.headDim;
  const rowBytes = hd * 2;
  const tileBytes = MMA_ROWS * rowBytes;
  const chunksPerRow = hd / 8;
  const chunksPerThread = (MMA_ROWS * chunksPerRow) / MMA_THREADS;
  const kSteps = hd / 16;
  const keySteps = MMA_KEYS / 16;
  const qBytes = STORAGE_BYTES[c.q];
  const outType = c.out ?? c.q;
  const outBytes = STORAGE_BYTES[outType];
  return causalModule(
    MMA_ENTRY,
    { target: 'sm_80' },
    { sharedAlign: 128, threads: MMA_THREADS },
    (k, p, smem) => {
      const tid = k.tid();
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const warp = k.shr('u32', k.reg('u32'), tid, 5);
      const { maxSeq, position, scaleLog2, rowDims, kvHead, row0, rows, end } = causalBlock(k, p, MMA_ROWS);
      const { group } = rowDims;
      // Tiles below `unmasked` serve every row whole.
      const firstLimit = k.add('u32', k.reg('u32'), position, k.div('u32', k.reg('u32'), row0, group));
      const unmaskedEnd = k.and(
        'b32',
        k.reg('u32'),
        k.add('u32', k.reg('u32'), firstLimit, 1),
        ~(MMA_KEYS - 1) >>> 0,
      );

      const [qS, kS, vS] = sharedTiles(k, smem, tileBytes, 3);
      const zero = k.mov('u32', k.reg('u32'), 0);

      // Chunk i of this thread: row (tid + 128 i) / chunksPerRow, consecutive threads along a row.
      const chunks = Array.from({ length: chunksPerThread }, (_, i) => {
        const s = k.add('u32', k.reg('u32'), tid, i * MMA_THREADS);
        const row = k.shr('u32', k.reg('u32'), s, Math.log2(chunksPerRow));
        const chunk = k.and('b32', k.reg('u32'), s, chunksPerRow - 1);
        return { row, chunk, shared: swizzled(k, rowBytes, row, chunk) };
      });

      // q, rounded to the cache's dtype, into shared memory (zeros past the last row).
      const q = k.globalPointer(p.q);
      for (const ch of chunks) {
        const packed = k.add('u32', k.reg('u32'), row0, ch.row);
        const { element } = rowOf(k, packed, kvHead, rowDims, hd);
        const ok = k.setp('lt', 'u32', k.reg('pred'), packed, rows);
        const at = k.elementAddress(q, k.madLo('u32', k.reg('u32'), ch.chunk, 8, element), qBytes);
        const values = k.regs('f32', 8);
        loadAsF32(k, c.q, values, at, { ok });
        const words = [0, 1, 2, 3].map((w) =>
          k.cvtPack(c.cache, k.reg('u32'), values[2 * w]!, values[2 * w + 1]!),
        );
        k.stShared('b32', k.add('u32', k.reg('u32'), qS, ch.shared), words as unknown as Vec4<R32>);
      }

      // K and V rows of this thread's chunks, from key 0 on; rows from `end` on are zero-filled, never read.
      const kvRow = k.mulLo('u32', k.reg('u32'), kvHead, maxSeq);
      const sources = (param: typeof p.kCache) => {
        const cache = k.globalPointer(param);
        return chunks.map((ch) =>
          k.elementAddress(
            cache,
            k.madLo(
              'u32',
              k.reg('u32'),
              k.add('u32', k.reg('u32'), kvRow, ch.row),
              hd,
              k.shl('b32', k.reg('u32'), ch.chunk, 3),
            ),
            2,
          ),
        );
      };
      const kSrc = sources(p.kCache);
      const vSrc = sources(p.vCache);
      const copyTile = (dst: R32, src: ReturnType<typeof sources>, j0: R32) => {
        chunks.forEach((ch, i) => {
          const inside = k.setp('lt', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), j0, ch.row), end);
          const at = k.add('u32', k.reg('u32'), dst, ch.shared);
          k.predicated(inside, () => k.cpAsync('cg', at, src[i]!, 16));
          k.predicated(inside, () => k.stShared('b32', at, [zero, zero, zero, zero]), { negate: true });
          k.add('u64', src[i]!, src[i]!, MMA_KEYS * rowBytes);
        });
        k.cpAsyncCommitGroup();
      };

      // ldmatrix addresses. q (A, 16 × 16 per k step): matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
      const { mj, lowBit, highBit } = ldmatrixRoles(k, lane);
      const qRow = k.add(
        'u32',
        k.reg('u32'),
        k.madLo('u32', k.reg('u32'), warp, 16, mj),
        k.shl('b32', k.reg('u32'), lowBit, 3),
      );
      // K (B, 16 keys × 16 k): (keys 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): b of two n8 products.
      const kRow = k.madLo('u32', k.reg('u32'), highBit, 8, mj);
      // V (B through .trans, 16 keys × 16 dims): rows are keys; (k 0-7, n 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
      const vRow = k.madLo('u32', k.reg('u32'), lowBit, 8, mj);
      const tile = new TileFragments(k, rowBytes, kSteps);
      const fragmentAt = (bases: readonly R32[], rowBlock: number, kk: number) =>
        tile.at(bases, rowBlock, kk);
      const qBases = tile.bases(qS, qRow, highBit);
      const kBases = tile.bases(kS, kRow, lowBit);
      const vBases = tile.bases(vS, vRow, highBit);

      // The first K and V tiles load while q's fragments are read.
      copyTile(kS, kSrc, zero);
      copyTile(vS, vSrc, zero);
      k.barSync();
      const qFrag = Array.from({ length: kSteps }, (_, kk) =>
        k.ldmatrix(4, k.regs('u32', 4), fragmentAt(qBases, 0, kk)),
      );

      // The lane's two rows: groupID and groupID + 8 of the warp's 16.
      const groupId = k.shr('u32', k.reg('u32'), lane, 2);
      const colPair = k.shl('b32', k.reg('u32'), k.and('b32', k.reg('u32'), lane, 3), 1);
      const laneRows = [0, 8].map((h) => {
        const row = k.add('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), warp, 16, groupId), row0);
        if (h) k.add('u32', row, row, h);
        const at = rowOf(k, row, kvHead, rowDims, hd);
        return { row, element: at.element, limit: k.add('u32', k.reg('u32'), position, at.token) };
      });
      const mRow = laneRows.map(() => k.mov('f32', k.reg('f32'), Number.NEGATIVE_INFINITY));
      const lRow = laneRows.map(() => k.mov('f32', k.reg('f32'), 0));
      const o = Array.from({ length: hd / 8 }, () => k.regs('f32', 4));
      for (const r of o) for (const x of r) k.mov('f32', x, 0);
      const s = Array.from({ length: MMA_KEYS / 8 }, () => k.regs('f32', 4));

      // K and V tiles alternate between two buffers: the next step's copies run under this step's products.
      const bufferBytes = 2 * tileBytes;
      const buffer = k.mov('u32', k.reg('u32'), 0);
      const j0 = k.reg('u32');
      k.forRange(j0, 0, end, MMA_KEYS, () => {
        // This step's tiles have landed, and every warp is done with the other buffer.
        k.cpAsyncWaitAll();
        k.barSync();
        const other = k.xor('b32', k.reg('u32'), buffer, bufferBytes);
        const next = k.add('u32', k.reg('u32'), j0, MMA_KEYS);
        k.ifThen(k.setp('lt', 'u32', k.reg('pred'), next, end), () => {
          copyTile(k.add('u32', k.reg('u32'), kS, other), kSrc, next);
          copyTile(k.add('u32', k.reg('u32'), vS, other), vSrc, next);
        });
        const kAt = kBases.map((b) => k.add('u32', k.reg('u32'), b, buffer));
        const vAt = vBases.map((b) => k.add('u32', k.reg('u32'), b, buffer));

        for (const r of s) for (const x of r) k.mov('f32', x, 0);
        mmaProduct(
          k,
          c.cache,
          s,
          (kk) => qFrag[kk]!,
          { at: (nb, kk) => fragmentAt(kAt, nb, kk) },
          {
            nBlocks: keySteps,
            kSteps,
          },
        );

        // Keys past a row's last become −inf, only in tiles that cross the diagonal.
        const crosses = k.setp('ge', 'u32', k.reg('pred'), j0, unmaskedEnd);
        k.ifThen(crosses, () => {
          const key0 = k.add('u32', k.reg('u32'), j0, colPair);
          maskColumns(
            k,
            s,
            key0,
            'le',
            laneRows.map((r) => r.limit),
          );
        });

        const rescale = onlineSoftmax(k, s, mRow, lRow, scaleLog2);
        for (const r of o) {
          for (let e = 0; e < 4; e++) k.mul('f32', r[e]!, r[e]!, rescale[e >> 1]!, { rnd: 'rn' });
        }
        // P as A fragments: the accumulators of n8 tiles 2kk and 2kk + 1 are exactly A's layout for keys 16kk … 16kk + 15.
        const pFrag = Array.from({ length: keySteps }, (_, kk) => accumulatorsAsA(k, c.cache, s, kk));
        mmaProduct(
          k,
          c.cache,
          o,
          (kk) => pFrag[kk]!,
          { at: (dn, kb) => fragmentAt(vAt, kb, dn), trans: true },
          { nBlocks: kSteps, kSteps: keySteps, kOuter: true },
        );
        k.mov('u32', buffer, other);
      });
      k.cpAsyncWaitAll();

      // out = O / l, two elements per store.
      const out = k.globalPointer(p.out);
      laneRows.forEach((lr, h) => {
        const l = lRow[h]!;
        for (const offset of [1, 2])
          k.add('f32', l, l, k.shflSync('bfly', k.reg('f32'), l, offset), { rnd: 'rn' });
        const inv = k.rcp(k.reg('f32'), l, 'rn');
        const ok: Pred = k.setp('lt', 'u32', k.reg('pred'), lr.row, rows);
        const at = k.elementAddress(out, k.add('u32', k.reg('u32'), lr.element, colPair), outBytes);
        o.forEach((r, j) => {
          const pair = [r[2 * h]!, r[2 * h + 1]!].map((x) =>
            k.mul('f32', k.reg('f32'), x, inv, { rnd: 'rn' }),
          );
          k.predicated(ok, () => {
            if (outType === 'f32') k.stGlobal('f32', addr(at, 32 * j), pair as unknown as Vec2<F32>);
            else k.stGlobal('b32', addr(at, 16 * j), k.cvtPack(outType, k.reg('u32'), pair[0]!, pair[1]!));
          });
        });
      });
    },
  );
}
