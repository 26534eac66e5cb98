import {
  type Backend,
  DTypeError,
  formatShape,
  InvalidArgumentError,
  type Shape,
  ShapeError,
  shapesEqual,
  type Tensor,
} from '@rayo/core';
import type { FloatDType } from '../../checkpoint/floatWords.js';
import { FLOAT_READABLE, readableAsFloat, type SafetensorsFile } from '../../checkpoint/safetensorsFile.js';
import type { LlamaConfig } from './config.js';
import { type LoadProgressCallback, LoadProgressCounter } from './loadProgress.js';
import { checkWeightsFitBackend } from './weightLimits.js';

/**
 * The dtype of a model's matrix weights (the projections, the head) and its
 * embedding table. Norm weights are always f32: the kernels take them with
 * the activations, which are f32.
 */
export type LlamaWeightDType = FloatDType;

/** How a loader picks the weight dtype: one given, or `'checkpoint'`, the dtype the checkpoint stores. */
export type LlamaWeightDTypeChoice = LlamaWeightDType | 'checkpoint';

export interface LlamaLayerWeights {
  readonly inputNorm: Tensor;
  /**
   * Projections in the layout of a linear layer, [out, in]. A model given
   * quantized layers (`LlamaModelOptions.quantized`) reads those instead, and
   * these may be absent (a checkpoint that stores them quantized only).
   */
  readonly q?: Tensor;
  readonly k?: Tensor;
  readonly v?: Tensor;
  readonly o?: Tensor;
  readonly postAttentionNorm: Tensor;
  readonly gate?: Tensor;
  readonly up?: Tensor;
  readonly down?: Tensor;
  /** The q, k and v biases (f32 [out]) of a config with `qkvBias` (Qwen2; Llama, Qwen3 with `attention_bias`). */
  readonly qBias?: Tensor;
  readonly kBias?: Tensor;
  readonly vBias?: Tensor;
  /** The output projection's bias (f32 [hidden]) of a config with `outputBias`. */
  readonly oBias?: Tensor;
  /** RMSNorm weights (f32 [headDim]) of every query and key head, of a config with `qkNorm` (Qwen3). */
  readonly qNorm?: Tensor;
  readonly kNorm?: Tensor;
  /**
   * q, k and v fused in place of the three: their rows one after the other,
   * [(heads + 2·kvHeads)·headDim, hidden] (see `fuseQkvProjections`; a
   * loaded model fuses them where it can). With it, q, k, v and their
   * biases are absent, the biases fused as `qkvBias` (f32).
   */
  readonly qkv?: Tensor;
  /** The q, k and v biases fused, [(heads + 2·kvHeads)·headDim]: with `qkv`, or with q, k and v fused quantized. */
  readonly qkvBias?: Tensor;
}

/** The layer tensors a checkpoint names: all but the fused ones a model makes. */
export type CheckpointLayerTensor = Exclude<keyof LlamaLayerWeights, 'qkv' | 'qkvBias'>;

/** The projections of a layer, the weights a quantized layer replaces. */
export const LLAMA_PROJECTIONS = [
  'q',
  'k',
  'v',
  'o',
  'gate',
  'up',
  'down',
] as const satisfies readonly CheckpointLayerTensor[];

export interface LlamaWeights {
  /** The token table [vocab, hidden]; absent where the model is given it quantized. */
  readonly embedding: Tensor | undefined;
  readonly layers: readonly LlamaLayerWeights[];
  readonly norm: Tensor;
  /**
   * The output projection [vocab, hidden]: the embedding itself when the
   * config ties them; absent where the model is given it quantized.
   */
  readonly head: Tensor | undefined;
}

const KERNEL = 'loadLlama';

/** Buffers of older checkpoints that the decoder recomputes from `rope_theta`. */
const DERIVED = /^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$/;

/** Each layer tensor's Hugging Face name after `model.layers.N.`. */
export const LAYER_TENSORS = {
  inputNorm: 'input_layernorm.weight',
  q: 'self_attn.q_proj.weight',
  k: 'self_attn.k_proj.weight',
  v: 'self_attn.v_proj.weight',
  o: 'self_attn.o_proj.weight',
  postAttentionNorm: 'post_attention_layernorm.weight',
  gate: 'mlp.gate_proj.weight',
  up: 'mlp.up_proj.weight',
  down: 'mlp.down_proj.weight',
  qBias: 'self_attn.q_proj.bias',
  kBias: 'self_attn.k_proj.bias',
  vBias: 'self_attn.v_proj.bias',
  oBias: 'self_attn.o_proj.bias',
  qNorm: 'self_attn.q_norm.weight',
  kNorm: 'self_attn.k_norm.weight',
} as const satisfies Record<CheckpointLayerTensor, string>;

