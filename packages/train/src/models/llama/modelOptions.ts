import {
  InvalidArgumentError,
  QUANT_ACTIVATIONS,
  type QuantActivations,
  type QuantizedWeight,
} from '@rayo/core';
import type { SamplingOptions } from '../sampling.js';
import type { LlamaCheckpointOptions } from './checkpoint.js';
import type { LoadProgressCallback } from './loadProgress.js';
import type {
  LlamaQuantizationReport,
  LlamaQuantizePath,
  LlamaWeightFormat,
  QuantizedLlamaLayer,
} from './quantizedLayers.js';
import type { LlamaWeightDType, LlamaWeightDTypeChoice } from './weights.js';

export interface LlamaModelOptions {
  /**
   * The dtype of the KV cache. Default: the weights' dtype where it is half
   * and the backend runs the cache kernels in it, else f32. A half cache
   * halves what the attention reads per token; queries, keys and values are
   * computed in f32 and rounded once as they are written.
   */
  readonly kvCacheDtype?: LlamaWeightDType;
  /**
   * How a prompt's matrix products (chunks of more than one token) are
   * computed where the weights are f32: `'f32'` (the default) exactly;
   * `'tf32'` on tensor cores with the operands rounded to tf32 (matmul's
   * precision 'tf32', sm_90 on cuda); `'bf16'` with both rounded to bf16
   * and summed in f32 (matmul's precision 'half'). Half weights always
   * multiply a prompt with the activations rounded to their dtype (f32
   * sums, on tensor cores); decoding (one token) is exact whatever this says.
   */
  readonly prefillPrecision?: LlamaPrefillPrecision;
  /** Rows of the KV cache: the longest context (prompt + generated tokens). Default: `max_position_embeddings`. */
  readonly maxSequence?: number;
  /**
   * Most prompt tokens one forward pass takes (default 2048): a longer prompt
   * is run chunk by chunk, each chunk attending over the cache that the
   * earlier ones wrote, so that prefill needs one chunk's activations beside
   * the KV cache whatever the prompt's length.
   */
  readonly prefillChunk?: number;
  /**
   * `generate` records one decode step into a batch once and replays it for
   * every token (default true): the step moves its own position and length
   * on the device, and the host writes the token where it picks it; false
   * runs every step eagerly.
   */
  readonly replay?: boolean;
  /**
   * Decode steps (one token) fold each RMSNorm into what follows it: the
   * attention projections and the head are `rmsNormMatmul`s, and the MLP up
   * to the down projection is one `gateUpSwiglu` (default: true where the
   * backend implements them in the weights' and the cache's dtypes). Prefill
   * keeps the unfused chain, whose products are GEMMs.
   */
  readonly fused?: boolean;
  /**
   * At load, each layer's q, k and v weights (and biases) become one `qkv`
   * weight, so a chunk or a token runs one product for the three (default
   * true; see `fuseQkvProjections` for the layers that stay apart). `false`
   * keeps them apart (three products, as weights made by hand run).
   */
  readonly fuseQkv?: boolean;
  /**
   * How quantized projections take their activations: `'int8'` (the
   * default) lets a backend quantize x to int8 blocks of 32 for the product,
   * as llama.cpp's quantized GEMVs do (on cuda, 1.4–1.6× faster 4-bit
   * decoding; y moves by at most half an int8 step of x per block); `'exact'`
   * multiplies the f32 activations (quantizedMatmul's `activations`).
   */
  readonly quantizedActivations?: QuantActivations;
  /**
   * Every layer's projections quantized (from `quantizeLlamaLayers`, or a
   * GGUF file's quantized tensors), used in place of the dense ones in
   * `weights` (which may then be absent) for decode steps and prefill
   * alike; the model owns them from here. Quantized layers take the unfused
   * chain (the fused decode kernels read dense weights); a dense head keeps
   * its fused norm. `embedding` and `head` (a GGUF file's quantized
   * `token_embd` and `output`, [vocab, hidden]) replace the dense ones:
   * the embedding is looked up with `quantizedEmbedding` (only the rows read
   * are dequantized, on the device), the logits come from `quantizedMatmul`.
   * A tied head is the quantized embedding itself.
   */
  readonly quantized?: {
    /** Every layer's projections (absent: the dense ones in `weights`). */
    readonly layers?: readonly QuantizedLlamaLayer[];
    readonly embedding?: QuantizedWeight;
    readonly head?: QuantizedWeight;
    /** What quantizing cost; absent for weights a checkpoint stores quantized (nothing was quantized on load). */
    readonly report?: LlamaQuantizationReport;
  };
}

