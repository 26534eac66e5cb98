import type { ParamType } from '../params.js';

// The uniform fields the KV-cache writes (ropeKvScatter in decoding.ts,
// pagedKvWrite and ropePagedKvWrite in paged.ts) have in common, declared
// once so that their structs keep one order.

/** The head geometry every write reads first. */
export const KV_WRITE_HEAD_FIELDS = [
  ['n', 'u32'],
  ['qPairs', 'u32'],
  ['pairs', 'u32'],
  ['half', 'u32'],
  ['headDim', 'u32'],
  ['heads', 'u32'],
  ['kvHeads', 'u32'],
] as const satisfies readonly (readonly [string, ParamType])[];

/**
 * With rope, where a row's k and v start in their bindings, and the elements between its row of
 * q (of k and v) and the next past its heads: 0, or a fused q, k, v row's other heads.
 */
export const FUSED_ROW_FIELDS = [
  ['kStart', 'u32'],
  ['vStart', 'u32'],
  ['qGap', 'u32'],
  ['kvGap', 'u32'],
] as const satisfies readonly (readonly [string, ParamType])[];
