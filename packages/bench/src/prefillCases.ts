// Prefill cases: a prompt's attention over the KV cache it has just written
// (causalAttention), timed against PyTorch's flash SDPA.

import { causalAttention, type DType, type HostArray } from '@rayo/core';
import type { BenchCase, CheckSubset } from './case.js';
import { halfTolerance, type Modes, modes } from './caseDefaults.js';

/** Query tokens the reference checks: the chunk's last, which attend to the most keys. */
const CHECKED_TOKENS = 16;

/**
 * Checks the last `count` of `tokens` queries: the reference takes those q
 * rows at position tokens − count over the whole caches, whose outputs are
 * the last rows of the full call's.
 */
export function lastTokensSubset(
  [tokens, heads, dim]: readonly [number, number, number],
  kvShape: readonly number[],
  dtype: DType,
  count: number,
) {
  return (data: readonly (HostArray | undefined)[]): CheckSubset => {
    const [q, k, v] = data;
    const row = heads * dim;
    const first = tokens - count;
    return {
      inputs: [
        { shape: [count, heads, dim], dtype },
        { shape: kvShape, dtype },
        { shape: kvShape, dtype },
      ],
      data: [q!.slice(first * row), k, v],
      attrs: { position: first },
      select: (_output, actual) => actual.slice(first * row),
    };
  };
}

/**
 * Causal attention of a `tokens`-token prompt from position 0 (the cache
 * holds exactly the prompt), `heads` query heads sharing `kvHeads` kv heads,
 * everything in `dtype`. Its x is FlashAttention's FLOP count (4 · dim a
 * score of the causal half); rates come from the spec's cost, which adds
 * the softmax's 3 a score.
 */
export function flashAttention(
  heads: number,
  kvHeads: number,
  dim: number,
  tokens: number,
  dtype: 'f16' | 'bf16',
  when: Modes,
): BenchCase {
  const qShape = [tokens, heads, dim] as const;
  const kvShape = [kvHeads, tokens, dim];
  return {
    id: `flash-attention/${dtype}-h${heads}-kv${kvHeads}-d${dim}-t${tokens}`,
    family: 'flash-attention',
    spec: causalAttention,
    inputs: [
      { shape: qShape, dtype },
      { shape: kvShape, dtype },
      { shape: kvShape, dtype },
    ],
    attrs: { position: 0 },
    bound: 'flops',
    x: (4 * heads * dim * tokens * (tokens + 1)) / 2,
    ...modes(when),
    tolerance: halfTolerance(dtype),
    ...(tokens > CHECKED_TOKENS ? { subset: lastTokensSubset(qShape, kvShape, dtype, CHECKED_TOKENS) } : {}),
  };
}