export interface LlamaLoadOptions extends LlamaModelOptions, LlamaCheckpointOptions {
  /**
   * The dtype of the matrix weights and the embedding on the device (norm
   * weights are f32): `'checkpoint'` (the default) keeps the dtype the
   * checkpoint stores, so a bf16 checkpoint stays bf16; `'f32'` widens a half
   * checkpoint (exactly); `'f16'` or `'bf16'` rounds an f32 checkpoint once to
   * nearest even (and converts between the half formats through f32).
   */
  readonly weightDtype?: LlamaWeightDTypeChoice;
  /**
   * Quantizes the projection weights (q, k, v, o, gate, up, down) on load:
   * `'q8'` int8 per output row, `'q4g32'` or `'q4g128'` 4 bits with a scale
   * per 32 or 128 weights. The embedding, the norms and the head stay in
   * `weightDtype`. Absent: the projections stay dense.
   */
  readonly weightFormat?: LlamaWeightFormat;
  /**
   * Where `weightFormat` is applied: `'device'` (the default where the
   * backend implements `quantizeRows`, but for the cpu backend) quantizes
   * each dense tensor where it was uploaded, bit for bit as `'host'`, which
   * reads it back and quantizes it on the host and reports the error.
   */
  readonly quantizeOn?: LlamaQuantizePath;
  /**
   * Quantizes the LM head in `weightFormat` too (an untied head only: a tied
   * head is the embedding, which stays dense). The quantization report then
   * covers the head with the projections.
   */
  readonly quantizeHead?: boolean;
  /** Called after each tensor is uploaded, with the tensors and stored bytes done and in all. */
  readonly onProgress?: LoadProgressCallback;
}

export const LLAMA_PREFILL_PRECISIONS = ['f32', 'tf32', 'bf16'] as const;
export type LlamaPrefillPrecision = (typeof LLAMA_PREFILL_PRECISIONS)[number];

/** Checks `prefillPrecision` and returns it. */
export function checkPrefillPrecision(value: unknown): LlamaPrefillPrecision {
  return checkChoice('prefillPrecision', value, LLAMA_PREFILL_PRECISIONS, 'name a product precision');
}

/** Checks `quantizedActivations` and returns it. */
export function checkQuantizedActivations(value: unknown): QuantActivations {
  return checkChoice('quantizedActivations', value, QUANT_ACTIVATIONS, 'name how quantized products take x');
}

/** An option that must be one of `choices`: an InvalidArgumentError naming them otherwise. */
function checkChoice<T extends string>(
  option: string,
  value: unknown,
  choices: readonly T[],
  what: string,
): T {
  if (!(choices as readonly unknown[]).includes(value)) {
    throw new InvalidArgumentError(`${option} must ${what}`, {
      operation: 'LlamaModel',
      argument: option,
      expected: choices.map((c) => `'${c}'`).join(' | '),
      actual: String(value),
    });
  }
  return value as T;
}

const FLOAT_DTYPES: readonly string[] = ['f32', 'f16', 'bf16'];

/** Checks a dtype option: a float dtype, or one of `extra`. */
export function checkDtypeOption(option: string, value: unknown, extra: readonly string[] = []): void {
  if (![...FLOAT_DTYPES, ...extra].includes(value as string)) {
    throw new InvalidArgumentError(`${option} must be a float dtype`, {
      operation: 'LlamaModel',
      argument: option,
      expected: [...FLOAT_DTYPES, ...extra].map((d) => `'${d}'`).join(' | '),
      actual: String(value),
    });
  }
}

export interface GenerateOptions extends SamplingOptions {
  /** Most tokens to generate (the stop token, when one comes, is not yielded). */
  readonly maxNewTokens: number;
  /** Seed of the sampler (default 0); the same seed gives the same tokens. */
  readonly seed?: number;
  /** Token ids that end generation. */
  readonly stop?: readonly number[];
}
