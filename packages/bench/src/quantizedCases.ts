// Quantized-weight cases: a product and the fused gate/up against weights
// stored as codes and per-group scales.

import { type QuantFormat, quantizedGateUpSwiglu, quantizedMatmul, quantLayout } from '@rayo/core';
import { quantOffsetLimit, quantScaleRange, type Rng } from '@rayo/core/testing';
import type { BenchCase, BenchInput } from './case.js';
import { MAX_TOL, type Modes, modes } from './caseDefaults.js';

/** Random u32 words: a quantized weight's codes or zero points. */
function codeWords(rng: Rng, size: number): number[] {
  return Array.from({ length: size }, () => rng.int(0, 2 ** 32));
}

/**
 * A weight [N, K] in a quantized format as the cases upload it: random codes,
 * scales that keep |w| near 1, q4g32a's offsets (q4k's and q5k's dmin), q4k's,
 * q5k's and q6k's sub-block scale words, and the bytes of them all.
 */
function quantizedWeight(format: QuantFormat, k: number, n: number) {
  const layout = quantLayout(format, k);
  // What quantizeWeights (and the GGUF repacks) store: f32 scales for q8, q8g16, q4g32a (Q4_1) and q8g32a (Q5_K), else f16 (q4k, q5k: Q4_K's and Q5_K's d and dmin, q6k: Q6_K's d, q5g32, q5g32a: Q5_0's and Q5_1's d and −m).
  const scaleF32 = format === 'q8' || format === 'q8g16' || format === 'q4g32a' || format === 'q8g32a';
  const groupValues = (from: number, to: number): BenchInput => ({
    shape: [n, layout.groups],
    dtype: scaleF32 ? 'f32' : 'f16',
    fill: (rng: Rng, size: number) => Array.from({ length: size }, () => rng.uniform(from, to)),
  });
  // The conformance cases' ranges: q4k's d multiplies 6-bit scales, q6k's d int8 scales and codes of −32 … 31.
  const [lo, hi] = quantScaleRange(format);
  const scaleBytes = n * layout.groups * (scaleF32 ? 4 : 2) * (layout.offsets ? 2 : 1);
  const subBlockBytes = layout.subBlockScales ? n * layout.zeroWords * 4 : 0;
  return {
    layout,
    codes: { shape: [n, layout.rowWords], fill: codeWords },
    scales: groupValues(lo, hi),
    subBlockScales: layout.subBlockScales ? { shape: [n, layout.zeroWords], fill: codeWords } : undefined,
    offsets: layout.offsets ? groupValues(0, quantOffsetLimit(format)) : undefined,
    bytes: n * layout.rowWords * 4 + scaleBytes + subBlockBytes,
  };
}

/**
 * x·dequant(W)ᵀ for a weight [N, K] in a quantized format: what a decode step
 * reads instead of f32 or bf16 weights. Bytes-bound; the x axis is the codes,
 * scales and zero points.
 */
export function quantizedGemv(
  format: QuantFormat,
  [m, k, n]: readonly [number, number, number],
  zeroPoints: boolean,
  when: Modes,
): BenchCase {
  const { layout, codes, scales, subBlockScales, offsets, bytes } = quantizedWeight(format, k, n);
  return {
    id: `qgemv/${format}${zeroPoints ? 'z' : ''}-${m}x${k}x${n}`,
    family: 'qgemv',
    spec: quantizedMatmul,
    inputs: [
      { shape: [m, k] },
      codes,
      scales,
      // Zero points (or q4k's, q5k's and q6k's sub-block scales), c absent, the offsets last.
      ...(zeroPoints ? [{ shape: [n, layout.zeroWords], fill: codeWords }] : []),
      ...(offsets ? [subBlockScales, undefined, offsets] : subBlockScales ? [subBlockScales] : []),
    ],
    attrs: { format },
    bound: 'bytes',
    x: bytes + (zeroPoints ? n * layout.zeroWords * 4 : 0),
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/**
 * silu(x·dequant(Wg)ᵀ) ⊙ (x·dequant(Wu)ᵀ) for two weights [N, K] of one
 * format: a quantized decode step's gate, up and SwiGLU in one launch.
 * Bytes-bound; the x axis is both weights' codes and scales.
 */
export function quantizedGateUp(
  format: QuantFormat,
  [m, k, n]: readonly [number, number, number],
  when: Modes,
  /** An rmsNorm folded in, as a decoder asks for it (its weight is read beside x). */
  norm = false,
): BenchCase {
  const { codes, scales, subBlockScales, offsets, bytes } = quantizedWeight(format, k, n);
  // q4k: both weights' sub-block scales, then both dmin offsets; q4g32a's and q8g32a's offsets after no zeros.
  const extra = offsets
    ? [subBlockScales, subBlockScales, offsets, offsets]
    : subBlockScales
      ? [subBlockScales, subBlockScales]
      : [];
  return {
    id: `qgemv/gateup-${format}${norm ? '-norm' : ''}-${m}x${k}x${n}`,
    family: 'qgemv',
    spec: quantizedGateUpSwiglu,
    // The norm's weight follows the optional inputs, each left out as undefined.
    inputs: [
      { shape: [m, k] },
      codes,
      scales,
      codes,
      scales,
      ...(norm
        ? [...extra, ...Array.from({ length: 4 - extra.length }, () => undefined), { shape: [k] }]
        : extra),
    ],
    attrs: norm ? { format, eps: 1e-5 } : { format },
    bound: 'bytes',
    x: 2 * bytes,
    ...modes(when),
    tolerance: MAX_TOL,
  };
}
