// Training attention: flashAttentionBackward over a batch of sequences, timed
// against PyTorch's SDPA backward.

import { type FlashPrecision, flashAttentionBackward, type HostArray } from '@rayo/core';
import type { BenchCase, CheckSubset, CheckTolerance } from './case.js';
import { MAX_TOL, type Modes, modes } from './caseDefaults.js';

const HALF_TOL: CheckTolerance = { rtol: 5e-2, atol: 0, relativeTo: 'max' };

/**
 * The reference checks one kv head's group of query heads of batch item 0
 * (every token): dq, dk and dv of those heads depend on nothing else.
 */
function firstGroupSubset(tokens: number, batch: number, heads: number, kvHeads: number, dim: number) {
  const group = heads / kvHeads;
  const qRow = heads * dim;
  const kvRow = kvHeads * dim;
  /** Token t's first `width` elements of batch item 0, from rows of `row` elements a token and batch item. */
  const take = (data: HostArray, row: number, width: number): HostArray => {
    const out = new (data.constructor as new (n: number) => HostArray)(tokens * width);
    for (let t = 0; t < tokens; t++)
      out.set(data.subarray(t * batch * row, t * batch * row + width), t * width);
    return out;
  };
  return (data: readonly (HostArray | undefined)[]): CheckSubset => {
    const [q, k, v, out, dOut, lse] = data as HostArray[];
    const qShape = [tokens, 1, group, dim];
    const kvShape = [tokens, 1, 1, dim];
    const meta = (shape: number[]) => ({ shape, dtype: 'f32' as const });
    return {
      inputs: [qShape, kvShape, kvShape, qShape, qShape, [tokens, 1, group]].map(meta),
      data: [
        take(q!, qRow, group * dim),
        take(k!, kvRow, dim),
        take(v!, kvRow, dim),
        take(out!, qRow, group * dim),
        take(dOut!, qRow, group * dim),
        take(lse!, heads, group),
      ],
      select: (output, actual) => (output === 0 ? take(actual, qRow, group * dim) : take(actual, kvRow, dim)),
    };
  };
}

/**
 * The backward of causal self-attention over `batch` sequences of `tokens`,
 * `heads` query heads sharing `kvHeads` kv heads of `dim`, in f32 or under
 * precision 'half' (bf16 products: tensor cores; its id says bf16). Its x is
 * FlashAttention-2's backward FLOP count, 2.5 times the forward's: 10 · dim
 * a score of the causal half (q·kᵀ again, dOut·vᵀ, and the dv, dq and dk
 * products).
 */
export function flashAttentionBackwardCase(
  batch: number,
  heads: number,
  kvHeads: number,
  dim: number,
  tokens: number,
  when: Modes,
  precision: FlashPrecision = 'f32',
): BenchCase {
  const q = { shape: [tokens, batch, heads, dim] };
  const kv = { shape: [tokens, batch, kvHeads, dim] };
  return {
    id: `flash-attention-backward/${precision === 'half' ? 'bf16' : 'f32'}-b${batch}-h${heads}-kv${kvHeads}-d${dim}-t${tokens}`,
    family: 'flash-attention-backward',
    spec: flashAttentionBackward,
    inputs: [q, kv, kv, q, q, { shape: [tokens, batch, heads] }],
    attrs: precision === 'half' ? { precision } : {},
    bound: 'flops',
    x: (10 * batch * heads * dim * tokens * (tokens + 1)) / 2,
    ...modes(when),
    // 'half' may round P and dS to bf16 too; on random out, dOut and lse, dS = P ∘ (dP − D) cancels.
    tolerance: precision === 'half' ? HALF_TOL : MAX_TOL,
    subset: firstGroupSubset(tokens, batch, heads, kvHeads, dim),
  };
}
