import { FLOAT, kvCacheScatter, ropeKvScatter } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import {
  cudaKernel,
  elementPtr,
  type KernelEncoder,
  type LaunchValue,
  launchArgs,
  type Operand,
} from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param, Pred, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { asVector, BLOCK, checkElementCount, gridFor, loadPointer, loadU32 } from './common.js';
import { loadDeviceU32, type VectorWidth, vectorWidth } from './decodingAccess.js';
import {
  headsPerThread,
  loadRopeFrequencies,
  PAIR_BITS,
  pairIndexBits,
  type RopeLayout,
  ropeFrequencyParams,
  ropeSinCos,
  rotatePair,
  thetaPowers,
} from './rope.js';
import {
  type FloatStorage,
  loadAsF32,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
  storesOf,
} from './storage.js';

// The KV-cache writes of decoding: the scatter of new rows into the cache,
// and the same with RoPE applied to q and k on the way (ropeKvScatter).
//
// A position may instead be read from a device tensor when the kernel runs,
// so that a recorded graph replays for the value last written there; a device
// position whose rows do not fit writes nothing.

// ---- the write position --------------------------------------------------------------

/** The position as a parameter, or its address and the last position whose rows fit. */
function positionParams(devicePosition: boolean): Record<string, ParamType> {
  return devicePosition ? { positionAt: 'ptr', lastPosition: 'u32' } : { position: 'u32' };
}

/** The launch values of `positionParams`. */
function positionArgs(
  positionAt: Operand | undefined,
  position: number,
  lastPosition: number,
): Record<string, LaunchValue> {
  return positionAt ? { positionAt, lastPosition } : { position };
}

/**
 * The write position, and the count of items to write: `n`, or `unfitCount`
 * where a device position's rows do not fit the cache.
 */
function loadPosition(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  devicePosition: boolean,
  n: R32,
  unfitCount: R32 | number,
): { position: R32; n: R32 } {
  if (!devicePosition) return { position: loadU32(k, p, 'position'), n };
  const position = loadDeviceU32(k, loadPointer(k, p, 'positionAt'));
  // Negative positions are huge as u32: both ends fail one comparison.
  const fits = k.setp('le', 'u32', k.reg('pred'), position, loadU32(k, p, 'lastPosition'));
  return { position, n: k.selp('u32', k.reg('u32'), n, unfitCount, fits) };
}

/** The cache row of token t, kv head h: h · maxSeq + position + t. */
function cacheRow(k: KernelBuilder, maxSeq: R32, position: R32, h: R32, t: R32): R32 {
  const row = k.madLo('u32', k.reg('u32'), h, maxSeq, position);
  return k.add('u32', row, row, t);
}

// ---- kvCacheScatter ---------------------------------------------------------------

/** Storage of the rows written (values, and q, k, v of ropeKvScatter) and of the caches. */
export interface CacheTypes {
  readonly rows: FloatStorage;
  readonly cache: FloatStorage;
}

const F32_CACHE: CacheTypes = { rows: 'f32', cache: 'f32' };

const allF32 = (t: CacheTypes) => t.rows === 'f32' && t.cache === 'f32';

export function scatterKey(width: VectorWidth, devicePosition = false, types = F32_CACHE): string {
  return `decoding/kvCacheScatter/v${width}${devicePosition ? '/at' : ''}${storageKey([types.rows, types.cache])}`;
}

/**
 * cache[h, position + t, :] = values[t, h·headDim : (h+1)·headDim], counted
 * in vectors of `width` words: a grid-stride loop over the values in order,
 * so reads are contiguous and writes are contiguous runs of a row. f32 words
 * are moved as u32 (bit-exact); half storage is widened and rounded to the
 * cache's (a vector is then `width` elements).
 */
