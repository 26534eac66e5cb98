import {
  biasAdd,
  type DType,
  GATED_PRODUCT_TILES,
  HALF_OPERAND_PASS,
  halfPrecisionDtype,
  InvalidArgumentError,
  type MatmulPrecision,
  matmul,
  type QuantizedWeight,
  quantizedEmbedding,
  quantizedMatmul,
  rmsNorm,
  type Tensor,
  type TrackingRunner,
} from '@rayo/core';
import type { LlamaConfig } from './config.js';
import type { LlamaDecoder } from './decoder.js';
import type { QuantizedLlamaLayer } from './quantizedLayers.js';
import type { LLAMA_PROJECTIONS, LlamaLayerWeights } from './weights.js';

// The pieces every layer path shares: projections, a family's biases and head norms, RoPE's inputs.

type Projection = (typeof LLAMA_PROJECTIONS)[number];

/** A layer's dense projection (`qkv`: q, k and v fused), which a model without quantized layers must have. */
export function denseProjection(w: LlamaLayerWeights, name: Projection | 'qkv'): Tensor {
  const tensor = w[name];
  if (!tensor) {
    throw new InvalidArgumentError(`the layer has no dense '${name}' projection and no quantized one`, {
      operation: 'LlamaModel',
      argument: `weights.layers[].${name}`,
      expected: 'a dense weight, or quantized layers (LlamaModelOptions.quantized)',
      actual: 'absent',
    });
  }
  return tensor;
}

/**
 * How a product of `rows` rows of f32 activations by a `weight`-dtype weight
 * is computed: one row (decoding) exactly, as the GEMV kernels do; a chunk
 * of a prompt on tensor cores where the weights are half (the activations
 * rounded to the weights' dtype, f32 sums), and as `prefillPrecision` asks
 * for f32 weights ('bf16' rounds both to bf16).
 */
export function productPrecision(d: LlamaDecoder, rows: number, weight: DType): MatmulPrecision {
  if (rows <= 1) return 'f32';
  if (weight !== 'f32') return 'half';
  return d.prefillPrecision === 'bf16' ? 'half' : d.prefillPrecision;
}

/**
 * Rows from which a quantized projection is dequantized (to bf16, what
 * the product's precision 'half' rounds an f32 weight to) and multiplied on tensor cores: below it
 * the quantized kernels, which read the packed weight once per few rows.
 * The dequantized weights are scratch tensors freed with the layer's
 * intermediates; dequantizing tiles in shared memory inside the GEMM would
 * avoid them.
 */
export const DEQUANTIZED_PREFILL_ROWS = 32;

/**
 * Rows from which a layer's producers write the half operand of quantized
 * products too (they are dequantized to bf16 from `DEQUANTIZED_PREFILL_ROWS`
 * rows; fewer rows run the quantized kernels, which read f32 activations).
 */
export const HALF_OPERAND_ROWS = DEQUANTIZED_PREFILL_ROWS;

/** The half dtype a producer writes for a product that reads it (see `halfOperand`). */
export type HalfOperand = 'f16' | 'bf16';

/**
 * The half dtype the products of `rows` rows by `weights` (dense, or
 * quantized: dequantized to bf16 for a chunk) round their f32 input to
 * (precision 'half'), for its producer (a norm, SwiGLU, attention) to
 * write instead of f32: the values the products read are then the same,
 * and no rounding pass runs before them. A few rows (a batch of decoding
 * sequences) against half weights take it too: the backend's products of
 * a few rows round an f32 operand element by element as they load it,
 * where a half one streams in with the weights' asynchronous copies.
 * Undefined where any of them reads f32 (one row, f32 precisions, a
 * quantized product of few rows), where they differ, or where the backend
 * has no rounding pass (`HALF_OPERAND_PASS`).
 */
export function halfOperand(
  d: LlamaDecoder,
  rows: number,
  weights: readonly (Tensor | QuantizedWeight | undefined)[],
): HalfOperand | undefined {
  if (rows < 2 || !d.backend.info.features.includes(HALF_OPERAND_PASS)) return undefined;
  const chunk = rows >= HALF_OPERAND_ROWS;
  const dtypes = new Set(
    weights.map((weight) => {
      if (weight === undefined) return undefined;
      if ('format' in weight)
        return chunk && d.backend.supports(quantizedEmbedding.name) ? 'bf16' : undefined;
      // An f32 weight under a half precision is rounded whole on every call of few rows: not worth a half operand.
      if ((!chunk && weight.dtype === 'f32') || productPrecision(d, rows, weight.dtype) !== 'half')
        return undefined;
      return halfPrecisionDtype('f32', weight.dtype);
    }),
  );
  return dtypes.size === 1 ? [...dtypes][0] : undefined;
}

/** `halfOperand` of a layer's q, k and v products (one where they are fused): what its input norm writes. */
export function qkvHalfOperand(
  d: LlamaDecoder,
  rows: number,
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
): HalfOperand | undefined {
  const names = w.qkv || quantized?.qkv ? (['qkv'] as const) : (['q', 'k', 'v'] as const);
  return halfOperand(
    d,
    rows,
    names.map((name) => projectionWeight(w, quantized, name)),
  );
}

/** A layer's weight for projection `name`: the quantized one where it has one. */
export function projectionWeight(
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
  name: Projection | 'qkv',
): Tensor | QuantizedWeight | undefined {
  return quantized?.[name] ?? w[name];
}

/** Whether `project` takes the quantized product for `rows` rows of a quantized weight (not the dequantized prefill). */
export function quantizedProductFor(d: LlamaDecoder, rows: number): boolean {
  return rows < DEQUANTIZED_PREFILL_ROWS || !d.backend.supports(quantizedEmbedding.name);
}

