import type { HostArray } from '../dtype.js';
import type { TensorMeta } from '../kernel.js';
import type { ArgCheck } from './check.js';

// A fused q, k, v projection's rows as the rope-and-write kernels read them in
// place (ropeKvScatter, ropePagedKvWrite): with k and v left out, q is
// [T, heads + 2·kvHeads, headDim], each token's q, k and v heads in a row.

/**
 * Whether q holds k and v (both left out) and the heads of q itself; k
 * without v (or v without k) is refused. `kvSource` names where kvHeads comes from.
 */
export function checkFusedQkv(
  check: ArgCheck,
  [q, k, v]: readonly (TensorMeta | undefined)[],
  kvHeads: number,
  kvSource: string,
): { fused: boolean; heads: number } {
  const [, qHeads, headDim] = q!.shape as [number, number, number];
  const fused = k === undefined && v === undefined;
  if (!fused) {
    check.shape(k !== undefined, 'k', 'k and v are given together or not at all', 'a tensor', 'nothing');
    check.shape(v !== undefined, 'v', 'k and v are given together or not at all', 'a tensor', 'nothing');
    return { fused, heads: qHeads };
  }
  const heads = qHeads - 2 * kvHeads;
  check.shape(
    heads >= 1,
    'q',
    "without k and v, q holds each token's heads of q, k and v",
    `[T, heads + ${2 * kvHeads}, ${headDim}] with heads >= 1 (2·kvHeads of ${kvSource} after them)`,
    q!.shape,
  );
  return { fused, heads };
}

/** The q, k and v rows of a fused [T, heads + 2·kvHeads, headDim], each as its own [T, n·headDim]. */
export function splitFused(
  fused: HostArray,
  tokens: number,
  widths: readonly number[],
  headDim: number,
): Float32Array[] {
  const row = widths.reduce((a, b) => a + b, 0) * headDim;
  let start = 0;
  return widths.map((heads) => {
    const width = heads * headDim;
    const part = new Float32Array(tokens * width);
    for (let t = 0; t < tokens; t++)
      part.set(fused.subarray(t * row + start, t * row + start + width), t * width);
    start += width;
    return part;
  });
}
