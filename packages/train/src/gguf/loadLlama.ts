import {
  type Backend,
  bytesPerElement,
  DTypeError,
  formatShape,
  InvalidArgumentError,
  isQuantFormat,
  QUANT_FORMATS,
  type QuantizedWeight,
  quantizedWeightOf,
  quantLayout,
  RayoError,
  ropeFrequencies,
  type Shape,
  ShapeError,
  shapesEqual,
  sizeOf,
  type Tensor,
} from '@rayo/core';
import type { FloatDType } from '../checkpoint/floatWords.js';
import { type OpenFile, openNodeFile } from '../checkpoint/randomAccessFile.js';
import { namingFile } from '../io/fileError.js';
import {
  checkLlamaBackend,
  defaultKvCacheDtype,
  fusedDecodeSupported,
} from '../models/llama/backendDtypes.js';
import { checkSlidingWindow, type LlamaConfig } from '../models/llama/config.js';
import { fuseQkvProjections, fuseQuantizedQkv } from '../models/llama/fusedQkv.js';
import { type LoadProgressCallback, LoadProgressCounter } from '../models/llama/loadProgress.js';
import { LlamaModel } from '../models/llama/model.js';
import type { LlamaModelOptions } from '../models/llama/modelOptions.js';
import type { QuantizedLlamaLayer } from '../models/llama/quantizedLayers.js';
import { checkWeightBytesFitBackend, type WeightBuffer } from '../models/llama/weightLimits.js';
import {
  type CheckpointLayerTensor,
  isVectorWeight,
  LAYER_TENSORS,
  LLAMA_PROJECTIONS,
  type LlamaWeightDTypeChoice,
  type LlamaWeights,
  layerShapes,
  llamaWeightShapes,
  llamaWeightTensors,
} from '../models/llama/weights.js';
import { isGgmlFloatType, isGgmlQuantizedType } from './ggmlTypes.js';
import { floatDTypeOf, floatElements, GgufFile, type GgufTensorInfo } from './ggufFile.js';
import { ggufLlamaConfig } from './llamaConfig.js';
import { ggufNameOfHf, hfNameOfGguf, ROPE_FREQS, ropeHeadsOf } from './llamaNames.js';
import { type PreparedWeights, uploadPrepared } from './preparedWeights.js';
import { CORE_FORMAT_OF, type GgufRepack, type RepackedWeight, refuseQuantized } from './repack.js';
import { ggufRowsToHf } from './ropePermutation.js';

export interface GgufLlamaOpenOptions {
  /** How the file is opened (default: a Node file handle); e.g. to count reads. */
  readonly openFile?: OpenFile;
  /** Largest single read of tensor data, in bytes (default 64 MiB). */
  readonly maxReadBytes?: number;
  /** Bytes read at a time while parsing the header (default 1 MiB). */
  readonly headerChunkBytes?: number;
  /** The file's header, read already (`GgufFile.open` of another handle): not parsed again. */
  readonly header?: GgufFile;
}

export interface GgufLlamaUploadOptions {
  /**
   * The dtype of the float (F32, F16, BF16) matrices and embedding on the
   * device: `'checkpoint'` (the default) keeps the file's, otherwise as
   * `LlamaModel.load`'s option. Norm weights are f32.
   */
  readonly weightDtype?: LlamaWeightDTypeChoice;
  /** What a quantized tensor becomes on the device (default: `refuseQuantized`). */
  readonly repack?: GgufRepack;
  /** Called after each tensor is uploaded (or repacked), with the tensors and stored bytes done and in all. */
  readonly onProgress?: LoadProgressCallback;
  /**
   * Quantized tensors kept in their device layout by an earlier load of the
   * same file (a model cache's): read and uploaded as they are, and those
   * not kept are repacked and written there. Quantized tensors then take
   * core's formats (as with `repackOntoCoreFormats`), whatever `repack` says.
   */
  readonly prepared?: PreparedWeights;
}

export interface GgufLlamaLoadOptions
  extends GgufLlamaOpenOptions,
    GgufLlamaUploadOptions,
    LlamaModelOptions {}

