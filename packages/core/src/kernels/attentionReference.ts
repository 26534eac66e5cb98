/**
 * The f64 reference of one query attending over `rows` cached rows, shared by
 * the attention specs' references: out[outAt …] = softmax(scale · q·Kᵀ)·V,
 * with K and V the rows at `kvAt` (row-major, headDim wide). `weights`
 * (at least `rows` long) and `acc` (headDim long) are scratch.
 */
export function attendRows(
  q: ArrayLike<number>,
  qAt: number,
  kCache: ArrayLike<number>,
  vCache: ArrayLike<number>,
  kvAt: number,
  rows: number,
  headDim: number,
  scale: number,
  out: Float32Array,
  weights: Float64Array,
  acc: Float64Array,
): void {
  let max = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < rows; j++) {
    let dot = 0;
    for (let d = 0; d < headDim; d++) dot += q[qAt + d]! * kCache[kvAt + j * headDim + d]!;
    weights[j] = scale * dot;
    max = Math.max(max, weights[j]!);
  }
  // Subtracting the max keeps exp finite for large scores.
  let sum = 0;
  for (let j = 0; j < rows; j++) {
    weights[j] = Math.exp(weights[j]! - max);
    sum += weights[j]!;
  }
  acc.fill(0);
  for (let j = 0; j < rows; j++) {
    const w = weights[j]! / sum;
    for (let d = 0; d < headDim; d++) acc[d]! += w * vCache[kvAt + j * headDim + d]!;
  }
  for (let d = 0; d < headDim; d++) out[qAt + d] = acc[d]!;
}
