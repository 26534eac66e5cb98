import type { Backend, Tensor } from '../backend.js';
import { type DType, toNumbers } from '../dtype.js';
import { gateUpInputs, quantizedGateUpSwiglu } from '../kernels/index.js';
import type { GateUpFormat } from '../kernels/quantizedGateUp.js';
import { int8ActivationBlocks, type QuantizedHostWeight } from '../quant/index.js';
import { dequantizeWeights } from '../quant/quantize.js';
import { runQuantizedMatmul, uploadQuantized } from '../quant/quantizedWeight.js';

// Checking products on int8 activations (a backend's int8 GEMVs): run one
// product y = x·Wᵀ + 0.5·c, or a gate·up pair, of host-quantized weights, and
// compare it with the product of x's int8 blocks computed in f64.

/** y = x·Wᵀ + 0.5·c (one weight) or silu(x·Wgᵀ) ⊙ (x·Wuᵀ) (two) on `backend`, inputs in `dtype`. */
export function runQuantizedProduct(
  backend: Backend,
  o: {
    readonly x: ArrayLike<number>;
    readonly c: ArrayLike<number>;
    readonly weights: readonly QuantizedHostWeight[];
    readonly m: number;
    readonly dtype?: DType;
    /** An rmsNorm folded in: its weight [K] (in `dtype`) and eps. */
    readonly norm?: { readonly weight: ArrayLike<number>; readonly eps: number };
  },
): { out: Tensor; inputs: { x: Tensor; c: Tensor; normWeight: Tensor | undefined }; dispose(): void } {
  const { m } = o;
  const { n, k, format } = o.weights[0]!;
  const dtype = o.dtype ?? 'f32';
  const x = backend.upload(Array.from(o.x), [m, k], dtype);
  const c = backend.upload(Array.from(o.c), [m, n], dtype);
  const normWeight = o.norm ? backend.upload(Array.from(o.norm.weight), [k], dtype) : undefined;
  const norm = normWeight ? { weight: normWeight, eps: o.norm!.eps } : undefined;
  const uploaded = o.weights.map((w) => uploadQuantized(backend, w));
  const [gate, up] = [uploaded[0]!, uploaded[1] ?? uploaded[0]!];
  const out =
    o.weights.length === 2
      ? backend.run(quantizedGateUpSwiglu, gateUpInputs(x, gate, up, normWeight), {
          format: format as GateUpFormat,
          ...(norm ? { eps: norm.eps } : {}),
        })[0]!
      : runQuantizedMatmul(backend, x, gate, { c, beta: 0.5, ...(norm ? { norm } : {}) });
  return {
    out,
    inputs: { x, c, normWeight },
    dispose() {
      for (const t of [out, x, c, normWeight]) t?.dispose();
      for (const w of uploaded) for (const t of [w.packed, w.scales, w.zeros, w.offsets]) t?.dispose();
    },
  };
}

/**
 * How far `got` (the product of runQuantizedProduct, read back) lies from
 * the product of x's int8 blocks in f64, per element, over its bound:
 * `share` · Σ|w·x̃| + 1e-6, the f32 rounding of the chunks' sums and scales
 * (4e-6; 2^-8 for half outputs). The worst ratio and its element; ≤ 1 passes.
 */
export function int8ProductError(
  got: ArrayLike<number>,
  o: {
    readonly x: ArrayLike<number>;
    readonly c: ArrayLike<number>;
    readonly weights: readonly QuantizedHostWeight[];
    readonly m: number;
    readonly share?: number;
    /**
     * A folded rmsNorm (as the device holds its weight): the blocks are those
     * of f32(x · weight), and each row's sums are scaled by 1 / sqrt(mean(x²) + eps).
     */
    readonly norm?: { readonly weight: ArrayLike<number>; readonly eps: number };
  },
): { worst: number; at: number; blocks: ReturnType<typeof int8ActivationBlocks>; sums: Float64Array[] } {
  const { m, norm } = o;
  const { n, k } = o.weights[0]!;
  const share = o.share ?? 4e-6;
  const weighted = norm ? Float32Array.from(o.x, (v, i) => v * norm.weight[i % k]!) : o.x;
  const blocks = int8ActivationBlocks(weighted, m, k);
  const rowScale = Array.from({ length: m }, (_, r) => {
    if (!norm) return 1;
    let sumSq = 0;
    for (let i = 0; i < k; i++) sumSq += o.x[r * k + i]! ** 2;
    return 1 / Math.sqrt(sumSq / k + norm.eps);
  });
  const xq = blocks.values;
  const dense = o.weights.map((w) => dequantizeWeights(w));
  const sums = dense.map(() => new Float64Array(m * n));
  const sizes = dense.map(() => new Float64Array(m * n));
  dense.forEach((w, p) => {
    for (let r = 0; r < m; r++)
      for (let j = 0; j < n; j++) {
        let sum = 0;
        let size = 0;
        for (let i = 0; i < k; i++) {
          const t = w[j * k + i]! * xq[r * k + i]!;
          sum += t;
          size += Math.abs(t);
        }
        sums[p]![r * n + j] = sum * rowScale[r]!;
        sizes[p]![r * n + j] = size * rowScale[r]!;
      }
  });
  const silu = (v: number) => v / (1 + Math.exp(-v));
  let worst = 0;
  let at = -1;
  for (let i = 0; i < m * n; i++) {
    const pair = dense.length === 2;
    const want = pair ? silu(sums[0]![i]!) * sums[1]![i]! : sums[0]![i]! + 0.5 * o.c[i]!;
    const size = pair
      ? Math.abs(silu(sums[0]![i]!)) * sizes[1]![i]! + sizes[0]![i]! * Math.abs(sums[1]![i]!)
      : sizes[0]![i]! + 0.5;
    const error = Math.abs(got[i]! - want) / (share * size + 1e-6);
    if (!(error <= worst)) {
      worst = Number.isNaN(error) ? Number.POSITIVE_INFINITY : error;
      at = i;
    }
  }
  return { worst, at, blocks, sums };
}

/** A tensor's elements as f64 numbers, whatever its dtype. */
export async function readNumbers(t: Tensor): Promise<Float64Array> {
  return toNumbers(t.dtype, await t.read());
}