/** A weight of a GGUF model on the device: a float tensor, or a quantized one in a kernel's format. */
export type GgufLlamaWeight = Tensor | RepackedWeight;

/** The decoder's weights as `LlamaWeights` lays them out, each a float tensor or a repacked one. */
export interface GgufLlamaWeights {
  readonly embedding: GgufLlamaWeight;
  readonly layers: readonly { readonly [K in CheckpointLayerTensor]: GgufLlamaWeight }[];
  readonly norm: Tensor;
  readonly head: GgufLlamaWeight;
}

/** A GGUF Llama file, opened: its header read and checked against the decoder. */
export interface GgufLlama {
  readonly file: GgufFile;
  readonly config: LlamaConfig;
  close(): Promise<void>;
}

const KERNEL = 'loadGgufLlama';
const DTYPE_CHOICES: readonly string[] = ['checkpoint', 'f32', 'f16', 'bf16'];

/** The float weights' dtype a `weightDtype` option asks for (see `ggufWeightDtype`). */
function chosenDtype(
  choice: LlamaWeightDTypeChoice | undefined,
  config: LlamaConfig,
  tensors: ReadonlyMap<string, GgufTensorInfo>,
): FloatDType {
  if (choice !== undefined && !DTYPE_CHOICES.includes(choice)) {
    throw new InvalidArgumentError('weightDtype must be a float dtype or checkpoint', {
      operation: KERNEL,
      argument: 'weightDtype',
      expected: DTYPE_CHOICES.map((d) => `'${d}'`).join(' | '),
      actual: String(choice),
    });
  }
  return choice === undefined || choice === 'checkpoint' ? ggufWeightDtype(config, tensors) : choice;
}

function isTensor(weight: GgufLlamaWeight): weight is Tensor {
  return !('tensors' in weight);
}

function disposeWeight(weight: GgufLlamaWeight): void {
  if (isTensor(weight)) weight.dispose();
  else for (const t of Object.values(weight.tensors)) t.dispose();
}

/**
 * Checks every tensor of the file against the decoder, before any data is
 * read: each weight present under its llama.cpp name with the shape the
 * config gives, nothing else in the file, norm weights in a float type.
 */
export function checkGgufLlamaTensors(
  config: LlamaConfig,
  tensors: ReadonlyMap<string, GgufTensorInfo>,
): void {
  const expected = llamaWeightShapes(config);
  for (const [hfName, shape] of expected) {
    const name = ggufNameOfHf(hfName)!;
    const info = tensors.get(name);
    if (!info) {
      throw new InvalidArgumentError(`weight '${name}' is missing from the GGUF file`, {
        operation: KERNEL,
        argument: name,
        expected: `a tensor of shape ${formatShape(shape)} (dims ${formatShape([...shape].reverse())})`,
        actual: 'absent',
      });
    }
    if (!shapesEqual(info.shape, shape)) {
      throw new ShapeError(`weight '${name}' has the wrong shape`, {
        operation: KERNEL,
        argument: name,
        expected: `${formatShape(shape)} (dims ${formatShape([...shape].reverse())})`,
        actual: `${formatShape(info.shape)} (dims ${formatShape(info.dims)})`,
      });
    }
    if (isVectorWeight(hfName) && !isGgmlFloatType(info.type)) {
      throw new DTypeError(`norm or bias '${name}' is not a float tensor`, {
        operation: KERNEL,
        argument: name,
        expected: 'F32, F16 or BF16',
        actual: info.type,
      });
    }
  }
  for (const name of tensors.keys()) {
    const hfName = hfNameOfGguf(name);
    if (hfName !== undefined && expected.has(hfName)) continue;
    if (name === ROPE_FREQS && config.ropeScaling?.type === 'frequencyFactors') continue;
    throw new InvalidArgumentError('the file has a tensor the decoder does not use', {
      operation: KERNEL,
      argument: name,
      expected: `only the weights of this ${config.family} decoder (token_embd, blk.N.attn_*/ffn_*, output_norm, output${config.qkvBias ? ', attn_q/k/v biases' : ''}${config.qkNorm ? ', attn_q_norm/attn_k_norm' : ''}; rope_freqs)`,
      actual: name,
    });
  }
}

