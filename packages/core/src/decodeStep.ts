import type { KernelRunner, Tensor } from './backend.js';
import { incrementalAttention, kvCacheScatter } from './kernels/decoding.js';

/**
 * Where a step's tokens go, read on the device when the step runs: a step
 * recorded once is replayed at any position by rewriting two i32 [1] tensors.
 */
export interface DevicePosition {
  /** The cache row of the first new token. */
  readonly row: Tensor;
  /** The rows the attention covers: row + the new tokens. */
  readonly length: Tensor;
}

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
  /**
   * Cache row of the first new token, baked into the kernels' attributes
   * (attention covers rows [0, position + T)); or the device tensors that
   * hold the row and the attended length.
   */
  readonly position: number | DevicePosition;
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
  const { position } = step;
  const onDevice = typeof position !== 'number';
  const row = onDevice ? position.row : undefined;
  const rowAttrs = onDevice ? {} : { position };
  runner.run(kvCacheScatter, [step.kCache, step.k, row], rowAttrs);
  runner.run(kvCacheScatter, [step.vCache, step.v, row], rowAttrs);
  const scale = step.scale ?? 0;
  const tokens = step.k.shape.length === 2 ? step.k.shape[0]! : 1;
  const attrs = onDevice ? { scale } : { seqLen: position + tokens, scale };
  const inputs = [step.q, step.kCache, step.vCache, onDevice ? position.length : undefined];
  return runner.run(incrementalAttention, inputs, attrs, step.out ? { out: [step.out] } : undefined)[0]!;
}