/** The tensors of a layer of `c`, with their shapes: the Llama block's, and the family's biases and norms. */
export function layerShapes(c: LlamaConfig): Partial<Record<CheckpointLayerTensor, Shape>> {
  const d = c.hiddenSize;
  const qWidth = c.numAttentionHeads * c.headDim;
  const kvWidth = c.numKeyValueHeads * c.headDim;
  const f = c.intermediateSize;
  return {
    inputNorm: [d],
    q: [qWidth, d],
    k: [kvWidth, d],
    v: [kvWidth, d],
    o: [d, qWidth],
    postAttentionNorm: [d],
    gate: [f, d],
    up: [f, d],
    down: [d, f],
    ...(c.qkvBias ? { qBias: [qWidth], kBias: [kvWidth], vBias: [kvWidth] } : {}),
    ...(c.outputBias ? { oBias: [d] } : {}),
    ...(c.qkNorm ? { qNorm: [c.headDim], kNorm: [c.headDim] } : {}),
  };
}

/** Every tensor a checkpoint of `config` must hold, by its Hugging Face name, with its shape. */
export function llamaWeightShapes(config: LlamaConfig): Map<string, Shape> {
  const shapes = new Map<string, Shape>([
    ['model.embed_tokens.weight', [config.vocabSize, config.hiddenSize]],
  ]);
  const perLayer = Object.entries(layerShapes(config)) as [CheckpointLayerTensor, Shape][];
  for (let i = 0; i < config.numHiddenLayers; i++) {
    for (const [key, shape] of perLayer) shapes.set(`model.layers.${i}.${LAYER_TENSORS[key]}`, shape);
  }
  shapes.set('model.norm.weight', [config.hiddenSize]);
  if (!config.tieWordEmbeddings) shapes.set('lm_head.weight', [config.vocabSize, config.hiddenSize]);
  return shapes;
}

/**
 * Checks names, shapes and dtypes of every tensor before any data is read:
 * a missing, misshapen, unreadable or unexpected tensor is a RayoError naming
 * it (with the expected and the actual shape or dtype).
 */
export function checkLlamaTensors(config: LlamaConfig, files: ReadonlyMap<string, SafetensorsFile>): void {
  const expected = llamaWeightShapes(config);
  for (const [name, shape] of expected) {
    const entry = files.get(name)?.entries.get(name);
    if (!entry) {
      throw new InvalidArgumentError(`weight '${name}' is missing from the checkpoint`, {
        operation: KERNEL,
        argument: name,
        expected: `a tensor of shape ${formatShape(shape)}`,
        actual: 'absent',
      });
    }
    if (!shapesEqual(entry.shape, shape)) {
      throw new ShapeError(`weight '${name}' has the wrong shape`, {
        operation: KERNEL,
        argument: name,
        expected: formatShape(shape),
        actual: formatShape(entry.shape),
      });
    }
    if (!readableAsFloat(entry)) {
      throw new DTypeError(`weight '${name}' has a dtype the loader does not read`, {
        operation: KERNEL,
        argument: name,
        expected: FLOAT_READABLE,
        actual: entry.format,
      });
    }
  }
  const unexpected = [...files.keys()].filter((name) => !expected.has(name) && !DERIVED.test(name));
  if (unexpected.length > 0) {
    const tied = config.tieWordEmbeddings && unexpected.includes('lm_head.weight');
    throw new InvalidArgumentError(
      tied
        ? "the checkpoint has 'lm_head.weight' but the config ties the head to the embedding"
        : 'the checkpoint has tensors a Llama decoder does not use',
      {
        operation: KERNEL,
        argument: unexpected[0]!,
        expected: tied ? 'no lm_head.weight (tie_word_embeddings is true)' : 'only Llama weight names',
        actual:
          unexpected.slice(0, 5).join(', ') + (unexpected.length > 5 ? `, … (${unexpected.length})` : ''),
      },
    );
  }
}

/** Whether the tensor `name` is a norm weight or a bias (a vector, kept f32) rather than a matrix or the embedding. */
export function isVectorWeight(name: string): boolean {
  return name.endsWith('norm.weight') || name.endsWith('.bias');
}

/**
 * The dtype the checkpoint stores its matrix weights and embedding in (norm
 * weights may differ: they are read as f32 whatever they are stored in).
 * Matrices of different dtypes are a DTypeError asking for an explicit
 * `weightDtype`. Call after `checkLlamaTensors`.
 */