/**
 * The config with llama.cpp's llama3 RoPE factors (`rope_freqs.weight`,
 * F32 [headDim / 2]) as its scaling: frequency i divided by factor i.
 */
async function withRopeFactors(file: GgufFile, config: LlamaConfig): Promise<LlamaConfig> {
  const info = file.tensors.get(ROPE_FREQS);
  if (!info) return config;
  const half = config.headDim / 2;
  if (info.type !== 'F32' || !shapesEqual(info.shape, [half])) {
    throw new ShapeError('the RoPE factors do not fit the head dimension', {
      operation: KERNEL,
      argument: ROPE_FREQS,
      expected: `F32 [${half}] (headDim / 2)`,
      actual: `${info.type} ${formatShape(info.shape)}`,
    });
  }
  if (config.ropeScaling) {
    throw new InvalidArgumentError('the file scales RoPE twice', {
      operation: KERNEL,
      argument: ROPE_FREQS,
      expected: `no ${ROPE_FREQS} beside a rope.scaling.type`,
      actual: `${ROPE_FREQS} and a ${config.ropeScaling.type} scaling`,
    });
  }
  const factors = Array.from(await file.readFloat(ROPE_FREQS, 'f32'));
  const scaled = { ...config, ropeScaling: { type: 'frequencyFactors', factors } } as const;
  try {
    ropeFrequencies(scaled.ropeTheta, scaled.headDim, scaled.ropeScaling);
  } catch (error) {
    if (!(error instanceof RayoError)) throw error;
    throw new InvalidArgumentError('the RoPE factors are invalid', {
      operation: KERNEL,
      argument: ROPE_FREQS,
      expected: error.expected ?? 'factors >= 1',
      actual: `${error.argument}: ${error.actual}`,
    });
  }
  return scaled;
}

/**
 * The dtype the file stores its float matrices and embedding in (quantized
 * ones aside); f32 where every matrix is quantized. Float matrices of
 * different types are a DTypeError asking for an explicit `weightDtype`.
 */
export function ggufWeightDtype(
  config: LlamaConfig,
  tensors: ReadonlyMap<string, GgufTensorInfo>,
): FloatDType {
  let first: GgufTensorInfo | undefined;
  for (const hfName of llamaWeightShapes(config).keys()) {
    if (isVectorWeight(hfName)) continue;
    const info = tensors.get(ggufNameOfHf(hfName)!)!;
    if (!isGgmlFloatType(info.type)) continue;
    first ??= info;
    if (info.type !== first.type) {
      throw new DTypeError(`weight '${info.name}' is stored in another type than '${first.name}'`, {
        operation: KERNEL,
        argument: 'weightDtype',
        expected:
          "one float type for every float matrix and the embedding, or an explicit weightDtype ('f32', 'f16' or 'bf16')",
        actual: `${first.type} and ${info.type}`,
      });
    }
  }
  return first && isGgmlFloatType(first.type) ? floatDTypeOf(first.type) : 'f32';
}

/**
 * Opens a GGUF file of the `llama`, `qwen2` or `qwen3` architecture: reads
 * its header (and llama3 RoPE factors), maps its config, checks its tensors.
 */
export async function openGgufLlama(path: string, options: GgufLlamaOpenOptions = {}): Promise<GgufLlama> {
  const raw = await (options.openFile ?? openNodeFile)(path);
  try {
    const file = options.header ? options.header.reopened(raw) : await GgufFile.open(raw, options);
    const config = await withRopeFactors(file, ggufLlamaConfig(file.metadata, file.tensors));
    checkGgufLlamaTensors(config, file.tensors);
    return { file, config, close: () => raw.close() };
  } catch (error) {
    await raw.close();
    throw namingFile(error, path);
  }
}

/**
 * The largest device buffer of each weight, known before any is read: a
 * float one in the dtype it is uploaded in, a quantized one's codes in the
 * core format `repackOntoCoreFormats` gives its type (other repacks choose
 * their own layouts, unknown here).
 */
