import {
  add,
  type Backend,
  batchedMatmul,
  cast,
  softmax,
  type Tensor,
  type TrackingRunner,
  transpose,
} from '@rayo/core';
import type { LlamaConfig } from './config.js';

// Causal attention of a chunk of tokens as batched products (a decode step attends with incrementalAttention).

/** Added to the scores of masked (future or unwritten) cache rows: softmax gives them 0; finite for WGSL. */
const MASKED = -1e9;

/**
 * `[T, S]`: 0 where token t (at position + t) may attend to key j (j <= position + t),
 * a large negative number elsewhere. A chunk at position 0 attends to its own
 * T keys; a later one to the whole cache (S = maxSequence).
 */
export function causalMask(backend: Backend, maxSequence: number, t: number, position: number): Tensor {
  const s = position === 0 ? t : maxSequence;
  const data = new Float32Array(t * s);
  for (let i = 0; i < t; i++) data.fill(MASKED, i * s + position + i + 1, (i + 1) * s);
  return backend.upload(data, [t, s]);
}

/** `t` itself when f32, else a copy cast to f32 (the batched products take one dtype for both operands). */
export function asF32(run: TrackingRunner, t: Tensor): Tensor {
  return t.dtype === 'f32' ? t : run.run1(cast, [t], { to: 'f32' });
}

/** [T, n·headDim] → [n, T, headDim]: heads first, the layout of the cache and of the batched products. */
export function headsFirst(run: TrackingRunner, headDim: number, z: Tensor, n: number): Tensor {
  const t = z.shape[0]!;
  const zT = run.run1(transpose, [z.reshape([t, n * headDim])]);
  return run.run1(transpose, [zT.reshape([n, headDim, t])]);
}

/**
 * Causal attention of T rotated queries q [T, heads, headDim] over head-first
 * keys and values [kvHeads, S, headDim] (the chunk's own at position 0,
 * else the whole cache), with the mask [T, S]. Grouped-query attention
 * without copying keys per head: the query heads that share a kv head are
 * stacked along the rows of one batched product per kv head.
 */
export function causalAttention(
  run: TrackingRunner,
  config: LlamaConfig,
  q: Tensor,
  keys: Tensor,
  values: Tensor,
  mask: Tensor,
): Tensor {
  const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim } = config;
  const t = q.shape[0]!;
  const s = keys.shape[1]!;
  const group = heads / kvHeads;
  const qHeads = headsFirst(run, headDim, q.reshape([t, heads * headDim]), heads);
  const scores = run.run1(batchedMatmul, [qHeads.reshape([kvHeads, group * t, headDim]), keys], {
    transB: true,
    alpha: 1 / Math.sqrt(headDim),
  });
  const probs = run.run1(softmax, [run.run1(add, [scores.reshape([heads, t, s]), mask])]);
  const out = run.run1(batchedMatmul, [probs.reshape([kvHeads, group * t, s]), values]);
  // [heads, T, headDim] → [heads, headDim, T] = [heads·headDim, T] → [T, heads·headDim].
  const outT = run.run1(transpose, [out.reshape([heads, t, headDim])]);
  return run.run1(transpose, [outT.reshape([heads * headDim, t])]);
}
