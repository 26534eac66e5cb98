import {
  causalAttention,
  type DevicePosition,
  incrementalAttention,
  kvCacheScatter,
  ropeAttention,
  ropeKvScatter,
  type Tensor,
  type TrackingRunner,
} from '@rayo/core';
import type { LayerCache, LlamaDecoder } from './decoder.js';
import { type HalfOperand, withFrequencies } from './projections.js';

// Attention over the KV cache: of a chunk of tokens from its own q, k and v,
// and of a chunk or one token from a fused q, k, v product.

/**
 * Writes a chunk's rotated keys and its values [T, kvHeads·headDim] into the
 * cache at `position`, then attends the rotated queries q [T, heads, headDim]
 * causally over the cache's rows 0 … position + t in one kernel: no score
 * matrix, no mask, a half cache read as stored. Returns [T, heads·headDim],
 * in `out` where given (the o product's half operand, see `halfOperand`).
 */
export function chunkAttention(
  run: TrackingRunner,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  cache: LayerCache,
  position: number,
  out?: HalfOperand,
): Tensor {
  const [t, heads, headDim] = q.shape as [number, number, number];
  run.run(kvCacheScatter, [cache.k, k, undefined], { position });
  run.run(kvCacheScatter, [cache.v, v, undefined], { position });
  return run
    .run1(causalAttention, [q, cache.k, cache.v], { position, ...(out ? { out } : {}) })
    .reshape([t, heads * headDim]);
}

/**
 * Attention from a fused q, k, v product qkv [T, (heads + 2·kvHeads)·headDim]
 * at `at`. One token: `ropeAttention`, RoPE, the cache writes and the
 * attention in one kernel where the backend has it. Else RoPE of q and k and
 * the cache writes of k and v in one kernel that reads qkv in place, then the
 * attention of the rotated q over the cache (`incrementalAttention` for one
 * token, `causalAttention` for a chunk). Returns [T, heads·headDim], a
 * chunk's in `out` where given (as `chunkAttention`).
 */
export function fusedQkvAttention(
  d: LlamaDecoder,
  run: TrackingRunner,
  qkv: Tensor,
  cache: LayerCache,
  at: number | DevicePosition,
  out?: HalfOperand,
): Tensor {
  const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, ropeTheta: theta } = d.config;
  const t = qkv.shape[0]!;
  const onDevice = typeof at !== 'number';
  if (t === 1 && d.backend.supports(ropeAttention.name, d.kvCacheDtype)) {
    return run
      .run1(
        ropeAttention,
        withFrequencies(d, [
          qkv.reshape([heads + 2 * kvHeads, headDim]),
          cache.k,
          cache.v,
          onDevice ? at.row : undefined,
        ]),
        onDevice ? { theta, layout: 'half' } : { position: at, theta, layout: 'half' },
      )
      .reshape([1, heads * headDim]);
  }
  const [q] = run.run(
    ropeKvScatter,
    withFrequencies(d, [
      qkv.reshape([t, heads + 2 * kvHeads, headDim]),
      undefined,
      undefined,
      cache.k,
      cache.v,
      onDevice ? at.row : undefined,
    ]),
    onDevice ? { theta, layout: 'half' } : { position: at, theta, layout: 'half' },
  );
  const attended =
    t === 1
      ? run.run1(
          incrementalAttention,
          [q!.reshape([heads, headDim]), cache.k, cache.v, onDevice ? at.length : undefined],
          onDevice ? {} : { seqLen: at + 1 },
        )
      : run.run1(causalAttention, [q!, cache.k, cache.v], {
          position: onDevice ? 0 : at,
          ...(out ? { out } : {}),
        });
  return attended.reshape([t, heads * headDim]);
}
