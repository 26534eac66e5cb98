import {
  biasAdd,
  InvalidArgumentError,
  matmul,
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

/** A layer's dense projection, which a model without quantized layers must have. */
export function denseProjection(w: LlamaLayerWeights, name: Projection): Tensor {
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

/** input·Wᵀ (+ residual) for projection `name`: the quantized product where the layer has one. */
export function project(
  run: TrackingRunner,
  input: Tensor,
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
  name: Projection,
  residual?: Tensor,
): Tensor {
  const q = quantized?.[name];
  if (q) {
    return run.run1(quantizedMatmul, [input, q.packed, q.scales, q.zeros, residual, q.offsets], {
      format: q.format,
      beta: 1,
    });
  }
  return run.run1(
    matmul,
    [input, denseProjection(w, name), residual],
    residual ? { transB: true, beta: 1 } : { transB: true },
  );
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
