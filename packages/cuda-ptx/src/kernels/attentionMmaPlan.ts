import type { DeviceProperties } from '../driver/driver.js';
import type { KernelEncoder, LaunchValue, Operand } from '../kernel.js';
import { MAX_SPLITS } from './attentionPlan.js';
import type { RopeLayout } from './rope.js';
import { type FloatStorage, storageKey, storageOf } from './storage.js';

// The tensor-core decode attention's configuration, where it applies, and
// how a cache is cut into splits (incrementalAttentionMma.ts is the kernel).

/** Warps a block; each takes every DECODE_MMA_WARPS-th tile of the split. */
export const DECODE_MMA_WARPS = 4;
/** Tokens of a warp's tile: one k step of the P·V product. */
export const DECODE_MMA_TILE = 16;
/** Tokens a block's warps take in one round. */
export const DECODE_MMA_ROUND = DECODE_MMA_WARPS * DECODE_MMA_TILE;
export const DECODE_MMA_HEAD_DIMS: readonly number[] = [64, 128];
/** Query heads a kv head may have: the A operand's first 8 rows (the other 8 hold remainders). */
export const DECODE_MMA_MAX_GROUP = 8;
/** Shared memory a block aims at, which sets its stages (two blocks an SM at least). */
const STAGE_BUDGET = 64 * 1024;

export interface DecodeMmaConfig {
  readonly headDim: number;
  /** Query heads a kv head has (1 … DECODE_MMA_MAX_GROUP). */
  readonly group: number;
  /** Whether blocks split the cache and leave partial states, the last of a kv head merging them. */
  readonly split: boolean;
  /** Whether seqLen is read from device memory (`seqLenAt`) instead of a parameter. */
  readonly deviceLength: boolean;
  /** With deviceLength: `seqLenAt` holds the last row's position, one less than the length. */
  readonly fromPosition?: boolean;
  /**
   * ropeAttention: q is a fused q, k, v row [nHeads + 2·nKvHeads, headDim];
   * the kernel rotates q as it loads it, and the warp whose tile holds the
   * last row (the token's position, seqLen − 1) rotates that kv head's k,
   * writes it and v into the caches and over its tile's copy in shared
   * memory (attentionMmaRope.ts).
   */
  readonly rope?: { readonly layout: RopeLayout; readonly table: boolean };
  /** Storage of q and out. */
  readonly act: FloatStorage;
  /** The caches' half type: the products' operands. */
  readonly cache: 'f16' | 'bf16';
  /**
   * Page pools [numPages, kvHeads, pageSize, headDim] read through block
   * tables, one sequence per block along z, its length read from device
   * memory: log2 of the page size (at least 16, so that a tile lies in one
   * page). A sequence of length 0 leaves zeros.
   */
  readonly pageShift?: number;
}

/** Bytes of one warp's stage: a K and a V tile of 16 rows. */
function stageBytes(headDim: number): number {
  return 2 * DECODE_MMA_TILE * headDim * 2;
}

/** Stages a warp's ring holds: as many as fit the budget, 2 to 4. */
export function decodeMmaStages(headDim: number): number {
  return Math.max(2, Math.min(4, Math.floor(STAGE_BUDGET / (DECODE_MMA_WARPS * stageBytes(headDim)))));
}

/** The block's dynamic shared memory: every warp's ring (reused for the merge of the warps' states). */
export function decodeMmaSharedBytes(c: Pick<DecodeMmaConfig, 'headDim' | 'group'>): number {
  const rings = DECODE_MMA_WARPS * decodeMmaStages(c.headDim) * stageBytes(c.headDim);
  const states = DECODE_MMA_WARPS * c.group * (c.headDim + 2) * 4;
  return Math.max(rings, states);
}

export function decodeMmaKey(c: DecodeMmaConfig): string {
  const paged = c.pageShift === undefined ? '' : `/paged${c.pageShift}`;
  const length = c.deviceLength ? (c.fromPosition ? '/pos' : '/len') : '';
  const rope = c.rope ? `/rope-${c.rope.layout}${c.rope.table ? '-table' : ''}` : '';
  return `decoding/attention-mma/${c.split ? 'split' : 'single'}/d${c.headDim}g${c.group}${length}${rope}${paged}${storageKey([c.act, c.cache])}`;
}

/** Blocks an SM is meant to hold (each has DECODE_MMA_WARPS warps and 64 KiB of stages). */
const BLOCKS_PER_SM = 2;

export interface DecodeMmaPlan {
  readonly splits: number;
  /** Tokens a split, whole rounds of DECODE_MMA_ROUND (the last split may have fewer). */
  readonly splitTokens: number;
}