export function checkpointWeightDtype(
  config: LlamaConfig,
  files: ReadonlyMap<string, SafetensorsFile>,
): LlamaWeightDType {
  let first: { name: string; dtype: LlamaWeightDType } | undefined;
  for (const name of llamaWeightShapes(config).keys()) {
    if (isVectorWeight(name)) continue;
    const dtype = files.get(name)!.entries.get(name)!.dtype as LlamaWeightDType;
    first ??= { name, dtype };
    if (dtype !== first.dtype) {
      throw new DTypeError(`weight '${name}' is stored in another dtype than '${first.name}'`, {
        operation: KERNEL,
        argument: 'weightDtype',
        expected: `one dtype for every matrix and the embedding, or an explicit weightDtype ('f32', 'f16' or 'bf16')`,
        actual: `${first.dtype} and ${dtype}`,
      });
    }
  }
  return first!.dtype;
}

/**
 * Uploads the weights tensor by tensor: each is read from its file at its
 * offset, uploaded, and its host copy dropped before the next is read.
 * `files` maps each tensor name to the file that holds it. Matrices and the
 * embedding are uploaded in `weightDtype` (default: the checkpoint's; words
 * of that dtype go up as stored, other float formats are converted once on
 * the host, rounding to nearest even), norm weights and biases in f32.
 * `onProgress` hears of each upload (see `LoadProgress`).
 */
export async function uploadLlamaWeights(
  backend: Backend,
  config: LlamaConfig,
  files: ReadonlyMap<string, SafetensorsFile>,
  weightDtype: LlamaWeightDTypeChoice = 'checkpoint',
  onProgress?: LoadProgressCallback,
  afterLayer?: (layer: LlamaLayerWeights) => Promise<void>,
): Promise<LlamaWeights> {
  checkLlamaTensors(config, files);
  const dtype = weightDtype === 'checkpoint' ? checkpointWeightDtype(config, files) : weightDtype;
  checkWeightsFitBackend(backend, llamaWeightShapes(config), (name) =>
    isVectorWeight(name) ? 'f32' : dtype,
  );
  const storedBytes = (name: string) => {
    const entry = files.get(name)!.entries.get(name)!;
    return entry.end - entry.begin;
  };
  const progress = new LoadProgressCounter(
    onProgress,
    [...llamaWeightShapes(config).keys()].map(storedBytes),
  );
  const uploaded: Tensor[] = [];
  const load = async (name: string, shape: Shape): Promise<Tensor> => {
    const as = isVectorWeight(name) ? 'f32' : dtype;
    const tensor = backend.upload(await files.get(name)!.readAs(name, as), shape, as);
    uploaded.push(tensor);
    progress.uploaded(storedBytes(name));
    return tensor;
  };
  try {
    const shapes = llamaWeightShapes(config);
    const layerKeys = Object.keys(layerShapes(config)) as CheckpointLayerTensor[];
    const embedding = await load('model.embed_tokens.weight', shapes.get('model.embed_tokens.weight')!);
    const layers: LlamaLayerWeights[] = [];
    for (let i = 0; i < config.numHiddenLayers; i++) {
      const layer: Partial<Record<keyof LlamaLayerWeights, Tensor>> = {};
      for (const key of layerKeys) {
        const name = `model.layers.${i}.${LAYER_TENSORS[key]}`;
        layer[key] = await load(name, shapes.get(name)!);
      }
      layers.push(layer as LlamaLayerWeights);
      // Quantizing on load: the layer's dense projections are freed before the next layer is read.
      await afterLayer?.(layer as LlamaLayerWeights);
    }
    const norm = await load('model.norm.weight', shapes.get('model.norm.weight')!);
    const head = config.tieWordEmbeddings
      ? embedding
      : await load('lm_head.weight', shapes.get('lm_head.weight')!);
    return { embedding, layers, norm, head };
  } catch (error) {
    for (const t of uploaded) t.dispose();
    throw error;
  }
}

/** The tensors of `weights` by Hugging Face name (a tied head only as the embedding). */
function namedLlamaWeights(config: LlamaConfig, weights: LlamaWeights): Map<string, Tensor | undefined> {
  const named = new Map<string, Tensor | undefined>([['model.embed_tokens.weight', weights.embedding]]);
  const layerKeys = Object.keys(layerShapes(config)) as CheckpointLayerTensor[];
  weights.layers.forEach((layer, i) => {
    for (const key of layerKeys) named.set(`model.layers.${i}.${LAYER_TENSORS[key]}`, layer[key]);
  });
  named.set('model.norm.weight', weights.norm);
  if (!config.tieWordEmbeddings) named.set('lm_head.weight', weights.head);
  return named;
}

/**
 * Checks weights given to a model against its config: every tensor present
 * and of its shape, the matrices and the embedding of one float dtype, the
 * norm weights f32. Returns the matrices' dtype.
 */
