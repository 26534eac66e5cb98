import { defineKernel } from '../kernel.js';
import { ArgCheck } from './check.js';
import { siluOf } from './elementwise.js';

// Fused decode kernels: each does in one pass over the weights what a chain
// of simpler specs does in several, and never writes the chain's
// intermediates. They exist where decoding is bound by reading weights once
// per token and by the number of kernels a step launches.

const FAMILY = 'fused';
const F32 = ['f32'] as const;
const BYTES = 4;

type EpsAttrs = { eps: number };

const EPS = {
  kind: 'number',
  default: 1e-6,
  above: 0,
  doc: 'added to mean(x²) before the square root',
} as const;

/**
 * Each row of x dotted with each weight row, after an optional rmsNorm:
 * dots[w][i · N + j] = x̂_i · weights[w]_j. Summed in f64 as (x · normWeight)
 * · w and scaled by the row's inverse RMS once, the order the kernels use.
 */
function normedDots(
  x: ArrayLike<number>,
  weights: readonly ArrayLike<number>[],
  normWeight: ArrayLike<number> | undefined,
  eps: number,
  m: number,
  k: number,
  n: number,
): Float64Array[] {
  const dots = weights.map(() => new Float64Array(m * n));
  const row = new Float64Array(k);
  for (let i = 0; i < m; i++) {
    let sumSq = 0;
    for (let p = 0; p < k; p++) {
      const v = x[i * k + p]!;
      sumSq += v * v;
      row[p] = normWeight ? v * normWeight[p]! : v;
    }
    const s = normWeight ? 1 / Math.sqrt(sumSq / k + eps) : 1;
    weights.forEach((w, wi) => {
      for (let j = 0; j < n; j++) {
        let d = 0;
        for (let p = 0; p < k; p++) d += row[p]! * w[j * k + p]!;
        dots[wi]![i * n + j] = s * d;
      }
    });
  }
  return dots;
}

/**
 * y = silu(x̂·wGateᵀ) ⊙ (x̂·wUpᵀ), where x̂ = rmsNorm(x, normWeight, eps)
 * when `normWeight` is given and x̂ = x otherwise.
 *
 * The norm is folded into the dot products rather than applied first:
 * x̂·wᵀ = s · Σ_k (x_k · normWeight_k) · w_k with s = 1 / sqrt(mean(x²) + eps),
 * so a kernel sums x² alongside the two dot products it already streams and
 * scales both by s in its epilogue. That keeps the norm inside the one pass
 * over the weights on every backend, without a separate pass over x or any
 * cross-block exchange, which a general `rmsNorm`-then-matmul fusion would
 * need for a row split between blocks.
 */
export const gateUpSwiglu = defineKernel<EpsAttrs>({
  name: 'gateUpSwiglu',
  family: FAMILY,
  summary: 'y = silu(x̂·wGateᵀ) ⊙ (x̂·wUpᵀ), x̂ = rmsNorm(x, normWeight) when normWeight is given, else x',
  inputs: [
    { name: 'x', dtypes: F32, doc: '[M, K]: M rows (1 when decoding)' },
    { name: 'wGate', dtypes: F32, doc: '[N, K], as a linear layer stores it' },
    { name: 'wUp', dtypes: F32, doc: '[N, K], as a linear layer stores it' },
    { name: 'normWeight', dtypes: F32, optional: true, doc: '[K]: rmsNorm of each row of x first' },
  ],
  attributes: { eps: { ...EPS, doc: `${EPS.doc} (unused without 'normWeight')` } },
  infer([x, wGate, wUp, normWeight]) {
    const check = new ArgCheck('gateUpSwiglu');
    check.rank('x', x!, 2, '[M, K]');
    check.rank('wGate', wGate!, 2, '[N, K]');
    const [m, k] = x!.shape as [number, number];
    check.dim('wGate', wGate!, 1, k, "K of 'x'");
    check.sameShape('wUp', wUp!, wGate!.shape, "'wGate'");
    if (normWeight) {
      check.rank('normWeight', normWeight, 1, '[K]');
      check.dim('normWeight', normWeight, 0, k, "K of 'x'");
      check.shape(k > 0, 'x', 'rmsNorm of an empty row is undefined', 'K of at least 1', x!.shape);
    }
    return [{ name: 'y', shape: [m, wGate!.shape[0]!], dtype: 'f32' }];
  },
  reference([x, wGate, wUp, normWeight], { eps }, io) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    const n = io.outputs[0]!.shape[1]!;
    const [gate, up] = normedDots(x!, [wGate!, wUp!], normWeight, eps, m, k, n);
    return [Float32Array.from(gate!, (g, i) => siluOf(g) * up![i]!)];
  },
  cost([x, wGate, _wUp, normWeight]) {
    const [m, k] = x!.shape as [number, number];
    const n = wGate!.shape[0]!;
    return {
      flops: 4 * m * n * k + 6 * m * n + (normWeight ? 3 * m * k : 0),
      bytes: BYTES * (m * k + 2 * n * k + m * n + (normWeight ? k : 0)),
    };
  },
});

