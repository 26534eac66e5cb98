import { bytesPerElement } from '../dtype.js';
import { defineKernel, type TensorMeta } from '../kernel.js';
import { formatShape } from '../shape.js';
import { ACTIVATION_FUNCTIONS, LINEAR_ACTIVATIONS, type LinearActivation, siluOf } from './activations.js';
import { ArgCheck } from './check.js';
import { NORM_EPS, NORM_WEIGHT_INPUT, OPTIONAL_NORM_EPS } from './foldedNorm.js';
import { bytesOf, FLOAT, WEIGHTS } from './vocabulary.js';

// Fused decode kernels: each does in one pass over the weights what a chain
// of simpler specs does in several, and never writes the chain's
// intermediates. They exist where decoding is bound by reading weights once
// per token and by the number of kernels a step launches.

const FAMILY = 'fused';

type EpsAttrs = { eps: number };

const EPS = NORM_EPS;

/** A weight [rows, K] in a linear layer's layout, of the products' shared weight dtype group. */
function linearWeight(name: string, rows = 'N') {
  return { name, dtypes: FLOAT, dtypeGroup: WEIGHTS, doc: `[${rows}, K], as a linear layer stores it` };
}

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
/**
 * A backend feature (`BackendInfo.features`): gateUpSwiglu of many half rows
 * (a prompt's chunk, without a norm) runs as one tensor-core product whose
 * tiles hold both the gate's and the up's columns, so silu · mul is applied
 * before anything is stored. Where it is absent, a chunk's gate and up are
 * two products and a swiglu pass.
 */
export const GATED_PRODUCT_TILES = 'gated-product-tiles';

export const gateUpSwiglu = defineKernel<EpsAttrs>({
  name: 'gateUpSwiglu',
  family: FAMILY,
  summary: 'y = silu(x̂·wGateᵀ) ⊙ (x̂·wUpᵀ), x̂ = rmsNorm(x, normWeight) when normWeight is given, else x',
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[M, K]: M rows (1 when decoding)' },
    linearWeight('wGate'),
    linearWeight('wUp'),
    NORM_WEIGHT_INPUT,
  ],
  attributes: { eps: OPTIONAL_NORM_EPS },
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
    return [{ name: 'y', shape: [m, wGate!.shape[0]!], dtype: x!.dtype }];
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
      bytes:
        bytesOf(x) + 2 * bytesOf(wGate) + bytesOf(normWeight) + bytesOf({ shape: [m, n], dtype: x!.dtype }),
    };
  },
});

