import {
  type Backend,
  type HostArray,
  InvalidArgumentError,
  isQuantFormat,
  QUANT_FORMATS,
  type QuantFormat,
  type QuantizedWeight,
  quantizationError,
  quantizedMatmul,
  quantizeWeights,
  UnsupportedOnBackendError,
  uploadQuantized,
} from '@rayo/core';
import { LLAMA_PROJECTIONS, type LlamaWeights } from './weights.js';

/**
 * How a model stores its projection weights (q, k, v, o, gate, up, down) on
 * the device: int8 per output row or with a scale per 32 or 16 weights, or 4
 * bits with a scale per 32 or 128 weights (or a scale and an offset per 32),
 * see @rayo/core's quantized layouts. Quantizing on load leaves the
 * embedding, the norms and the head in the model's weight dtype.
 */
export type LlamaWeightFormat = QuantFormat;

/**
 * The quantized projections of one layer. A projection absent here is the
 * layer's dense one (a GGUF file stores a matrix whose rows do not divide
 * into its quantized blocks as F16). `qkv` holds q, k and v fused, in place
 * of the three (see `fuseQuantizedQkv`).
 */
export type QuantizedLlamaLayer = Readonly<
  Partial<Record<(typeof PROJECTIONS)[number] | 'qkv', QuantizedWeight>>
>;

const PROJECTIONS = LLAMA_PROJECTIONS;

/** What quantizing the projections cost in accuracy, over all of them. */
export interface LlamaQuantizationReport {
  readonly format: LlamaWeightFormat;
  /** max |w − ŵ| over every projection weight. */
  readonly maxAbsError: number;
  /** sqrt(Σ (w − ŵ)² / Σ w²) over every projection weight. */
  readonly rmsRelativeError: number;
  /** Bytes of the quantized projections (codes, scales, zero points), and of the weights they replace. */
  readonly quantizedBytes: number;
  readonly denseBytes: number;
}

/** Refuses a format that is not one and a backend without the quantized product. */
export function checkWeightFormat(backend: Backend, format: unknown): asserts format is LlamaWeightFormat {
  if (!isQuantFormat(format)) {
    throw new InvalidArgumentError('weightFormat must be a quantized format', {
      operation: 'LlamaModel',
      argument: 'weightFormat',
      expected: QUANT_FORMATS.map((f) => `'${f}'`).join(' | '),
      actual: String(format),
    });
  }
  if (!backend.supports(quantizedMatmul.name)) {
    throw new UnsupportedOnBackendError(`the ${backend.name} backend has no quantized matrix product`, {
      operation: quantizedMatmul.name,
      argument: 'weightFormat',
      expected: `a backend that implements ${quantizedMatmul.name}`,
      actual: backend.name,
    });
  }
}

/**
 * Quantizes every layer's projections: each weight is read back from the
 * device, quantized on the host (round to nearest), uploaded, and its
 * dense tensor disposed, one weight at a time (so the host holds one
 * weight's values at once). Returns the layers and the error introduced.
 */
export async function quantizeLlamaLayers(
  backend: Backend,
  weights: LlamaWeights,
  format: LlamaWeightFormat,
  options: { readonly head?: boolean } = {},
): Promise<{ layers: QuantizedLlamaLayer[]; head?: QuantizedWeight; report: LlamaQuantizationReport }> {
  checkWeightFormat(backend, format);
  if (options.head && !weights.head) {
    throw new InvalidArgumentError('the model has no head of its own to quantize', {
      operation: 'quantizeLlamaLayers',
      argument: 'quantizeHead',
      expected: 'an untied head (a tied head is the embedding, which stays dense)',
      actual: 'a tied or absent head',
    });
  }
  const layers: QuantizedLlamaLayer[] = [];
  let head: QuantizedWeight | undefined;
  let maxAbsError = 0;
  let errorSq = 0;
  let weightSq = 0;
  let quantizedBytes = 0;
  let denseBytes = 0;
  try {
    for (const layer of weights.layers) {
      const quantized: Partial<Record<(typeof PROJECTIONS)[number], QuantizedWeight>> = {};
      try {
        for (const name of PROJECTIONS) {
          const dense = layer[name];
          if (!dense) {
            throw new InvalidArgumentError(`layer ${layers.length} has no '${name}' projection to quantize`, {
              operation: 'quantizeLlamaLayers',
              argument: `weights.layers[${layers.length}].${name}`,
              expected: 'a dense [out, in] weight',
              actual: 'absent',
            });
          }
          const values = (await dense.read()) as HostArray;
          const shape = dense.shape as [number, number];
          const host = quantizeWeights(values, shape, format, { dtype: dense.dtype });
          const error = quantizationError(values, host, dense.dtype);
          maxAbsError = Math.max(maxAbsError, error.maxAbs);
          errorSq += error.sumSquaredError;
          weightSq += error.sumSquaredWeight;
          quantized[name] = uploadQuantized(backend, host);
          quantizedBytes += quantized[name].byteLength;
          denseBytes += dense.byteLength;
          dense.dispose();
        }
      } catch (error) {
        for (const w of Object.values(quantized)) w.dispose();
        throw error;
      }
      layers.push(quantized as QuantizedLlamaLayer);
    }
    if (options.head) {
      const dense = weights.head!;
      const values = (await dense.read()) as HostArray;
      const host = quantizeWeights(values, dense.shape as [number, number], format, { dtype: dense.dtype });
      const error = quantizationError(values, host, dense.dtype);
      maxAbsError = Math.max(maxAbsError, error.maxAbs);
      errorSq += error.sumSquaredError;
      weightSq += error.sumSquaredWeight;
      head = uploadQuantized(backend, host);
      quantizedBytes += head.byteLength;
      denseBytes += dense.byteLength;
      dense.dispose();
    }
  } catch (error) {
    for (const layer of layers) disposeQuantizedLayer(layer);
    head?.dispose();
    throw error;
  }
  const rmsRelativeError = weightSq > 0 ? Math.sqrt(errorSq / weightSq) : 0;
  const report = { format, maxAbsError, rmsRelativeError, quantizedBytes, denseBytes };
  return { layers, ...(head ? { head } : {}), report };
}

export function disposeQuantizedLayer(layer: QuantizedLlamaLayer): void {
  for (const w of Object.values(layer)) w?.dispose();
}
