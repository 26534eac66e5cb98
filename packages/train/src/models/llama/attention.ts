import { causalAttention, kvCacheScatter, type Tensor, type TrackingRunner } from '@rayo/core';
import type { LayerCache } from './decoder.js';

// Causal attention of a chunk of tokens (a decode step attends with incrementalAttention).

/**
 * Writes a chunk's rotated keys and its values [T, kvHeads·headDim] into the
 * cache at `position`, then attends the rotated queries q [T, heads, headDim]
 * causally over the cache's rows 0 … position + t in one kernel: no score
 * matrix, no mask, a half cache read as stored. Returns [T, heads·headDim].
 */
export function chunkAttention(
  run: TrackingRunner,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  cache: LayerCache,
  position: number,
): Tensor {
  const [t, heads, headDim] = q.shape as [number, number, number];
  run.run(kvCacheScatter, [cache.k, k, undefined], { position });
  run.run(kvCacheScatter, [cache.v, v, undefined], { position });
  return run.run1(causalAttention, [q, cache.k, cache.v], { position }).reshape([t, heads * headDim]);
}