export function checkLlamaWeights(
  config: LlamaConfig,
  weights: LlamaWeights,
  options: {
    readonly quantizedProjections?: boolean;
    readonly quantizedEmbedding?: boolean;
    readonly quantizedHead?: boolean;
  } = {},
): LlamaWeightDType {
  if (weights.layers.length !== config.numHiddenLayers) {
    throw new InvalidArgumentError('one set of weights per layer is needed', {
      operation: 'LlamaModel',
      argument: 'weights.layers',
      expected: `${config.numHiddenLayers} layers (num_hidden_layers)`,
      actual: `${weights.layers.length}`,
    });
  }
  if (config.tieWordEmbeddings && weights.head !== weights.embedding) {
    throw new InvalidArgumentError('a tied head must be the embedding itself', {
      operation: 'LlamaModel',
      argument: 'weights.head',
      expected: 'weights.embedding (tie_word_embeddings is true)',
      actual: 'another tensor',
    });
  }
  const named = namedLlamaWeights(config, weights);
  // The matrices' dtype: the embedding's, or where it is quantized the first float matrix's (f32 where none is).
  const first = [...named].find(([name, t]) => t !== undefined && !isVectorWeight(name))?.[1];
  const embeddingDtype = first?.dtype;
  const dtype: LlamaWeightDType =
    embeddingDtype === 'f16' || embeddingDtype === 'bf16' ? embeddingDtype : 'f32';
  const expected = llamaWeightShapes(config);
  weights.layers.forEach((layer, i) => {
    // A fused bias alone: q, k and v are fused quantized.
    if (!layer.qkv && !layer.qkvBias) return;
    // Fused: q, k, v (and their biases) are absent, and the fused tensors stand checked in their place.
    const prefix = `model.layers.${i}.`;
    const parts = (['q', 'k', 'v'] as const).map((p) => expected.get(prefix + LAYER_TENSORS[p])!);
    const rows = parts.reduce((n, shape) => n + shape[0]!, 0);
    for (const p of FUSED_INTO_QKV) {
      expected.delete(prefix + LAYER_TENSORS[p]);
      if (layer[p] === undefined) continue;
      throw new InvalidArgumentError(`layer ${i} has q, k and v fused and '${p}' apart`, {
        operation: 'LlamaModel',
        argument: `weights.layers[${i}].${p}`,
        expected: 'absent (weights.layers[].qkv holds it)',
        actual: layer[p].describe(),
      });
    }
    if (layer.qkv || !options.quantizedProjections) {
      named.set(`${prefix}qkv`, layer.qkv);
      expected.set(`${prefix}qkv`, [rows, config.hiddenSize]);
    }
    if (config.qkvBias) {
      named.set(`${prefix}qkv.bias`, layer.qkvBias);
      expected.set(`${prefix}qkv.bias`, [rows]);
    }
  });
  for (const [name, shape] of expected) {
    const tensor = named.get(name);
    // Quantized layers, embedding and head replace the dense ones (checked where they are made); absent ones are fine.
    if (options.quantizedProjections && tensor === undefined && isProjection(name)) continue;
    if (options.quantizedEmbedding && tensor === undefined && name === 'model.embed_tokens.weight') continue;
    if (options.quantizedHead && tensor === undefined && name === 'lm_head.weight') continue;
    const want = isVectorWeight(name) ? 'f32' : dtype;
    if (tensor?.dtype !== want || !shapesEqual(tensor.shape, shape)) {
      const shapeFits = tensor !== undefined && shapesEqual(tensor.shape, shape);
      const why = isVectorWeight(name) ? ' (norm weights and biases are f32)' : " (the embedding's dtype)";
      throw new (shapeFits ? DTypeError : ShapeError)(`weight '${name}' does not fit the config`, {
        operation: 'LlamaModel',
        argument: name,
        expected: `${want}${formatShape(shape)}${shapeFits ? why : ''}`,
        actual: tensor ? `${tensor.dtype}${formatShape(tensor.shape)}` : 'absent',
      });
    }
  }
  return dtype;
}

/** The tensors `qkv` and `qkvBias` hold in a fused layer. */
const FUSED_INTO_QKV = ['q', 'k', 'v', 'qBias', 'kBias', 'vBias'] as const;

const PROJECTION_SUFFIXES = new Set(LLAMA_PROJECTIONS.map((key) => `.${LAYER_TENSORS[key]}`));

function isProjection(name: string): boolean {
  return [...PROJECTION_SUFFIXES].some((suffix) => name.endsWith(suffix));
}

/** Every distinct tensor of `weights` (the tied head once). */
export function llamaWeightTensors(weights: LlamaWeights): Tensor[] {
  const all = [
    weights.embedding,
    ...weights.layers.flatMap((l) => Object.values(l)),
    weights.norm,
    weights.head,
  ];
  return [...new Set(all)].filter((t): t is Tensor => t !== undefined);
}