export function scatterModule(width: VectorWidth, devicePosition = false, types = F32_CACHE): PtxModule {
  const m = new PtxModule();
  const where = positionParams(devicePosition);
  m.entry(
    'kv_cache_scatter',
    {
      values: 'ptr',
      cache: 'ptr',
      n: 'u32',
      rowVectors: 'u32',
      tokenVectors: 'u32',
      maxSeq: 'u32',
      ...where,
    } as Record<string, ParamType>,
    (k, p) => {
      const values = loadPointer(k, p, 'values');
      const cache = loadPointer(k, p, 'cache');
      const rowVectors = loadU32(k, p, 'rowVectors');
      const tokenVectors = loadU32(k, p, 'tokenVectors');
      const maxSeq = loadU32(k, p, 'maxSeq');
      const bytes = 4 * width;
      const { position, n } = loadPosition(k, p, devicePosition, loadU32(k, p, 'n'), 0);
      k.gridStrideLoop(n, (i) => {
        const t = k.div('u32', k.reg('u32'), i, tokenVectors);
        const inToken = k.sub('u32', k.reg('u32'), i, k.mulLo('u32', k.reg('u32'), t, tokenVectors));
        const h = k.div('u32', k.reg('u32'), inToken, rowVectors);
        const e = k.sub('u32', k.reg('u32'), inToken, k.mulLo('u32', k.reg('u32'), h, rowVectors));
        const row = cacheRow(k, maxSeq, position, h, t);
        const dst = k.madLo('u32', k.reg('u32'), row, rowVectors, e);
        if (allF32(types)) {
          const words = k.regs('u32', width);
          k.ldGlobal('u32', asVector(words), k.elementAddress(values, i, bytes), { nc: true });
          k.stGlobal('u32', k.elementAddress(cache, dst, bytes), asVector(words));
          return;
        }
        const floats = k.regs('f32', width);
        loadAsF32(k, types.rows, floats, k.elementAddress(values, i, STORAGE_BYTES[types.rows] * width));
        storesOf(k, types.cache, floats)(k.elementAddress(cache, dst, STORAGE_BYTES[types.cache] * width));
      });
    },
    { maxThreadsPerBlock: BLOCK, triggerDependents: true },
  );
  return m;
}

export const scatterKernel = cudaKernel(
  kvCacheScatter,
  (encoder, { inputs, attrs }) => {
    const cache = inputs[0]!;
    const values = inputs[1]!;
    const positionAt = inputs[2];
    if (values.size === 0) return;
    checkElementCount('kvCacheScatter', 'cache', cache.size);
    const [nHeads, maxSeq, headDim] = cache.shape as [number, number, number];
    const width = vectorWidth(headDim, [cache.ptr, values.ptr]);
    const rowVectors = headDim / width;
    const n = values.size / width;
    const tokens = values.size / (nHeads * headDim);
    const where = positionArgs(positionAt, attrs.position, maxSeq - tokens);
    const types = { rows: storageOf(values), cache: storageOf(cache) };
    encoder.launch({
      key: scatterKey(width, positionAt !== undefined, types),
      module: () => scatterModule(width, positionAt !== undefined, types),
      entry: 'kv_cache_scatter',
      grid: gridFor(encoder.device, n),
      block: BLOCK,
      args: {
        values,
        cache,
        n,
        rowVectors,
        tokenVectors: nHeads * rowVectors,
        maxSeq,
        ...where,
      },
    });
  },
  { dtypes: FLOAT },
);

// ---- ropeKvScatter ------------------------------------------------------------

/** ropeKvScatter's rows: token t at cache row position + t of each head, rotated by position + t. */
function contiguousPlacement(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  devicePosition: boolean,
  maxSeq: R32,
  qPairs: R32,
): RowPlacement {
  const { position, n } = loadPosition(k, p, devicePosition, loadU32(k, p, 'n'), qPairs);
  return {
    n,
    rowOf: (h, t) => ({ row: cacheRow(k, maxSeq, position, h, t) }),
    positionOf: (t) => k.add('u32', k.reg('u32'), position, t),
  };
}

/**
 * ropePagedKvWrite's rows: row t at slots[t] = page · pageSize + offset, in
 * pool row (page · kvHeads + h) · pageSize + offset, written only for a slot
 * inside the pool; rotated by positions[t].
 */
