import { InvalidArgumentError } from '@rayo/core';

/**
 * llama.cpp's `llama` architecture rotates adjacent pairs of a head (x[2i],
 * x[2i+1]); Hugging Face's Llama, and rayo's `rope`, rotate the two halves
 * (x[i], x[i + d/2]). So `convert_hf_to_gguf.py` permutes the rows of
 * `q_proj` (with the query heads) and `k_proj` (with the key/value heads):
 * it views the [heads·d, in] weight as [heads, 2, d/2, in], swaps the middle
 * two axes and flattens back. Row h·d + p·d/2 + i of the Hugging Face weight
 * becomes row h·d + 2i + p of the GGUF weight (p ∈ {0, 1}, i < d/2). Undoing
 * it gives the weights back exactly; both move whole rows, so they work on
 * stored bytes of any type (a row of blocks is a row of values).
 */
function permuteRows(
  bytes: Uint8Array,
  heads: number,
  rows: number,
  toGguf: boolean,
  what: string,
): Uint8Array {
  const headDim = rows / heads;
  if (!Number.isInteger(headDim) || headDim % 2 !== 0 || bytes.length % rows !== 0) {
    throw new InvalidArgumentError('rows do not split into heads of an even dimension', {
      operation: 'ropePermutation',
      argument: what,
      expected: `a row count that is ${heads} heads of an even dimension, and whole rows of bytes`,
      actual: `${rows} rows of ${bytes.length / rows} bytes`,
    });
  }
  const rowBytes = bytes.length / rows;
  const half = headDim / 2;
  const out = new Uint8Array(bytes.length);
  for (let h = 0; h < heads; h++) {
    for (let p = 0; p < 2; p++) {
      for (let i = 0; i < half; i++) {
        const hf = h * headDim + p * half + i;
        const gguf = h * headDim + 2 * i + p;
        const [from, to] = toGguf ? [hf, gguf] : [gguf, hf];
        out.set(bytes.subarray(from * rowBytes, (from + 1) * rowBytes), to * rowBytes);
      }
    }
  }
  return out;
}

/** The rows of a Hugging Face Q or K weight in llama.cpp's order (what the converter writes). */
export function hfRowsToGguf(bytes: Uint8Array, heads: number, rows: number, what = 'weight'): Uint8Array {
  return permuteRows(bytes, heads, rows, true, what);
}

/** The rows of a GGUF Q or K weight back in Hugging Face's order (what the loader uploads). */
export function ggufRowsToHf(bytes: Uint8Array, heads: number, rows: number, what = 'weight'): Uint8Array {
  return permuteRows(bytes, heads, rows, false, what);
}
