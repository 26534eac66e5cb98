import {
  type FlashPrecision,
  flashAttentionBackward,
  flashAttention as flashAttentionSpec,
  type Tensor,
} from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

export interface FlashAttentionOptions {
  /** Score scale; 0 (the default) means 1/sqrt(headDim). */
  readonly scale?: number;
  /** 'half' rounds q, k, v and the output's gradient to bf16 for the products (tensor cores), summed in f32; default 'f32'. */
  readonly precision?: FlashPrecision;
}

/**
 * Causal self-attention of q [T, B, heads, headDim] over k and v
 * [T, B, kvHeads, headDim] (kvHeads dividing heads), through the flash
 * kernels: no [T, T] score matrix is kept. Backward reads only q, k, v, the
 * output and the per-row log-sum-exp, and gives dk and dv summed over each
 * kv head's query heads.
 */
export function flashAttention(
  tape: Tape,
  q: Variable,
  k: Variable,
  v: Variable,
  options: FlashAttentionOptions = {},
): Variable {
  const attrs = { scale: options.scale ?? 0, precision: options.precision ?? 'f32' };
  const [out, lse] = tape.run(flashAttentionSpec, [q.value, k.value, v.value], attrs) as [Tensor, Tensor];
  return tape.record(
    out,
    [q, k, v],
    (dOut) => tape.run(flashAttentionBackward, [q.value, k.value, v.value, out, dOut, lse], attrs),
    [q.value, k.value, v.value, out, lse],
  );
}