/** Checks x [M, K] with K >= 1 and normWeight [K]; returns M and K. */
function checkNormedRows(check: ArgCheck, x: TensorMeta, normWeight: TensorMeta): [number, number] {
  check.rank('x', x, 2, '[M, K]');
  const [m, k] = x.shape as [number, number];
  check.shape(k > 0, 'x', 'rmsNorm of an empty row is undefined', 'K of at least 1', x.shape);
  check.rank('normWeight', normWeight, 1, '[K]');
  check.dim('normWeight', normWeight, 0, k, "K of 'x'");
  return [m, k];
}

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
    { name: 'x', dtypes: FLOAT, doc: '[M, K]: M rows (1 when decoding)' },
    { name: 'normWeight', dtypes: FLOAT, doc: '[K]' },
    linearWeight('w'),
  ],
  attributes: { eps: EPS },
  infer([x, normWeight, w]) {
    const check = new ArgCheck('rmsNormMatmul');
    const [m, k] = checkNormedRows(check, x!, normWeight!);
    check.rank('w', w!, 2, '[N, K]');
    check.dim('w', w!, 1, k, "K of 'x'");
    return [{ name: 'y', shape: [m, w!.shape[0]!], dtype: x!.dtype }];
  },
  reference([x, normWeight, w], { eps }, io) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    const n = io.outputs[0]!.shape[1]!;
    return [Float32Array.from(normedDots(x!, [w!], normWeight, eps, m, k, n)[0]!)];
  },
  cost([x, normWeight, w]) {
    const [m, k] = x!.shape as [number, number];
    const n = w!.shape[0]!;
    const y = { shape: [m, n], dtype: x!.dtype };
    return {
      flops: 2 * m * n * k + 3 * m * k,
      bytes: bytesOf(x) + bytesOf(normWeight) + bytesOf(w) + bytesOf(y),
    };
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
    { name: 'x', dtypes: FLOAT, doc: '[M, K]: M rows (1 when decoding)' },
    { name: 'normWeight', dtypes: FLOAT, doc: '[K]' },
    linearWeight('w0', 'N0'),
    { name: 'w1', dtypes: FLOAT, dtypeGroup: WEIGHTS, optional: true, doc: '[N1, K]' },
    { name: 'w2', dtypes: FLOAT, dtypeGroup: WEIGHTS, optional: true, doc: "[N2, K]; only with 'w1'" },
  ],
  attributes: { eps: EPS },
  infer([x, normWeight, ...weights]) {
    const check = new ArgCheck('rmsNormMatmul3');
    const [m, k] = checkNormedRows(check, x!, normWeight!);
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
      return [{ name: `y${i}`, shape: [m, w.shape[0]!], dtype: x!.dtype }];
    });
  },
  reference([x, normWeight, ...weights], { eps }, io) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    return io.outputs.map((out, i) => {
      const n = out.shape[1]!;
      return Float32Array.from(normedDots(x!, [weights[i]!], normWeight, eps, m, k, n)[0]!);
    });
  },
  cost([x, normWeight, ...weights]) {
    const [m, k] = x!.shape as [number, number];
    const n = weights.reduce((s, w) => s + (w ? w.shape[0]! : 0), 0);
    const wBytes = weights.reduce((s, w) => s + bytesOf(w), 0);
    const y = { shape: [m, n], dtype: x!.dtype };
    return {
      flops: 2 * m * n * k + 3 * m * k,
      bytes: bytesOf(x) + bytesOf(normWeight) + wBytes + bytesOf(y),
    };
  },
});

// ---- linear: bias and activation in the product's epilogue ---------------------

const ACTIVATION = {
  kind: 'enum',
  values: LINEAR_ACTIVATIONS,
  default: 'none',
  doc: 'applied to z = x·wᵀ + b',
} as const;

type LinearAttrs = { activation: LinearActivation; preActivation: boolean };

/**
 * y = act(x·wᵀ + b) for a weight stored [N, K] (a linear layer's layout),
 * with the bias and the activation applied where the product's sums are
 * stored, so neither z nor y + b makes a pass over memory of its own. A
 * separate spec rather than attributes of `matmul`: matmul's alpha, beta·c,
 * transposes and batches would each need a defined order against the
 * activation, and every matmul path (the weight cache included) would carry
 * it, while a layer needs exactly this. With `preActivation` the kernel also
 * writes z, which the backward of gelu, silu, sigmoid and tanh takes; relu's
 * backward reads y instead (z > 0 exactly where relu(z) > 0).
 */