function pagedPlacement(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  kvHeads: R32,
): RowPlacement {
  const slots = loadPointer(k, p, 'slots');
  const positions = loadPointer(k, p, 'positions');
  const pageSize = loadU32(k, p, 'pageSize');
  const capacity = loadU32(k, p, 'capacity');
  return {
    n: loadU32(k, p, 'n'),
    rowOf(h, t) {
      const slot = loadDeviceU32(k, k.elementAddress(slots, t, 4));
      // Negative slots (idle rows) are huge as u32.
      const ok = k.setp('lt', 'u32', k.reg('pred'), slot, capacity);
      const page = k.div('u32', k.reg('u32'), slot, pageSize);
      const offset = k.sub('u32', k.reg('u32'), slot, k.mulLo('u32', k.reg('u32'), page, pageSize));
      const headRow = k.madLo('u32', k.reg('u32'), page, kvHeads, h);
      return { row: k.madLo('u32', k.reg('u32'), headRow, pageSize, offset), ok };
    },
    positionOf: (t) => loadDeviceU32(k, k.elementAddress(positions, t, 4)),
  };
}

/** One ropeKvScatter kernel: what `ropeScatterKey` names and `ropeScatterModule` builds. */
export interface RopeScatterVariant {
  readonly layout: RopeLayout;
  /** Whether the position is read from a device tensor when the kernel runs. */
  readonly devicePosition?: boolean;
  readonly types?: CacheTypes;
  /** Whether the frequencies come from a table rather than theta's powers. */
  readonly table?: boolean;
  /** ropePagedKvWrite: rows placed by slot. */
  readonly paged?: boolean;
  /** Heads of q (or of k) one pair item rotates with its angle (`headsPerThread`); a power of 2. */
  readonly headsPerThread?: number;
  /** Bits a pair index can have: the powers of theta the kernel multiplies (`pairIndexBits`). */
  readonly indexBits?: number;
}

export function ropeScatterKey(v: RopeScatterVariant): string {
  const types = v.types ?? F32_CACHE;
  const runs = (v.headsPerThread ?? 1) > 1 ? `/heads${v.headsPerThread}` : '';
  const bits = v.table || (v.indexBits ?? PAIR_BITS) === PAIR_BITS ? '' : `/bits${v.indexBits}`;
  return `decoding/ropeKvScatter/${v.layout}${v.devicePosition ? '/at' : ''}${v.table ? '/table' : ''}${v.paged ? '/paged' : ''}${runs}${bits}${storageKey([types.rows, types.cache])}`;
}

/** ropePagedKvWrite's parameters in place of maxSeq and the position: per-row slots and positions. */
const PAGED_ROWS: Record<string, ParamType> = {
  slots: 'ptr',
  positions: 'ptr',
  pageSize: 'u32',
  capacity: 'u32',
};

/** Where row t of kv head h goes, whether it is written at all, and the position it is rotated by. */
interface RowPlacement {
  rowOf(h: R32, t: R32): { row: R32; ok?: Pred };
  positionOf(t: R32): R32;
  n: R32;
}

/**
 * One thread per item, in order: the rotated pairs of q (written to y), the
 * rotated pairs of k (written to their kCache rows), then the words of v
 * (copied to their vCache rows). A pair item is (token t, a run of
 * `headsPerThread` heads of q or of k, pair i): its angle, the kernel's main
 * cost, is computed once for the run, whose loads are issued together. A
 * device position whose rows do not fit leaves only the items of q, so
 * nothing is written to the caches.
 */
