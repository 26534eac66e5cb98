import type { TensorMeta } from '../kernel.js';
import { formatShape } from '../shape.js';
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
  const [nKvHeads, maxSeq] = kCache.shape as [number, number, number];
  check.dim('kCache', kCache, 2, headDim, "headDim of 'q'");
  // Grouped-query attention: each kv head serves nHeads / nKvHeads consecutive query heads.
  check.shape(
    nKvHeads > 0 && nHeads % nKvHeads === 0,
    'kCache',
    "dimension 0 (nKvHeads) must divide the number of heads of 'q'",
    `dimension 0 dividing ${nHeads}`,
    `${nKvHeads} in ${formatShape(kCache.shape)}`,
  );
  check.sameShape('vCache', vCache, kCache.shape, "'kCache'");
  return maxSeq;
}
