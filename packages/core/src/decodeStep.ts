import type { KernelRunner, Tensor } from './backend.js';
import { incrementalAttention, kvCacheScatter } from './kernels/decoding.js';

/** One decoding step: new keys and values written into the caches, and the query attending to them. */
export interface DecodeStep {
  /** `[nHeads, headDim]`: the query of the newest token. */
  readonly q: Tensor;
  /** [T, nKvHeads·headDim] or [nKvHeads·headDim]: new keys, heads interleaved as a projection writes them. */
  readonly k: Tensor;
  readonly v: Tensor;
  /** [nKvHeads, maxSeq, headDim], head-first; updated in place. */
  readonly kCache: Tensor;
  readonly vCache: Tensor;
  /** Cache row of the first new token; attention covers rows [0, position + T). */
  readonly position: number;
  /** Score scale; 0 or omitted means 1/sqrt(headDim). */
  readonly scale?: number;
  /** Where the attention output goes ([nHeads, headDim]); a new tensor otherwise. */
  readonly out?: Tensor;
}

/**
 * Scatters `k` and `v` into the caches and runs the attention of `q` over
 * the cache up to and including them, with any runner: a backend (enqueued
 * at once), a batch (submitted, and replayed, together), or a runner a
 * backend hands out for its own streams.
 */
export function decodeStep(runner: KernelRunner, step: DecodeStep): Tensor {
  const tokens = step.k.shape.length === 2 ? step.k.shape[0]! : 1;
  runner.run(kvCacheScatter, [step.kCache, step.k], { position: step.position });
  runner.run(kvCacheScatter, [step.vCache, step.v], { position: step.position });
  const attrs = { seqLen: step.position + tokens, scale: step.scale ?? 0 };
  return runner.run(incrementalAttention, [step.q, step.kCache, step.vCache], attrs, { out: [step.out] })[0]!;
}
