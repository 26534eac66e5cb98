import {
  type Backend,
  InvalidArgumentError,
  isQuantFormat,
  QUANT_FORMATS,
  type QuantFormat,
  type QuantizedWeight,
  quantizedMatmul,
  quantizeRows,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { type QuantizedTensor, quantizeOnDevice, quantizeOnHost } from './quantizeTensor.js';
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
 * into its quantized blocks as F16).
 */
export type QuantizedLlamaLayer = Readonly<Partial<Record<(typeof PROJECTIONS)[number], QuantizedWeight>>>;

const PROJECTIONS = LLAMA_PROJECTIONS;

/**
 * Where weights are quantized on load: `'device'` runs core's `quantizeRows`
 * on the dense tensor where it already is (the same bits as the host
 * quantizer, without reading the weights back); `'host'` reads each weight
 * back and quantizes it with `quantizeWeights`, measuring the error it
 * introduces.
 */
export type LlamaQuantizePath = 'device' | 'host';

/** The device path where the backend has `quantizeRows` (the cpu backend's is the host quantizer itself). */
export function defaultQuantizePath(backend: Backend): LlamaQuantizePath {
  return backend.name !== 'cpu' && backend.supports(quantizeRows.name) ? 'device' : 'host';
}

/** What quantizing the projections cost in accuracy and time, over all of them. */
export interface LlamaQuantizationReport {
  readonly format: LlamaWeightFormat;
  /** Where the weights were quantized. */
  readonly path: LlamaQuantizePath;
  /** Wall time of quantizing every weight, the device's work included (ms). */
  readonly milliseconds: number;
  /** max |w − ŵ| over every projection weight (the host path only: the device path reads nothing back). */
  readonly maxAbsError?: number;
  /** sqrt(Σ (w − ŵ)² / Σ w²) over every projection weight (the host path only). */
  readonly rmsRelativeError?: number;
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
 * Quantizes every layer's projections (and the head where asked), one weight
 * at a time, each dense tensor disposed as soon as its quantized one exists:
 * on the device where the backend has `quantizeRows` (see
 * `LlamaQuantizePath`; `on` chooses), else read back and quantized on the
 * host (round to nearest). Returns the layers and the report.
 */
export async function quantizeLlamaLayers(
  backend: Backend,
  weights: LlamaWeights,
  format: LlamaWeightFormat,
  options: { readonly head?: boolean; readonly on?: LlamaQuantizePath } = {},
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
  const path = options.on ?? defaultQuantizePath(backend);
  if (path === 'device' && !backend.supports(quantizeRows.name)) {
    throw new UnsupportedOnBackendError(`the ${backend.name} backend cannot quantize on the device`, {
      operation: quantizeRows.name,
      argument: 'quantizeOn',
      expected: `'host', or a backend that implements ${quantizeRows.name}`,
      actual: `'device' on ${backend.name}`,
    });
  }
  const start = performance.now();
  const layers: QuantizedLlamaLayer[] = [];
  let head: QuantizedWeight | undefined;
  let maxAbsError = 0;
  let errorSq = 0;
  let weightSq = 0;
  let quantizedBytes = 0;
  let denseBytes = 0;
  const quantize = async (dense: Tensor, name: string): Promise<QuantizedWeight> => {
    const done: QuantizedTensor =
      path === 'device'
        ? await quantizeOnDevice(backend, dense, format, name)
        : await quantizeOnHost(backend, dense, format);
    if (done.error) {
      maxAbsError = Math.max(maxAbsError, done.error.maxAbs);
      errorSq += done.error.sumSquaredError;
      weightSq += done.error.sumSquaredWeight;
    }
    quantizedBytes += done.weight.byteLength;
    denseBytes += dense.byteLength;
    dense.dispose();
    return done.weight;
  };
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
          quantized[name] = await quantize(dense, `layers[${layers.length}].${name}`);
        }
      } catch (error) {
        for (const w of Object.values(quantized)) w.dispose();
        throw error;
      }
      layers.push(quantized as QuantizedLlamaLayer);
    }
    if (options.head) head = await quantize(weights.head!, 'head');
    await backend.sync();
  } catch (error) {
    for (const layer of layers) disposeQuantizedLayer(layer);
    head?.dispose();
    throw error;
  }
  const report: LlamaQuantizationReport = {
    format,
    path,
    milliseconds: performance.now() - start,
    ...(path === 'host'
      ? { maxAbsError, rmsRelativeError: weightSq > 0 ? Math.sqrt(errorSq / weightSq) : 0 }
      : {}),
    quantizedBytes,
    denseBytes,
  };
  return { layers, ...(head ? { head } : {}), report };
}

export function disposeQuantizedLayer(layer: QuantizedLlamaLayer): void {
  for (const name of PROJECTIONS) layer[name]?.dispose();
}