export function ropeScatterModule(v: RopeScatterVariant): PtxModule {
  const { layout, devicePosition = false, types = F32_CACHE, table = false, paged = false } = v;
  const runLength = v.headsPerThread ?? 1;
  const rowBytes = STORAGE_BYTES[types.rows];
  const cacheBytes = STORAGE_BYTES[types.cache];
  const m = new PtxModule();
  m.entry(
    'rope_kv_scatter',
    {
      q: 'ptr',
      k: 'ptr',
      v: 'ptr',
      y: 'ptr',
      kCache: 'ptr',
      vCache: 'ptr',
      qPairs: 'u32',
      pairs: 'u32',
      n: 'u32',
      half: 'u32',
      heads: 'u32',
      kvHeads: 'u32',
      ...(paged ? {} : { maxSeq: 'u32' }),
      // Elements between a token's row of q (of k and v) and the next past its heads: 0, or the
      // other heads of a fused q, k, v row.
      qGap: 'u32',
      kvGap: 'u32',
      // The pairs' frequencies: a table's address, or theta's powers.
      ...ropeFrequencyParams(table),
      ...(paged ? PAGED_ROWS : positionParams(devicePosition)),
    } as Record<string, ParamType>,
    (k, p) => {
      const [q, kIn, vIn, y, kCache, vCache] = ['q', 'k', 'v', 'y', 'kCache', 'vCache'].map((name) =>
        loadPointer(k, p, name),
      ) as [R64, R64, R64, R64, R64, R64];
      const [qPairs, pairs, half, heads, kvHeads] = ['qPairs', 'pairs', 'half', 'heads', 'kvHeads'].map(
        (name) => loadU32(k, p, name),
      ) as [R32, R32, R32, R32, R32];
      const maxSeq = paged ? undefined : loadU32(k, p, 'maxSeq');
      const [qGap, kvGap] = [loadU32(k, p, 'qGap'), loadU32(k, p, 'kvGap')];
      const loaded = loadRopeFrequencies(k, p, table);
      const frequencies =
        'powers' in loaded ? { powers: loaded.powers.slice(0, v.indexBits ?? PAIR_BITS) } : loaded;
      const headDim = k.add('u32', k.reg('u32'), half, half);
      const runsOf = (count: R32) =>
        k.shr('u32', k.reg('u32'), k.add('u32', k.reg('u32'), count, runLength - 1), Math.log2(runLength));
      const [qRuns, kvRuns] = [runsOf(heads), runsOf(kvHeads)];
      const place = paged
        ? pagedPlacement(k, p, kvHeads)
        : contiguousPlacement(k, p, devicePosition, maxSeq!, qPairs);
      const n = place.n;
      k.gridStrideLoop(n, (item) => {
        const isV = k.setp('ge', 'u32', k.reg('pred'), item, pairs);
        k.ifElse(
          isV,
          () => {
            const j = k.sub('u32', k.reg('u32'), item, pairs);
            const rest = k.div('u32', k.reg('u32'), j, headDim);
            const e = k.sub('u32', k.reg('u32'), j, k.mulLo('u32', k.reg('u32'), rest, headDim));
            const t = k.div('u32', k.reg('u32'), rest, kvHeads);
            const h = k.sub('u32', k.reg('u32'), rest, k.mulLo('u32', k.reg('u32'), t, kvHeads));
            const { row, ok } = place.rowOf(h, t);
            const dst = k.madLo('u32', k.reg('u32'), row, headDim, e);
            const src = k.madLo('u32', k.reg('u32'), t, kvGap, j);
            const copy = () => {
              if (allF32(types)) {
                const word = k.ldGlobal('u32', k.reg('u32'), k.elementAddress(vIn, src, 4), { nc: true });
                k.stGlobal('u32', k.elementAddress(vCache, dst, 4), word);
                return;
              }
              const value = loadOneAsF32(k, types.rows, k.elementAddress(vIn, src, rowBytes));
              storeFromF32(k, types.cache, k.elementAddress(vCache, dst, cacheBytes), value);
            };
            if (ok) k.predicated(ok, copy);
            else copy();
          },
          () => {
            // A run of pairs of q or of k: the same rotation, from and to different places.
            const isK = k.setp('ge', 'u32', k.reg('pred'), item, qPairs);
            const j = k.sub('u32', k.reg('u32'), item, k.selp('u32', k.reg('u32'), qPairs, 0, isK));
            const rowHeads = k.selp('u32', k.reg('u32'), kvHeads, heads, isK);
            const rowRuns = k.selp('u32', k.reg('u32'), kvRuns, qRuns, isK);
            const rest = k.div('u32', k.reg('u32'), j, half);
            const i = k.sub('u32', k.reg('u32'), j, k.mulLo('u32', k.reg('u32'), rest, half));
            const t = k.div('u32', k.reg('u32'), rest, rowRuns);
            const run = k.sub('u32', k.reg('u32'), rest, k.mulLo('u32', k.reg('u32'), t, rowRuns));
            const { sin, cos } = ropeSinCos(k, place.positionOf(t), i, frequencies);
            // Element offsets of the pair in a head: (i, i + half) or (2i, 2i + 1).
            const first = layout === 'half' ? i : k.add('u32', k.reg('u32'), i, i);
            const second = k.add('u32', k.reg('u32'), first, layout === 'half' ? half : 1);
            const gap = k.selp('u32', k.reg('u32'), kvGap, qGap, isK);
            const from = k.selp('u64', k.reg('u64'), kIn, q, isK);
            const head0 = k.mulLo('u32', k.reg('u32'), run, runLength);
            const tokenHead0 = k.madLo('u32', k.reg('u32'), t, rowHeads, head0);
            // Every head's loads first, then the rotations and stores.
            const loads = Array.from({ length: runLength }, (_, u) => {
              const h = k.add('u32', k.reg('u32'), head0, u);
              const inRow = u === 0 ? undefined : k.setp('lt', 'u32', k.reg('pred'), h, rowHeads);
              const base = k.mulLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), tokenHead0, u), headDim);
              const src = k.madLo('u32', k.reg('u32'), t, gap, base);
              const values = [first, second].map((at) =>
                loadOneAsF32(
                  k,
                  types.rows,
                  k.elementAddress(from, k.add('u32', k.reg('u32'), src, at), rowBytes),
                  inRow,
                ),
              ) as [F32, F32];
              return { h, inRow, base, values };
            });
            for (const { h, inRow, base, values } of loads) {
              // A q item's row is not used (nor, paged, its slot's check).
              const placed = place.rowOf(h, t);
              const dst = k.selp(
                'u32',
                k.reg('u32'),
                k.mulLo('u32', k.reg('u32'), placed.row, headDim),
                base,
                isK,
              );
              const rotated = rotatePair(k, values[0], values[1], cos, sin);
              const stores = () => {
                for (const [e, at] of [first, second].entries()) {
                  const index = k.add('u32', k.reg('u32'), dst, at);
                  if (types.rows === types.cache && !placed.ok) {
                    const to = k.selp('u64', k.reg('u64'), kCache, y, isK);
                    storeFromF32(k, types.rows, k.elementAddress(to, index, rowBytes), rotated[e]!);
                    continue;
                  }
                  // k goes to its cache, q to y: two storages.
                  k.ifElse(
                    isK,
                    () => {
                      const store = () =>
                        storeFromF32(
                          k,
                          types.cache,
                          k.elementAddress(kCache, index, cacheBytes),
                          rotated[e]!,
                        );
                      if (placed.ok) k.predicated(placed.ok, store);
                      else store();
                    },
                    () => storeFromF32(k, types.rows, k.elementAddress(y, index, rowBytes), rotated[e]!),
                  );
                }
              };
              if (inRow) k.ifThen(inRow, stores);
              else stores();
            }
          },
        );
      });
    },
    { maxThreadsPerBlock: BLOCK, triggerDependents: true },
  );
  return m;
}