function* deviceBuffers(
  file: GgufFile,
  shapes: ReadonlyMap<string, Shape>,
  dtype: FloatDType,
): Generator<WeightBuffer> {
  for (const [hfName, shape] of shapes) {
    const name = ggufNameOfHf(hfName)!;
    const { type } = file.tensor(name);
    if (isGgmlFloatType(type)) {
      const as = isVectorWeight(hfName) ? 'f32' : dtype;
      const what = `${as}${formatShape(shape)}`;
      yield { name, bytes: sizeOf(shape) * bytesPerElement(as), what, hint: 'a smaller weightDtype may fit' };
    } else if (isGgmlQuantizedType(type) && shape.length === 2) {
      const format = CORE_FORMAT_OF[type];
      const [rows, cols] = shape as [number, number];
      const bytes = rows * quantLayout(format, cols).rowWords * 4;
      yield {
        name,
        bytes,
        what: `the u32 codes of ${type} as ${format}, [${rows}, ${quantLayout(format, cols).rowWords}]`,
      };
    }
  }
}

/**
 * Uploads the weights tensor by tensor: each is read at its offset, the rows
 * of Q and K moved back from llama.cpp's RoPE layout, then a float tensor is
 * uploaded as `LlamaModel.load` uploads a safetensors tensor, and a
 * quantized one is handed, as stored blocks, to `repack`. Nothing is
 * dequantized on the host. Call `checkGgufLlamaTensors` first (opening does).
 */
export async function uploadGgufLlamaWeights(
  backend: Backend,
  { file, config }: Pick<GgufLlama, 'file' | 'config'>,
  options: GgufLlamaUploadOptions = {},
): Promise<GgufLlamaWeights> {
  const dtype = chosenDtype(options.weightDtype, config, file.tensors);
  const repack = options.repack ?? refuseQuantized;
  const shapes = llamaWeightShapes(config);
  const storedBytes = (hfName: string) => file.tensor(ggufNameOfHf(hfName)!).byteLength;
  const progress = new LoadProgressCounter(options.onProgress, [...shapes.keys()].map(storedBytes));
  checkWeightBytesFitBackend(backend, deviceBuffers(file, shapes, dtype), 'loadGgufLlama');
  const named = new Map<string, GgufLlamaWeight>();
  const load = async (hfName: string, shape: Shape): Promise<GgufLlamaWeight> => {
    const name = ggufNameOfHf(hfName)!;
    const info = file.tensor(name);
    const blocks = async () => {
      const bytes = await file.readBytes(name);
      const heads = ropeHeadsOf(config, hfName);
      return heads === undefined ? bytes : ggufRowsToHf(bytes, heads, shape[0]!, name);
    };
    if (options.prepared && isGgmlQuantizedType(info.type) && shape.length === 2) {
      const tensor = { name, type: info.type, shape: shape as [number, number], blocks };
      return uploadPrepared(backend, options.prepared, tensor);
    }
    const bytes = await blocks();
    if (isGgmlFloatType(info.type)) {
      const as = isVectorWeight(hfName) ? 'f32' : dtype;
      return backend.upload(floatElements(info.type, bytes, as), shape, as);
    }
    return repack(backend, { name, weight: hfName, type: info.type, dims: info.dims, shape, bytes });
  };
  try {
    for (const [hfName, shape] of shapes) {
      named.set(hfName, await load(hfName, shape));
      progress.uploaded(storedBytes(hfName));
    }
    await options.prepared?.end(true);
  } catch (error) {
    for (const weight of named.values()) disposeWeight(weight);
    await options.prepared?.end(false).catch(() => {});
    throw error;
  }
  const get = (hfName: string) => named.get(hfName)!;
  const embedding = get('model.embed_tokens.weight');
  return {
    embedding,
    layers: Array.from({ length: config.numHiddenLayers }, (_, i) => {
      const entries = (Object.keys(layerShapes(config)) as CheckpointLayerTensor[]).map((key) => [
        key,
        get(`model.layers.${i}.${LAYER_TENSORS[key]}`),
      ]);
      return Object.fromEntries(entries) as { [K in CheckpointLayerTensor]: GgufLlamaWeight };
    }),
    norm: get('model.norm.weight') as Tensor,
    head: config.tieWordEmbeddings ? embedding : get('lm_head.weight'),
  };
}