/**
 * rmsNorm(x, norm.weight, norm.eps)·Wᵀ of a quantized projection, the norm
 * folded into the product (quantizedMatmul's normWeight): where
 * quantizedProductFor holds, so that the normalised rows are never written.
 */
export function projectNormed(
  d: LlamaDecoder,
  run: TrackingRunner,
  x: Tensor,
  q: QuantizedWeight,
  norm: { readonly weight: Tensor; readonly eps: number },
): Tensor {
  return run.run1(quantizedMatmul, [x, q.packed, q.scales, q.zeros, undefined, q.offsets, norm.weight], {
    format: q.format,
    eps: norm.eps,
    activations: d.quantizedActivations,
  });
}

/**
 * input·Wᵀ (+ residual) for projection `name` (`qkv`: q, k and v fused, [rows,
 * (heads + 2·kvHeads)·headDim]): the quantized product where the layer has one.
 */
export function project(
  d: LlamaDecoder,
  run: TrackingRunner,
  input: Tensor,
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
  name: Projection | 'qkv',
  residual?: Tensor,
): Tensor {
  const q = quantized?.[name];
  const rows = input.shape[0]!;
  if (q && !quantizedProductFor(d, rows)) {
    return product(run, input, dequantized(d, run, q), residual, 'half');
  }
  if (q) {
    return run.run1(quantizedMatmul, [input, q.packed, q.scales, q.zeros, residual, q.offsets], {
      format: q.format,
      beta: 1,
      activations: d.quantizedActivations,
    });
  }
  const weight = denseProjection(w, name);
  return product(run, input, weight, residual, productPrecision(d, rows, weight.dtype));
}

/** input·weightᵀ (+ residual) at `precision`. */
function product(
  run: TrackingRunner,
  input: Tensor,
  weight: Tensor,
  residual: Tensor | undefined,
  precision: MatmulPrecision,
): Tensor {
  return run.run1(matmul, [input, weight, residual], {
    transB: true,
    ...(residual ? { beta: 1 } : {}),
    ...(precision === 'f32' ? {} : { precision }),
    // A half input (`halfOperand`'s) still gives the f32 activations.
    ...(input.dtype === 'f32' ? {} : { out: 'f32' }),
  });
}

/**
 * The [N, K] values of a quantized weight rounded to bf16, every row looked up by
 * `quantizedEmbedding` (the values the format's dequantization gives),
 * tracked by `run` like any intermediate: an eager prefill frees it with
 * the layer's, a recorded chunk keeps it for as long as its batch.
 */
function dequantized(d: LlamaDecoder, run: TrackingRunner, q: QuantizedWeight): Tensor {
  const ids = d.dequantizeRows.get(q.n)!;
  return run.run1(quantizedEmbedding, [ids, q.packed, q.scales, q.zeros, q.offsets], {
    format: q.format,
    dim: q.k,
    to: 'bf16',
  });
}

/**
 * The half weights of a chunk's gate and up products where gateUpSwiglu
 * takes them on tensor cores (`GATED_PRODUCT_TILES`): from HALF_OPERAND_ROWS
 * rows, with h (the norm's output) their half operand, the weights in h's
 * dtype (dense, or quantized and dequantized to bf16), and the down product
 * reading that dtype too (gateUpSwiglu writes its output in h's). Undefined
 * otherwise: then two products and a swiglu pass.
 */
export function gatedChunkWeights(
  d: LlamaDecoder,
  run: TrackingRunner,
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
  h: Tensor,
  downOperand: HalfOperand | undefined,
): { gate: Tensor; up: Tensor } | undefined {
  const rows = h.shape[0]!;
  if (
    rows < HALF_OPERAND_ROWS ||
    h.dtype === 'f32' ||
    downOperand !== h.dtype ||
    !d.backend.info.features.includes(GATED_PRODUCT_TILES)
  )
    return undefined;
  const names = ['gate', 'up'] as const;
  const takes = (name: (typeof names)[number]) => {
    const q = quantized?.[name];
    if (q) return h.dtype === 'bf16' && !quantizedProductFor(d, rows);
    return denseProjection(w, name).dtype === h.dtype;
  };
  if (!names.every(takes)) return undefined;
  const [gate, up] = names.map((name) => {
    const q = quantized?.[name];
    return q ? dequantized(d, run, q) : denseProjection(w, name);
  }) as [Tensor, Tensor];
  return { gate, up };
}

/** `y` + `bias` (a family's projection bias) on every row, or `y` itself without one. */
export function biased(run: TrackingRunner, y: Tensor, bias: Tensor | undefined): Tensor {
  return bias ? run.run1(biasAdd, [y, bias]) : y;
}

/**
 * z [rows, heads·headDim] with every head normalised by `norm` ([headDim]),
 * as [rows·heads, headDim] (Qwen3's q and k norms, before RoPE); z itself
 * without a norm.
 */
export function headNorm(
  run: TrackingRunner,
  config: LlamaConfig,
  z: Tensor,
  norm: Tensor | undefined,
): Tensor {
  if (!norm) return z;
  const { headDim, rmsNormEps: eps } = config;
  return run.run1(rmsNorm, [z.reshape([z.size / headDim, headDim]), norm], { eps });
}

/** A RoPE kernel's inputs, with the decoder's frequency table after them where its RoPE is scaled. */
export function withFrequencies(d: LlamaDecoder, inputs: (Tensor | undefined)[]): (Tensor | undefined)[] {
  return d.frequencies ? [...inputs, d.frequencies] : inputs;
}