/**
 * The rope-and-write module's row arguments: q, k and v (a fused q's k and v
 * are q's operand from their first heads on, a token's row apart), the item
 * counts (pair items of `headsPerThread` heads each), and the gaps between
 * one token's rows and the next.
 */
export function ropeScatterRows(
  q: Operand,
  kIn: Operand | undefined,
  v: Operand | undefined,
  [tokens, heads, headDim]: readonly [number, number, number],
  kvHeads: number,
  headsPerThread = 1,
) {
  const fused = kIn === undefined;
  const width = kvHeads * headDim;
  const row = (heads + 2 * kvHeads) * headDim;
  const half = headDim / 2;
  const runs = (count: number) => Math.ceil(count / headsPerThread);
  const qPairs = tokens * runs(heads) * half;
  const pairs = qPairs + tokens * runs(kvHeads) * half;
  return {
    q,
    k: kIn ?? { ...q, ptr: elementPtr(q, heads * headDim) },
    v: v ?? { ...q, ptr: elementPtr(q, (heads + kvHeads) * headDim) },
    qPairs,
    pairs,
    n: pairs + tokens * width,
    half,
    heads,
    kvHeads,
    qGap: fused ? row - heads * headDim : 0,
    kvGap: fused ? row - width : 0,
  };
}