/** Every distinct weight of `weights` (a tied head once). */
export function ggufLlamaWeightList(weights: GgufLlamaWeights): GgufLlamaWeight[] {
  return [
    ...new Set([
      weights.embedding,
      ...weights.layers.flatMap((l) => Object.values(l)),
      weights.norm,
      weights.head,
    ]),
  ];
}

/**
 * Loads a GGUF Llama file onto `backend` as a `LlamaModel`. Float tensors
 * load as from safetensors; quantized ones go through `repack`, whose
 * default refuses them by name. With `repackOntoCoreFormats` (or any repack
 * that returns core's quantized formats), every tensor loads by its own
 * type: quantized projections run on `quantizedMatmul` and float ones
 * (a mixed file's F16 fallbacks) on `matmul`; a quantized head too, and a
 * quantized embedding is looked up with `quantizedEmbedding` (a Q4_K_M
 * file quantizes both). Norms must be float. A backend that
 * cannot run the model's kernels in the weights' dtype is refused before
 * any weight is read.
 */
export async function loadGgufLlama(
  backend: Backend,
  path: string,
  options: GgufLlamaLoadOptions = {},
): Promise<LlamaModel> {
  const gguf = await openGgufLlama(path, options);
  try {
    checkSlidingWindow(gguf.config, options.maxSequence ?? gguf.config.maxPositionEmbeddings);
    const dtype = chosenDtype(options.weightDtype, gguf.config, gguf.file.tensors);
    const floatCache = options.kvCacheDtype ?? defaultKvCacheDtype(backend, dtype);
    checkLlamaBackend(
      backend,
      dtype,
      floatCache,
      options.fused ?? fusedDecodeSupported(backend, dtype, floatCache),
    );
    const weights = await uploadGgufLlamaWeights(backend, gguf, { ...options, weightDtype: dtype });
    let fused: LlamaWeights | undefined;
    try {
      // Every matrix held quantized (a Q4_K_M file repacked onto core's formats): no float weight
      // gives the cache a half dtype, so it takes f16, llama.cpp's default, where the backend runs it.
      const cacheDtype =
        options.kvCacheDtype ??
        (holdsNoFloatMatrix(weights) ? defaultKvCacheDtype(backend, 'f16') : floatCache);
      const { dense, quantized: split } = splitQuantizedProjections(weights);
      const fuse = options.fuseQkv !== false;
      const quantized =
        fuse && split?.layers
          ? { ...split, layers: await fuseQuantizedQkv(backend, gguf.config, split.layers, cacheDtype) }
          : split;
      fused = fuse ? fuseQkvProjections(backend, gguf.config, dense, cacheDtype, quantized?.layers) : dense;
      return new LlamaModel(backend, gguf.config, fused, {
        ...options,
        kvCacheDtype: cacheDtype,
        ...(quantized ? { quantized } : {}),
      });
    } catch (error) {
      for (const w of ggufLlamaWeightList(weights)) disposeWeight(w);
      for (const t of fused ? llamaWeightTensors(fused) : []) t.dispose();
      throw error;
    }
  } finally {
    await gguf.close();
  }
}

/** Whether every projection, the embedding and the head are held repacked (quantized), none as a float tensor. */
function holdsNoFloatMatrix(weights: GgufLlamaWeights): boolean {
  return (
    !isTensor(weights.embedding) &&
    !isTensor(weights.head) &&
    weights.layers.every((l) => LLAMA_PROJECTIONS.every((p) => l[p] === undefined || !isTensor(l[p]!)))
  );
}

