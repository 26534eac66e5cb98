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
 * see @rayo/core's quantized layouts, or GGUF's Q4_K, Q5_K and Q6_K layouts
 * (q4k, q5k and q6k, for rows of whole super-blocks of 256), or Q5_0's and
 * Q5_1's (q5g32 and q5g32a, any rows). Quantizing on load leaves the
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
 * Quantizes a model's projections layer by layer as they arrive (see
 * `quantizeLlamaLayers`), so that a loader can quantize each layer right
 * after uploading it and hold one layer's dense tensors at a time; `finish`
 * gives the layers and the report, `dispose` frees what was quantized.
 */
export class LlamaLayerQuantizer {
  readonly path: LlamaQuantizePath;
  readonly #layers: QuantizedLlamaLayer[] = [];
  #head: QuantizedWeight | undefined;
  #milliseconds = 0;
  #maxAbsError = 0;
  #errorSq = 0;
  #weightSq = 0;
  #quantizedBytes = 0;
  #denseBytes = 0;

  constructor(
    readonly backend: Backend,
    readonly format: LlamaWeightFormat,
    on?: LlamaQuantizePath,
  ) {
    checkWeightFormat(backend, format);
    this.path = on ?? defaultQuantizePath(backend);
    if (this.path === 'device' && !backend.supports(quantizeRows.name)) {
      throw new UnsupportedOnBackendError(`the ${backend.name} backend cannot quantize on the device`, {
        operation: quantizeRows.name,
        argument: 'quantizeOn',
        expected: `'host', or a backend that implements ${quantizeRows.name}`,
        actual: `'device' on ${backend.name}`,
      });
    }
  }

  /** Quantizes `dense` and disposes it. */
  async #quantize(dense: Tensor, name: string): Promise<QuantizedWeight> {
    const start = performance.now();
    const done: QuantizedTensor =
      this.path === 'device'
        ? await quantizeOnDevice(this.backend, dense, this.format, name)
        : await quantizeOnHost(this.backend, dense, this.format);
    if (done.error) {
      this.#maxAbsError = Math.max(this.#maxAbsError, done.error.maxAbs);
      this.#errorSq += done.error.sumSquaredError;
      this.#weightSq += done.error.sumSquaredWeight;
    }
    this.#quantizedBytes += done.weight.byteLength;
    this.#denseBytes += dense.byteLength;
    dense.dispose();
    this.#milliseconds += performance.now() - start;
    return done.weight;
  }

  /** Quantizes the next layer's projections, each dense one disposed once quantized. */
  async addLayer(layer: Partial<Record<(typeof PROJECTIONS)[number], Tensor>>): Promise<void> {
    const index = this.#layers.length;
    const quantized: Partial<Record<(typeof PROJECTIONS)[number], QuantizedWeight>> = {};
    try {
      for (const name of PROJECTIONS) {
        const dense = layer[name];
        if (!dense) {
          throw new InvalidArgumentError(`layer ${index} has no '${name}' projection to quantize`, {
            operation: 'quantizeLlamaLayers',
            argument: `weights.layers[${index}].${name}`,
            expected: 'a dense [out, in] weight',
            actual: 'absent',
          });
        }
        quantized[name] = await this.#quantize(dense, `layers[${index}].${name}`);
      }
    } catch (error) {
      for (const w of Object.values(quantized)) w.dispose();
      throw error;
    }
    this.#layers.push(quantized as QuantizedLlamaLayer);
  }

  /** Quantizes the (untied) head and disposes the dense one. */
  async addHead(dense: Tensor): Promise<void> {
    this.#head = await this.#quantize(dense, 'head');
  }

  /** Waits for the device's work; the quantized layers (and head) and the report. */
  async finish(): Promise<{
    layers: QuantizedLlamaLayer[];
    head?: QuantizedWeight;
    report: LlamaQuantizationReport;
  }> {
    const start = performance.now();
    await this.backend.sync();
    this.#milliseconds += performance.now() - start;
    const report: LlamaQuantizationReport = {
      format: this.format,
      path: this.path,
      milliseconds: this.#milliseconds,
      ...(this.path === 'host'
        ? {
            maxAbsError: this.#maxAbsError,
            rmsRelativeError: this.#weightSq > 0 ? Math.sqrt(this.#errorSq / this.#weightSq) : 0,
          }
        : {}),
      quantizedBytes: this.#quantizedBytes,
      denseBytes: this.#denseBytes,
    };
    return { layers: [...this.#layers], ...(this.#head ? { head: this.#head } : {}), report };
  }

  /** Frees every quantized weight made so far. */
  dispose(): void {
    for (const layer of this.#layers) disposeQuantizedLayer(layer);
    this.#head?.dispose();
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
  const quantizer = new LlamaLayerQuantizer(backend, format, options.on);
  if (options.head) checkOwnHead(weights.head !== undefined);
  try {
    for (const layer of weights.layers) await quantizer.addLayer(layer);
    if (options.head) await quantizer.addHead(weights.head!);
    return await quantizer.finish();
  } catch (error) {
    quantizer.dispose();
    throw error;
  }
}

/** Refuses to quantize a head the model does not have of its own. */
export function checkOwnHead(untied: boolean): void {
  if (!untied) {
    throw new InvalidArgumentError('the model has no head of its own to quantize', {
      operation: 'quantizeLlamaLayers',
      argument: 'quantizeHead',
      expected: 'an untied head (a tied head is the embedding, which stays dense)',
      actual: 'a tied or absent head',
    });
  }
}

export function disposeQuantizedLayer(layer: QuantizedLlamaLayer): void {
  for (const w of Object.values(layer)) w?.dispose();
}
