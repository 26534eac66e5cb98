// A decode step's KV-cache cases: writing k and v into the caches (with
// rope) and one query's attention over them.

import { incrementalAttention, kvCacheScatter, ropeKvScatter } from '@rayo/core';
import { ropeTolerance } from '@rayo/core/testing';
import type { BenchCase } from './case.js';
import { EXACT, type Modes, modes } from './caseDefaults.js';

export function kvScatter(
  heads: number,
  dim: number,
  maxSeq: number,
  tokens: number,
  when: Modes,
): BenchCase {
  return {
    id: `kvscatter/h${heads}-d${dim}-s${maxSeq}-t${tokens}`,
    family: 'kvscatter',
    spec: kvCacheScatter,
    inputs: [{ shape: [heads, maxSeq, dim] }, { shape: [tokens, heads * dim] }],
    attrs: { position: maxSeq - tokens },
    bound: 'bytes',
    x: 4 * tokens * heads * dim,
    ...modes(when),
    tolerance: EXACT,
  };
}

/** One decode step's rope of q and k and the writes of k and v into the caches' last rows. */
export function ropeKv(
  heads: number,
  kvHeads: number,
  dim: number,
  maxSeq: number,
  tokens: number,
  when: Modes,
): BenchCase {
  const position = maxSeq - tokens;
  const cache = { shape: [kvHeads, maxSeq, dim] };
  return {
    id: `ropekv/h${heads}-kv${kvHeads}-d${dim}-s${maxSeq}-t${tokens}`,
    family: 'ropekv',
    spec: ropeKvScatter,
    inputs: [
      { shape: [tokens, heads, dim] },
      { shape: [tokens, kvHeads, dim] },
      { shape: [tokens, kvHeads * dim] },
      cache,
      cache,
    ],
    attrs: { position },
    bound: 'bytes',
    x: 4 * tokens * (heads + 2 * kvHeads) * dim,
    ...modes(when),
    tolerance: ropeTolerance(maxSeq - 1),
  };
}

export function attention(heads: number, dim: number, tokens: number, when: Modes): BenchCase {
  return {
    id: `attention/h${heads}-d${dim}-t${tokens}`,
    family: 'attention',
    spec: incrementalAttention,
    inputs: [{ shape: [heads, dim] }, { shape: [heads, tokens, dim] }, { shape: [heads, tokens, dim] }],
    attrs: { seqLen: tokens },
    bound: 'bytes',
    x: 2 * 4 * heads * tokens * dim,
    ...modes(when),
    tolerance: { rtol: 1e-3, atol: 1e-6, relativeTo: 'max' },
  };
}

/** One decode step's attention of grouped query heads over a bf16 KV cache (a Llama's), the query in f32. */
export function groupedAttention(
  heads: number,
  kvHeads: number,
  dim: number,
  tokens: number,
  when: Modes,
): BenchCase {
  return {
    id: `attention-half/h${heads}-kv${kvHeads}-d${dim}-t${tokens}`,
    family: 'attention-half',
    spec: incrementalAttention,
    inputs: [
      { shape: [heads, dim] },
      { shape: [kvHeads, tokens, dim], dtype: 'bf16' },
      { shape: [kvHeads, tokens, dim], dtype: 'bf16' },
    ],
    attrs: { seqLen: tokens },
    bound: 'bytes',
    x: 2 * 2 * kvHeads * tokens * dim,
    ...modes(when),
    tolerance: { rtol: 1e-3, atol: 1e-6, relativeTo: 'max' },
  };
}

/** One decode step's attention over a bf16 KV cache, the query in f32. */
export function halfAttention(heads: number, dim: number, tokens: number, when: Modes): BenchCase {
  return {
    id: `attention-half/h${heads}-d${dim}-t${tokens}`,
    family: 'attention-half',
    spec: incrementalAttention,
    inputs: [
      { shape: [heads, dim] },
      { shape: [heads, tokens, dim], dtype: 'bf16' },
      { shape: [heads, tokens, dim], dtype: 'bf16' },
    ],
    attrs: { seqLen: tokens },
    bound: 'bytes',
    x: 2 * 2 * heads * tokens * dim,
    ...modes(when),
    tolerance: { rtol: 1e-3, atol: 1e-6, relativeTo: 'max' },
  };
}
