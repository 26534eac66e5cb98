import { pow2AtLeast } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import type { VectorWidth } from './decodingAccess.js';
import { type FloatStorage, storageKey } from './storage.js';

// incrementalAttention's lane layout and split plan: how a head's dimensions
// spread over a warp's lanes, and how many blocks split the cache.

/** The largest head dimension the attention kernels keep in registers (32 f32 per lane). */
export const MAX_HEAD_DIM = 1024;
/** Warps per attention block; each walks its own tokens, merged once at the end. */
export const ATTENTION_WARPS = 4;
/**
 * A split has at least this many tokens (unless the attentionSplitTokens
 * switch names another). On an H200, 32 × 128 query heads over 8 bf16 kv
 * heads: 256 tokens 8.78 µs at 32 against 10.1 at 64 and 7.97 at 16; 1,024
 * tokens 11.2 at 32, 11.0 at 64 and 13.0 at 16 (more partial states to
 * merge); 4,096 the same at all three.
 */
export const MIN_SPLIT_TOKENS = 32;
/** Splits per head at most, which bounds the merge's serial work in the last block. */
export const MAX_SPLITS = 64;
/** Blocks aimed for per SM: two waves of eight resident blocks. */
export const TARGET_BLOCKS_PER_SM = 16;

/**
 * How a warp covers a head's row: `lanes` consecutive lanes (a slot) share
 * one token, each holding `perLane` vectors of `width` words at chunks
 * laneInSlot + i·lanes; a warp holds `slots` tokens at once.
 */
export interface LaneLayout {
  readonly width: VectorWidth;
  /** Vectors per row (headDim / width). */
  readonly chunks: number;
  readonly lanes: number;
  readonly perLane: number;
  readonly slots: number;
}

export function laneLayout(headDim: number, width: VectorWidth): LaneLayout {
  const chunks = headDim / width;
  const lanes = Math.min(32, pow2AtLeast(chunks));
  return { width, chunks, lanes, perLane: Math.ceil(chunks / lanes), slots: 32 / lanes };
}

/** The compile-time configuration of the attention kernel. */
export interface AttentionConfig {
  readonly headDim: number;
  readonly width: VectorWidth;
  /** Query heads per block (they share the kv head, so its rows are loaded once for all). */
  readonly headsPerBlock: number;
  /** Tokens per slot whose loads are issued together. */
  readonly unroll: number;
  /** Whether blocks split the cache and leave partial states, the last of a head block merging them. */
  readonly split: boolean;
  /** Whether seqLen is read from device memory (`seqLenAt`) instead of a parameter. */
  readonly deviceLength?: boolean;
  /** With deviceLength: `seqLenAt` holds the last row's position, one less than the length (ropeAttention). */
  readonly fromPosition?: boolean;
  /** Storage of q and out (`act`) and of the caches; all f32 when absent. The partial states are f32. */
  readonly types?: { readonly act: FloatStorage; readonly cache: FloatStorage };
  /**
   * Whether the caches are page pools read through block tables, one
   * sequence per block along z, its length read from device memory.
   */
  readonly paged?: boolean;
  /**
   * Paged, with a power-of-two page size: its log2, so that a token's page
   * and offset are a shift and a mask rather than a division per token.
   */
  readonly pageShift?: number;
}

export interface AttentionPlan {
  readonly config: AttentionConfig;
  readonly splits: number;
  /** Tokens per split (the last one may have fewer). */
  readonly splitTokens: number;
  /** Blocks along the heads: nHeads / headsPerBlock. */
  readonly headBlocks: number;
}

export interface AttentionShape {
  readonly nHeads: number;
  readonly nKvHeads: number;
  readonly headDim: number;
  readonly seqLen: number;
  /** Sequences attended at once (paged attention's B), each with the grid of one; 1 when absent. */
  readonly batch?: number;
}

/** The largest divisor of `n` that is at most `limit`. */
function largestDivisorUpTo(n: number, limit: number): number {
  for (let d = Math.min(n, limit); d > 1; d--) if (n % d === 0) return d;
  return 1;
}

/** The backend's switches a plan takes (absent: the measured defaults). */
export interface AttentionTuning {
  readonly minSplitTokens?: number;
  readonly maxSplits?: number;
  readonly unroll?: number;
}

/**
 * Launch plan: query heads per block and tokens per load group from the
 * registers a lane needs (q and the accumulators grow with both), then
 * enough splits of the sequence that the grid fills the SMs about twice
 * over, each split at least `minSplitTokens` long (MIN_SPLIT_TOKENS
 * unless the backend's tuning names another) and at most `maxSplits` of
 * them (MAX_SPLITS); one split means one pass. `unroll`, where given,
 * replaces the tokens per load group.
 */
export function planAttention(
  device: Pick<DeviceProperties, 'multiprocessors'>,
  shape: AttentionShape,
  width: VectorWidth,
  tuning: AttentionTuning = {},
): AttentionPlan {
  const minSplitTokens = tuning.minSplitTokens ?? MIN_SPLIT_TOKENS;
  const maxSplits = tuning.maxSplits ?? MAX_SPLITS;
  const { nHeads, nKvHeads, headDim, seqLen } = shape;
  const layout = laneLayout(headDim, width);
  const dimsPerLane = layout.perLane * width;
  const unroll = tuning.unroll ?? (dimsPerLane <= 4 ? 4 : dimsPerLane <= 8 ? 2 : 1);
  const headsPerBlock = largestDivisorUpTo(nHeads / nKvHeads, Math.max(1, Math.min(8, 32 / dimsPerLane)));
  const headBlocks = nHeads / headsPerBlock;
  const wanted = Math.ceil(
    (device.multiprocessors * TARGET_BLOCKS_PER_SM) / (headBlocks * (shape.batch ?? 1)),
  );
  const allowed = Math.max(1, Math.min(maxSplits, Math.floor(seqLen / minSplitTokens)));
  let splits = Math.min(wanted, allowed);
  // Whole load groups per split, so only a split's last group is partial.
  const group = ATTENTION_WARPS * layout.slots * unroll;
  const splitTokens = splits === 1 ? seqLen : Math.ceil(seqLen / splits / group) * group;
  splits = Math.ceil(seqLen / splitTokens);
  return {
    config: { headDim, width, headsPerBlock, unroll, split: splits > 1 },
    splits,
    splitTokens,
    headBlocks,
  };
}

export function attentionKey(c: AttentionConfig): string {
  const types = c.types ? storageKey([c.types.act, c.types.cache]) : '';
  return `decoding/attention/${c.split ? 'split' : 'single'}/d${c.headDim}v${c.width}/g${c.headsPerBlock}u${c.unroll}w${ATTENTION_WARPS}${c.deviceLength ? (c.fromPosition ? '/pos' : '/len') : ''}${c.paged ? '/paged' : ''}${c.pageShift === undefined ? '' : `p${c.pageShift}`}${types}`;
}