/** A repacked weight in one of core's quantized formats, as `quantizedMatmul` takes it. */
function asQuantizedWeight(weight: RepackedWeight, name: string): QuantizedWeight {
  const { packed, scales, zeros, offsets } = weight.tensors as Partial<
    Record<'packed' | 'scales' | 'zeros' | 'offsets', Tensor>
  >;
  if (!isQuantFormat(weight.format) || !packed || !scales || weight.shape.length !== 2) {
    throw new DTypeError('a repacked weight must be in one of core’s quantized formats', {
      operation: KERNEL,
      argument: name,
      expected: `format ${QUANT_FORMATS.map((f) => `'${f}'`).join(' | ')} with tensors packed, scales (and zeros or offsets) of a [rows, cols] weight`,
      actual: `format '${weight.format}' with ${Object.keys(weight.tensors).join(', ') || 'no tensors'}`,
    });
  }
  return quantizedWeightOf(weight.format, weight.shape[0]!, weight.shape[1]!, {
    packed,
    scales,
    zeros,
    offsets,
  });
}

/**
 * The model's dense weights and, where the file stores them quantized, its
 * quantized parts: every projection by its own type (repacked into core's
 * formats, or float); the embedding and the head each quantized or float (a
 * tied head is the embedding); the norms float.
 */
function splitQuantizedProjections(weights: GgufLlamaWeights): {
  dense: LlamaWeights;
  quantized?: NonNullable<LlamaModelOptions['quantized']>;
} {
  const float = (w: GgufLlamaWeight, name: string): Tensor => {
    if (isTensor(w)) return w;
    throw new DTypeError('norm weights and biases must be float tensors', {
      operation: KERNEL,
      argument: name,
      expected: 'F32, F16 or BF16 in the file',
      actual: `a repacked weight of format '${w.format}'`,
    });
  };
  const tied = weights.head === weights.embedding;
  const quantizedEmbedding = isTensor(weights.embedding)
    ? undefined
    : asQuantizedWeight(weights.embedding, 'token_embd.weight');
  const quantizedHead = tied
    ? quantizedEmbedding
    : isTensor(weights.head)
      ? undefined
      : asQuantizedWeight(weights.head, 'output.weight');
  const ends = {
    ...(quantizedEmbedding ? { embedding: quantizedEmbedding } : {}),
    ...(quantizedHead ? { head: quantizedHead } : {}),
  };
  const embedding = isTensor(weights.embedding) ? weights.embedding : undefined;
  const head = isTensor(weights.head) ? weights.head : undefined;
  const repacked = weights.layers.some((l) => LLAMA_PROJECTIONS.some((p) => !isTensor(l[p]!)));
  const quantizedEnds = quantizedEmbedding || quantizedHead ? { quantized: ends } : {};
  if (!repacked) {
    return {
      dense: { embedding, head, norm: weights.norm, layers: weights.layers as LlamaWeights['layers'] },
      ...quantizedEnds,
    };
  }
  // Each projection as the file stores it: quantized where repacked, dense where a float tensor (a row
  // that does not divide into its type's blocks is stored F16).
  const isQuantizedProjection = (key: string, w: GgufLlamaWeight | undefined) =>
    (LLAMA_PROJECTIONS as readonly string[]).includes(key) && w !== undefined && !isTensor(w);
  const layers = weights.layers.map((layer, i) => {
    const entries = LLAMA_PROJECTIONS.filter((p) => isQuantizedProjection(p, layer[p])).map(
      (p) =>
        [p, asQuantizedWeight(layer[p] as RepackedWeight, `model.layers.${i}.${LAYER_TENSORS[p]}`)] as const,
    );
    return Object.fromEntries(entries) as QuantizedLlamaLayer;
  });
  // What stays dense: the norms, a family's biases and head norms, and float projections.
  const denseLayers = weights.layers.map((l, i) => {
    const kept = Object.entries(l).filter(([key, w]) => !isQuantizedProjection(key, w));
    return Object.fromEntries(
      kept.map(([key, w]) => [
        key,
        float(w!, ggufNameOfHf(`model.layers.${i}.${LAYER_TENSORS[key as CheckpointLayerTensor]}`)!),
      ]),
    ) as unknown as LlamaWeights['layers'][number];
  });
  return {
    dense: { embedding, head, norm: weights.norm, layers: denseLayers },
    quantized: { layers, ...ends },
  };
}