/**
 * The variant for `tokens` rows of `heads` q heads over `kvHeads`: runs of
 * heads share an angle once the pairs fill the device (`headsPerThread`),
 * and theta's powers stop at the bits a pair index has.
 */
export function ropeScatterVariant(
  device: Pick<DeviceProperties, 'multiprocessors' | 'maxThreadsPerMultiprocessor'>,
  layout: RopeLayout,
  [tokens, heads, headDim]: readonly [number, number, number],
  kvHeads: number,
  rest: Pick<RopeScatterVariant, 'devicePosition' | 'types' | 'table' | 'paged'>,
): RopeScatterVariant {
  const half = headDim / 2;
  const runs = headsPerThread(device, tokens * (heads + kvHeads) * half, Math.min(heads, kvHeads));
  return { layout, ...rest, headsPerThread: runs, indexBits: pairIndexBits(half) };
}

export const ropeScatterKernel = cudaKernel(
  ropeKvScatter,
  (encoder, { inputs, outputs, attrs }) => launchRopeKvScatter(encoder, inputs, outputs, attrs),
  { dtypes: FLOAT },
);

/** ropeKvScatter's launch for its inputs and outputs in spec order (also ropeAttention's first pass). */
export function launchRopeKvScatter(
  encoder: KernelEncoder,
  inputs: readonly (Operand | undefined)[],
  outputs: readonly Operand[],
  attrs: { readonly position: number; readonly theta: number; readonly layout: RopeLayout },
): void {
  const [q, kIn, v, kCache, vCache, positionAt, frequencies] = inputs as [
    Operand,
    Operand | undefined,
    Operand | undefined,
    Operand,
    Operand,
    Operand | undefined,
    Operand | undefined,
  ];
  const table = frequencies !== undefined;
  const y = outputs[0]!;
  if (y.size === 0) return;
  checkElementCount('ropeKvScatter', 'kCache', kCache.size);
  const [tokens, , headDim] = y.shape as [number, number, number];
  const [kvHeads, maxSeq] = kCache.shape as [number, number, number];
  const width = kvHeads * headDim;
  checkElementCount('ropeKvScatter', 'q', y.size + 2 * tokens * width);
  const heads = y.shape[1]!;
  const variant = ropeScatterVariant(encoder.device, attrs.layout, [tokens, heads, headDim], kvHeads, {
    devicePosition: positionAt !== undefined,
    types: { rows: storageOf(q), cache: storageOf(kCache) },
    table,
  });
  launchRopeRows(
    encoder,
    variant,
    { q, kIn, v, y, kvHeads },
    { y, kCache, vCache, maxSeq },
    frequencies ? { frequencies } : thetaPowers('ropeKvScatter', attrs.theta, headDim),
    positionArgs(positionAt, attrs.position, maxSeq - tokens),
  );
}

/**
 * The rope-and-write kernel of `variant` over q, k and v rows (k and v left
 * out: read from q's fused row) into y and the placement's caches or pools,
 * with `frequencyArgs` a frequency table's or theta's powers
 * (ropeKvScatter's and ropePagedKvWrite's launch).
 */
export function launchRopeRows(
  encoder: KernelEncoder,
  variant: RopeScatterVariant,
  t: {
    readonly q: Operand;
    readonly kIn: Operand | undefined;
    readonly v: Operand | undefined;
    readonly y: Operand;
    readonly kvHeads: number;
  },
  placement: Readonly<Record<string, LaunchValue>>,
  frequencyArgs: Readonly<Record<string, LaunchValue>>,
  /** ropeKvScatter's position (a parameter, or a device tensor's address). */
  where: Readonly<Record<string, LaunchValue>> = {},
): void {
  const shape = t.y.shape as [number, number, number];
  const rows = ropeScatterRows(t.q, t.kIn, t.v, shape, t.kvHeads, variant.headsPerThread);
  encoder.launch({
    key: ropeScatterKey(variant),
    module: () => ropeScatterModule(variant),
    entry: 'rope_kv_scatter',
    grid: gridFor(encoder.device, rows.n),
    block: BLOCK,
    args: launchArgs(rows, placement, frequencyArgs, where),
  });
}