/** A cache of at most this many tokens a kv head takes one pass: a merge costs more than the parallelism gives. */
export const SINGLE_PASS_TOKENS = 256;
/** Splits of at least this many tokens where that still gives every SM a block: fewer states to merge. */
const LONG_SPLIT_TOKENS = 256;

/**
 * Splits of whole rounds of the block's warps. Measured on an H200 (32
 * query heads over 8 kv heads): a cache of up to SINGLE_PASS_TOKENS takes
 * one pass (256 tokens, d 64: 3.97 µs against 5.63 in 4 splits and their
 * merge); a longer one takes splits of at least LONG_SPLIT_TOKENS where
 * that leaves a block for every SM (4,096 tokens, d 128: 11.4 µs in 16
 * splits against 12.3 in 33), else as many as give every SM a block (1,024
 * tokens: 16 splits of 64, 8.28 µs against 8.95 in 4 of 256), and never
 * more than BLOCKS_PER_SM blocks an SM or MAX_SPLITS. `minSplitTokens`
 * (the attentionSplitTokens switch) replaces the rule with splits of at
 * least that many tokens.
 */
export function planDecodeMma(
  device: Pick<DeviceProperties, 'multiprocessors'>,
  nKvHeads: number,
  seqLen: number,
  minSplitTokens?: number,
): DecodeMmaPlan {
  const wanted = Math.ceil((device.multiprocessors * BLOCKS_PER_SM) / nKvHeads);
  const rounds = Math.floor(seqLen / Math.max(DECODE_MMA_ROUND, minSplitTokens ?? 0));
  const ruled =
    minSplitTokens !== undefined
      ? rounds
      : seqLen <= SINGLE_PASS_TOKENS
        ? 1
        : Math.min(
            rounds,
            Math.max(Math.floor(seqLen / LONG_SPLIT_TOKENS), Math.ceil(device.multiprocessors / nKvHeads)),
          );
  const splits = Math.max(1, Math.min(wanted, MAX_SPLITS, ruled));
  const splitTokens = Math.max(
    DECODE_MMA_ROUND,
    Math.ceil(seqLen / splits / DECODE_MMA_ROUND) * DECODE_MMA_ROUND,
  );
  return { splits: Math.max(1, Math.ceil(seqLen / splitTokens)), splitTokens };
}

/**
 * Whether the tensor-core kernel takes this attention: bf16 or f16 caches on sm_80
 * or later, head dimension 64 or 128, at most 8 query heads a kv head,
 * caches 16-byte aligned (cp.async) and q 8-byte aligned (pairs), unless
 * the attentionKernel switch asks for the CUDA-core kernel.
 */
export function decodeMmaApplies(
  encoder: KernelEncoder,
  shape: { readonly nHeads: number; readonly nKvHeads: number; readonly headDim: number },
  q: Operand,
  kCache: Operand,
  vCache: Operand,
): boolean {
  return (
    encoder.tuning.attentionKernel !== 'lanes' &&
    (encoder.device.computeCapability?.[0] ?? 0) >= 8 &&
    storageOf(kCache) !== 'f32' &&
    storageOf(vCache) === storageOf(kCache) &&
    DECODE_MMA_HEAD_DIMS.includes(shape.headDim) &&
    shape.nHeads / shape.nKvHeads <= DECODE_MMA_MAX_GROUP &&
    kCache.ptr % 16n === 0n &&
    vCache.ptr % 16n === 0n &&
    q.ptr % 8n === 0n
  );
}

/** Pools whose pages hold a power of two of at least one tile's rows: log2 of the page size, else undefined. */
export function decodeMmaPageShift(pageSize: number): number | undefined {
  const shift = Math.log2(pageSize);
  return Number.isInteger(shift) && pageSize >= DECODE_MMA_TILE ? shift : undefined;
}

/** Where a decode attention reads: a contiguous cache of a length given or on the device, or page pools. */
export type DecodeMmaSource =
  | {
      readonly kind: 'cache';
      readonly maxSeq: number;
      readonly seqLen: number | Operand;
      /** seqLen's operand holds the last row's position, one less than the length. */
      readonly fromPosition?: boolean;
    }
  | {
      readonly kind: 'pages';
      readonly batch: number;
      readonly pageShift: number;
      /** blockTables, seqLens, pageSize, maxPages, kvHeads, numPages. */
      readonly args: Readonly<Record<string, LaunchValue>>;
      /** maxPages · pageSize: every sequence is planned for its table's capacity. */
      readonly capacity: number;
    };
