import { InvalidArgumentError, llama3Smoothing, type Shape, sizeOf } from '@rayo/core';
import type { LlamaConfig } from '../models/llama/config.js';
import type { GgmlType } from './ggmlTypes.js';
import { ggufLlamaMetadata } from './llamaConfig.js';
import { ggufNameOfHf, ROPE_FREQS, ropeHeadsOf } from './llamaNames.js';
import type { GgufValue } from './metadata.js';
import { hfRowsToGguf } from './ropePermutation.js';
import type { GgufContents, GgufTensorToWrite } from './writer.js';

/** A weight by its Hugging Face name, as f32 values. */
export interface HfWeight {
  readonly shape: Shape;
  readonly data: Float32Array;
}

export interface LlamaToGgufOptions {
  /** The ggml type of each weight, by Hugging Face name (default F32; norms should stay F32). */
  readonly typeOf?: (hfName: string, shape: Shape) => GgmlType;
  /** More metadata (a tokenizer, a name) after the architecture's keys. */
  readonly metadata?: Iterable<readonly [string, GgufValue]>;
  readonly version?: 2 | 3;
}

/**
 * llama.cpp's RoPE factors of a scaled config (`rope_freqs.weight`): for
 * llama3 scaling, per pair 1 where the wavelength is short, `factor` where it
 * is long and 1 / ((1 − smooth) / factor + smooth) between, as
 * `convert_hf_to_gguf.py` computes them; undefined for other scalings.
 */
export function ropeFactorsOf(config: LlamaConfig): Float32Array | undefined {
  const scaling = config.ropeScaling;
  if (scaling?.type === 'frequencyFactors') return Float32Array.from(scaling.factors);
  if (scaling?.type !== 'llama3') return undefined;
  const d = config.headDim;
  return Float32Array.from({ length: d / 2 }, (_, i) => {
    const smooth = llama3Smoothing(scaling, 2 * Math.PI * config.ropeTheta ** ((2 * i) / d));
    // `factor` itself where the frequency is divided by it: 1 / (1 / factor) could round.
    return smooth === 0 ? scaling.factor : 1 / ((1 - smooth) / scaling.factor + smooth);
  });
}

/**
 * The GGUF contents of a decoder from Hugging Face weights, as
 * `convert_hf_to_gguf.py` lays them out: llama.cpp's names, the family's
 * architecture (`llama` for Llama and Mistral, `qwen2`, `qwen3`) and keys,
 * for `llama` the rows of Q and K (and their biases) permuted into
 * llama.cpp's RoPE layout, llama3 RoPE factors as `rope_freqs.weight`, and
 * no `output.weight` when the head is tied. Tensors are converted or
 * quantized as the writer takes them.
 */
export function llamaToGguf(
  config: LlamaConfig,
  weights: ReadonlyMap<string, HfWeight>,
  options: LlamaToGgufOptions = {},
): GgufContents {
  const tensors: GgufTensorToWrite[] = [];
  for (const [hfName, { shape, data }] of weights) {
    const name = ggufNameOfHf(hfName);
    if (name === undefined || sizeOf(shape) !== data.length) {
      throw new InvalidArgumentError(`'${hfName}' is not a Llama weight of its shape`, {
        operation: 'llamaToGguf',
        argument: hfName,
        expected: `a Hugging Face decoder weight name with ${sizeOf(shape)} values`,
        actual: `${name === undefined ? 'an unknown name' : 'a known name'} with ${data.length} values`,
      });
    }
    const heads = ropeHeadsOf(config, hfName);
    const values =
      heads === undefined
        ? data
        : new Float32Array(
            hfRowsToGguf(
              new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
              heads,
              shape[0]!,
              hfName,
            ).buffer,
          );
    tensors.push({ name, type: options.typeOf?.(hfName, shape) ?? 'F32', shape, values });
  }
  const factors = ropeFactorsOf(config);
  if (factors) tensors.push({ name: ROPE_FREQS, type: 'F32', shape: [factors.length], values: factors });
  return {
    version: options.version,
    metadata: [...ggufLlamaMetadata(config), ...(options.metadata ?? [])],
    tensors,
  };
}
