import type { TransformerWorkloadSpec } from './workload.js';

/** train-bench's GPT-style workload at a small, odd size (the same structure), for tests on every backend. */
export const SMALL_TRANSFORMER: TransformerWorkloadSpec = {
  kind: 'transformer',
  vocab: 301,
  dim: 24,
  heads: 3,
  hidden: 40,
  blocks: 3,
  seq: 11,
  batch: 3,
};