export const linear = defineKernel<LinearAttrs>({
  name: 'linear',
  family: FAMILY,
  summary:
    "y = act(x·wᵀ + b), the bias and activation in the product's epilogue; optionally z = x·wᵀ + b too",
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[M, K]' },
    linearWeight('w'),
    { name: 'bias', dtypes: FLOAT, optional: true, doc: '[N]' },
  ],
  attributes: {
    activation: ACTIVATION,
    preActivation: { kind: 'boolean', default: false, doc: 'also return z = x·wᵀ + b, for the backward' },
  },
  infer([x, w, bias], { activation, preActivation }) {
    const check = new ArgCheck('linear');
    check.rank('x', x!, 2, '[M, K]');
    check.rank('w', w!, 2, '[N, K]');
    const [m, k] = x!.shape as [number, number];
    const n = w!.shape[0]!;
    check.dim('w', w!, 1, k, "K of 'x'");
    if (bias) {
      check.rank('bias', bias, 1, '[N]');
      check.dim('bias', bias, 0, n, "N of 'w'");
    }
    check.attr(
      !(preActivation && activation === 'none'),
      'preActivation',
      'without an activation z is y',
      "false with activation 'none'",
      String(preActivation),
    );
    const y = { name: 'y', shape: [m, n], dtype: x!.dtype };
    return preActivation ? [y, { ...y, name: 'z' }] : [y];
  },
  reference([x, w, bias], { activation, preActivation }, io) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    const n = io.outputs[0]!.shape[1]!;
    const act = ACTIVATION_FUNCTIONS[activation].f;
    const y = new Float32Array(m * n);
    const z = new Float32Array(m * n);
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let d = 0;
        for (let p = 0; p < k; p++) d += x![i * k + p]! * w![j * k + p]!;
        // The activation sees z rounded to f32, as a kernel's (and the saved z) is.
        z[i * n + j] = d + (bias ? bias[j]! : 0);
        y[i * n + j] = act(z[i * n + j]!);
      }
    }
    return preActivation ? [y, z] : [y];
  },
  cost([x, w, bias], { activation, preActivation }) {
    const [m, k] = x!.shape as [number, number];
    const n = w!.shape[0]!;
    const mn = m * n;
    return {
      flops: 2 * mn * k + (bias ? mn : 0) + ACTIVATION_FUNCTIONS[activation].flops * mn,
      bytes:
        bytesOf(x) +
        bytesOf(w) +
        bytesOf(bias) +
        bytesOf({ shape: [mn * (preActivation ? 2 : 1)], dtype: x!.dtype }),
    };
  },
});

/**
 * dz = dy · act'(z) and db = Σ_rows dz in one pass over dy: the backward of
 * `linear` short of its two matrix products (dx = dz·w, dw = dzᵀ·x, both
 * with transpose flags). `z` is the pre-activation that `linear` returned;
 * for relu its output y serves as well. db is summed in row order.
 */
export const biasActivationBackward = defineKernel<{ activation: LinearActivation }>({
  name: 'biasActivationBackward',
  family: FAMILY,
  summary: "dz = dy · act'(z), db = Σ over rows of dz",
  inputs: [
    { name: 'dy', dtypes: FLOAT, doc: '[M, N]' },
    {
      name: 'z',
      dtypes: FLOAT,
      optional: true,
      doc: "[M, N], the pre-activation (y for relu); not given with activation 'none'",
    },
  ],
  attributes: { activation: { ...ACTIVATION, doc: 'the forward activation' } },
  infer([dy, z], { activation }) {
    const check = new ArgCheck('biasActivationBackward');
    check.rank('dy', dy!, 2, '[M, N]');
    if (activation === 'none') {
      check.shape(z === undefined, 'z', "'z' is unused without an activation", 'nothing', z?.shape ?? []);
    } else {
      check.shape(
        z !== undefined,
        'z',
        `act'(z) of '${activation}' needs z`,
        formatShape(dy!.shape),
        'nothing',
      );
      check.sameShape('z', z!, dy!.shape, "'dy'");
    }
    return [
      { name: 'dz', shape: dy!.shape, dtype: dy!.dtype },
      { name: 'db', shape: [dy!.shape[1]!], dtype: dy!.dtype },
    ];
  },
  reference([dy, z], { activation }, io) {
    const [m, n] = io.inputs[0]!.shape as [number, number];
    const grad = ACTIVATION_FUNCTIONS[activation].grad;
    const dz = new Float32Array(m * n);
    const db = new Float64Array(n);
    for (let i = 0; i < m * n; i++) {
      dz[i] = z ? dy![i]! * grad(z[i]!) : dy![i]!;
      db[i % n]! += dz[i]!;
    }
    return [dz, Float32Array.from(db)];
  },
  cost([dy], { activation }) {
    const mn = dy!.shape[0]! * dy!.shape[1]!;
    const z = activation === 'none' ? 0 : mn;
    return {
      flops: (ACTIVATION_FUNCTIONS[activation].flops + 2) * mn,
      bytes: bytesPerElement(dy!.dtype) * (2 * mn + z + dy!.shape[1]!),
    };
  },
});
