import type { TensorMeta } from '../kernel.js';
import type { ArgCheck } from './check.js';

/**
 * Checks the head-first caches an attention kernel reads for queries of
 * `nHeads` heads of `headDim`: kCache [nKvHeads, maxSeq, headDim] with
 * nKvHeads dividing nHeads, and vCache of kCache's shape. Returns maxSeq.
 */
export function checkKvCaches(
  check: ArgCheck,
  nHeads: number,
  headDim: number,
  kCache: TensorMeta,
  vCache: TensorMeta,
): number {
  check.rank('kCache', kCache, 3, '[nKvHeads, maxSeq, headDim]');
  const maxSeq = kCache.shape[1]!;
  check.dim('kCache', kCache, 2, headDim, "headDim of 'q'");
  check.kvHeads('kCache', kCache, 0, 'nKvHeads', nHeads);
  check.sameShape('vCache', vCache, kCache.shape, "'kCache'");
  return maxSeq;
}
