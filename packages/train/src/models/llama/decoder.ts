import {
  type Backend,
  InvalidArgumentError,
  type QuantActivations,
  type QuantizedWeight,
  quantizedEmbedding,
  quantizedMatmul,
  ropeFrequencies,
  ShapeError,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { checkIntegerAtLeast } from '../../integerOption.js';
import { checkLlamaBackend, defaultKvCacheDtype, fusedDecodeSupported } from './backendDtypes.js';
import { checkSlidingWindow, type LlamaConfig } from './config.js';
import { checkFusedQkvBackend, checkFusedQkvLayer } from './fusedQkv.js';
import {
  checkDtypeOption,
  checkPrefillPrecision,
  checkQuantizedActivations,
  type LlamaModelOptions,
  type LlamaPrefillPrecision,
} from './modelOptions.js';
import { disposeQuantizedLayer, type QuantizedLlamaLayer } from './quantizedLayers.js';
import {
  checkLlamaWeights,
  LAYER_TENSORS,
  LLAMA_PROJECTIONS,
  type LlamaWeightDType,
  type LlamaWeights,
  llamaWeightTensors,
} from './weights.js';

export interface LayerCache {
  /** [numKeyValueHeads, maxSequence, headDim], head-first. */
  readonly k: Tensor;
  readonly v: Tensor;
}

/**
 * A Llama decoder's state on the device, fixed once it is placed: what the
 * forward pass reads (weights dense and quantized, the KV caches, RoPE's
 * frequencies, the inputs of a recorded step) and the choices made for the
 * backend (fused decode kernels, dtypes).
 */
export interface LlamaDecoder {
  readonly backend: Backend;
  readonly config: LlamaConfig;
  readonly weights: LlamaWeights;
  /** Rows of the KV cache. */
  readonly maxSequence: number;
  /** The dtype of the matrix weights and the embedding (norm weights are f32). */
  readonly weightDtype: LlamaWeightDType;
  readonly kvCacheDtype: LlamaWeightDType;
  /** Decode steps fold each RMSNorm into what follows it (the fused kernels). */
  readonly fused: boolean;
  /** How a prompt's products with f32 weights are computed (`LlamaModelOptions.prefillPrecision`). */
  readonly prefillPrecision: LlamaPrefillPrecision;
  /** `LlamaModelOptions.quantizedActivations`. */
  readonly quantizedActivations: QuantActivations;
  readonly caches: readonly LayerCache[];
  /** Every layer's quantized projections, in place of the dense ones. */
  readonly quantizedLayers: readonly QuantizedLlamaLayer[] | undefined;
  readonly quantizedEmbedding: QuantizedWeight | undefined;
  /** The quantized head: the quantized embedding itself where the head is tied. */
  readonly quantizedHead: QuantizedWeight | undefined;
  /** f32 [headDim / 2]: RoPE's scaled frequencies (the config's `ropeScaling`); absent, the kernels use theta's. */
  readonly frequencies: Tensor | undefined;
  /** i32 [1]: the token a recorded step embeds. */
  readonly tokenInput: Tensor;
  /** i32 [1]: the cache row of a recorded step's token (RoPE's position, the scatter's row). */
  readonly positionInput: Tensor;
  /** i32 [1]: the rows a recorded step attends over (position + 1). */
  readonly lengthInput: Tensor;
  /**
   * i32 [n] = 0 … n−1 for every row count n of a quantized projection: the
   * rows a prompt's chunk dequantizes. Uploaded once, as an upload from
   * pageable memory may wait for the stream to drain.
   */
  readonly dequantizeRows: ReadonlyMap<number, Tensor>;
}

/**
 * Checks the weights, the options and the backend against each other, then
 * allocates the caches and the step inputs. The decoder owns `weights` and
 * the quantized ones from here (`disposeLlamaDecoder` frees them).
 */
export function createLlamaDecoder(
  backend: Backend,
  config: LlamaConfig,
  weights: LlamaWeights,
  options: LlamaModelOptions,
): LlamaDecoder {
  const maxSequence = options.maxSequence ?? config.maxPositionEmbeddings;
  checkIntegerAtLeast('LlamaModel', 'maxSequence', maxSequence, 1, 'maxSequence must be a positive integer');
  checkSlidingWindow(config, maxSequence);
  const weightDtype = checkLlamaWeights(config, weights, {
    quantizedProjections: options.quantized?.layers !== undefined,
    quantizedEmbedding: options.quantized?.embedding !== undefined,
    quantizedHead: options.quantized?.head !== undefined,
  });
  const kvCacheDtype = options.kvCacheDtype ?? defaultKvCacheDtype(backend, weightDtype);
  checkDtypeOption('kvCacheDtype', kvCacheDtype);
  const fused = options.fused ?? fusedDecodeSupported(backend, weightDtype, kvCacheDtype);
  const prefillPrecision = checkPrefillPrecision(options.prefillPrecision ?? 'f32');
  const quantizedActivations = checkQuantizedActivations(options.quantizedActivations ?? 'int8');
  checkLlamaBackend(backend, weightDtype, kvCacheDtype, fused);
  checkFusedQkvBackend(backend, weights, kvCacheDtype);
  const quantized = checkQuantized(backend, config, weights, options.quantized);
  const cacheShape = [config.numKeyValueHeads, maxSequence, config.headDim];
  const { ropeScaling } = config;
  return {
    backend,
    config,
    weights,
    maxSequence,
    weightDtype,
    kvCacheDtype,
    fused,
    prefillPrecision,
    quantizedActivations,
    // Zeros: the attention never reads rows not yet written, but a cache is never left uninitialised.
    caches: weights.layers.map(() => ({
      k: backend.zeros(cacheShape, kvCacheDtype),
      v: backend.zeros(cacheShape, kvCacheDtype),
    })),
    ...quantized,
    tokenInput: backend.zeros([1], 'i32'),
    positionInput: backend.zeros([1], 'i32'),
    lengthInput: backend.zeros([1], 'i32'),
    frequencies: ropeScaling
      ? backend.upload(ropeFrequencies(config.ropeTheta, config.headDim, ropeScaling), [config.headDim / 2])
      : undefined,
    dequantizeRows: rowIdsOf(backend, quantized.quantizedLayers),
  };
}

function rowIdsOf(backend: Backend, layers: readonly QuantizedLlamaLayer[] | undefined): Map<number, Tensor> {
  const rows = new Map<number, Tensor>();
  for (const w of (layers ?? []).flatMap((layer) => Object.values(layer))) {
    if (!rows.has(w.n))
      rows.set(
        w.n,
        backend.upload(
          Int32Array.from({ length: w.n }, (_, i) => i),
          [w.n],
          'i32',
        ),
      );
  }
  return rows;
}

/** The quantized weights of `options.quantized`, checked against the config and the backend. */
function checkQuantized(
  backend: Backend,
  config: LlamaConfig,
  weights: LlamaWeights,
  quantized: LlamaModelOptions['quantized'],
): Pick<LlamaDecoder, 'quantizedLayers' | 'quantizedEmbedding' | 'quantizedHead'> {
  const layers = quantized?.layers;
  if (layers && layers.length !== weights.layers.length) {
    throw new InvalidArgumentError('one quantized layer per layer is needed', {
      operation: 'LlamaModel',
      argument: 'quantized.layers',
      expected: `${weights.layers.length} layers`,
      actual: `${layers.length}`,
    });
  }
  // A projection a quantized layer leaves out is the layer's dense one, which must then be there.
  layers?.forEach((layer, i) => {
    const fusedQkv = checkFusedQkvLayer(i, weights.layers[i]!, layer);
    for (const p of LLAMA_PROJECTIONS) {
      if (layer[p] !== undefined || weights.layers[i]![p] !== undefined) continue;
      if (fusedQkv && (p === 'q' || p === 'k' || p === 'v')) continue;
      throw new InvalidArgumentError(`layer ${i} has no '${p}' projection, quantized or dense`, {
        operation: 'LlamaModel',
        argument: `quantized.layers[${i}].${p}`,
        expected: `a quantized weight, or a dense ${LAYER_TENSORS[p]} in weights.layers[${i}]`,
        actual: 'absent from both',
      });
    }
  });
  const { embedding, head } = quantized ?? {};
  if (config.tieWordEmbeddings && head !== undefined && head !== embedding) {
    throw new InvalidArgumentError('a tied head must be the embedding itself', {
      operation: 'LlamaModel',
      argument: 'quantized.head',
      expected: 'quantized.embedding (tie_word_embeddings is true)',
      actual: 'another weight',
    });
  }
  const quantizedHead = head ?? (config.tieWordEmbeddings ? embedding : undefined);
  for (const [name, w, kernel] of [
    ['quantized.embedding', embedding, quantizedEmbedding.name],
    ['quantized.head', quantizedHead, quantizedMatmul.name],
  ] as const) {
    if (!w) continue;
    if (w.n !== config.vocabSize || w.k !== config.hiddenSize) {
      throw new ShapeError(`${name} does not fit the config`, {
        operation: 'LlamaModel',
        argument: name,
        expected: `[${config.vocabSize}, ${config.hiddenSize}] (vocab_size, hidden_size)`,
        actual: `[${w.n}, ${w.k}]`,
      });
    }
    if (!backend.supports(kernel)) {
      throw new UnsupportedOnBackendError(`the ${backend.name} backend has no ${kernel}`, {
        kernel,
        argument: name,
        expected: `a backend that implements ${kernel}`,
        actual: backend.name,
      });
    }
  }
  return { quantizedLayers: layers, quantizedEmbedding: embedding, quantizedHead };
}

/** Frees the weights (dense and quantized), the caches and the step inputs. */
export function disposeLlamaDecoder(d: LlamaDecoder): void {
  for (const t of llamaWeightTensors(d.weights)) t.dispose();
  for (const layer of d.quantizedLayers ?? []) disposeQuantizedLayer(layer);
  d.quantizedEmbedding?.dispose();
  if (d.quantizedHead !== d.quantizedEmbedding) d.quantizedHead?.dispose();
  for (const c of d.caches) {
    c.k.dispose();
    c.v.dispose();
  }
  d.tokenInput.dispose();
  d.positionInput.dispose();
  d.lengthInput.dispose();
  d.frequencies?.dispose();
  for (const ids of d.dequantizeRows.values()) ids.dispose();
}