/**
 * y = rmsNorm(x, normWeight, eps)·wᵀ for a weight stored [N, K]: the norm
 * before each of a decoder's attention projections and before its head,
 * folded into the product the same way as in gateUpSwiglu (each row's
 * inverse RMS scales its dot products), so the normalised row is never
 * written. Each projection sharing one norm recomputes the row's sum of
 * squares, which costs a pass over x (K floats), not over a weight.
 */
export const rmsNormMatmul = defineKernel<EpsAttrs>({
  name: 'rmsNormMatmul',
  family: FAMILY,
  summary: 'y = rmsNorm(x, normWeight)·wᵀ, the norm folded into the product',
  inputs: [
    { name: 'x', dtypes: F32, doc: '[M, K]: M rows (1 when decoding)' },
    { name: 'normWeight', dtypes: F32, doc: '[K]' },
    { name: 'w', dtypes: F32, doc: '[N, K], as a linear layer stores it' },
  ],
  attributes: { eps: EPS },
  infer([x, normWeight, w]) {
    const check = new ArgCheck('rmsNormMatmul');
    check.rank('x', x!, 2, '[M, K]');
    const [m, k] = x!.shape as [number, number];
    check.shape(k > 0, 'x', 'rmsNorm of an empty row is undefined', 'K of at least 1', x!.shape);
    check.rank('normWeight', normWeight!, 1, '[K]');
    check.dim('normWeight', normWeight!, 0, k, "K of 'x'");
    check.rank('w', w!, 2, '[N, K]');
    check.dim('w', w!, 1, k, "K of 'x'");
    return [{ name: 'y', shape: [m, w!.shape[0]!], dtype: 'f32' }];
  },
  reference([x, normWeight, w], { eps }, io) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    const n = io.outputs[0]!.shape[1]!;
    return [Float32Array.from(normedDots(x!, [w!], normWeight, eps, m, k, n)[0]!)];
  },
  cost([x, _normWeight, w]) {
    const [m, k] = x!.shape as [number, number];
    const n = w!.shape[0]!;
    return { flops: 2 * m * n * k + 3 * m * k, bytes: BYTES * (m * k + k + n * k + m * n) };
  },
});

/**
 * y_i = rmsNorm(x, normWeight, eps)·w_iᵀ for up to three weights sharing one
 * norm: a decoder layer's q, k and v projections in one launch. Each weight
 * alone has too few rows to fill a GPU (k and v are a quarter of q with
 * grouped-query attention); together they stream as one matrix of
 * N0 + N1 + N2 rows, each output column finding its weight by comparing
 * against N0 and N0 + N1. w1 and w2 are optional, so two weights work too.
 */
export const rmsNormMatmul3 = defineKernel<EpsAttrs>({
  name: 'rmsNormMatmul3',
  family: FAMILY,
  summary: 'y_i = rmsNorm(x, normWeight)·w_iᵀ for up to three weights, one norm and one pass',
  inputs: [
    { name: 'x', dtypes: F32, doc: '[M, K]: M rows (1 when decoding)' },
    { name: 'normWeight', dtypes: F32, doc: '[K]' },
    { name: 'w0', dtypes: F32, doc: '[N0, K], as a linear layer stores it' },
    { name: 'w1', dtypes: F32, optional: true, doc: '[N1, K]' },
    { name: 'w2', dtypes: F32, optional: true, doc: "[N2, K]; only with 'w1'" },
  ],
  attributes: { eps: EPS },
  infer([x, normWeight, ...weights]) {
    const check = new ArgCheck('rmsNormMatmul3');
    check.rank('x', x!, 2, '[M, K]');
    const [m, k] = x!.shape as [number, number];
    check.shape(k > 0, 'x', 'rmsNorm of an empty row is undefined', 'K of at least 1', x!.shape);
    check.rank('normWeight', normWeight!, 1, '[K]');
    check.dim('normWeight', normWeight!, 0, k, "K of 'x'");
    // Outputs are positional, so a third weight without a second would leave a gap.
    check.shape(
      !(weights[2] && !weights[1]),
      'w1',
      "'w2' is given without 'w1'",
      "'w1' whenever 'w2' is given",
      'nothing',
    );
    return weights.flatMap((w, i) => {
      if (!w) return [];
      check.rank(`w${i}`, w, 2, `[N${i}, K]`);
      check.dim(`w${i}`, w, 1, k, "K of 'x'");
      return [{ name: `y${i}`, shape: [m, w.shape[0]!], dtype: 'f32' as const }];
    });
  },
  reference([x, normWeight, ...weights], { eps }, io) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    return io.outputs.map((out, i) => {
      const n = out.shape[1]!;
      return Float32Array.from(normedDots(x!, [weights[i]!], normWeight, eps, m, k, n)[0]!);
    });
  },
  cost([x, _normWeight, ...weights]) {
    const [m, k] = x!.shape as [number, number];
    const n = weights.reduce((s, w) => s + (w ? w.shape[0]! : 0), 0);
    return { flops: 2 * m * n * k + 3 * m * k, bytes: BYTES * (m * k + k + n * k + m * n) };
  },
});
