import { InvalidArgumentError, type Shape, sizeOf } from '@rayo/core';
import type { LlamaConfig } from '../models/llama/config.js';
import type { GgmlType } from './ggmlTypes.js';
import { ggufLlamaMetadata } from './llamaConfig.js';
import { ggufNameOfHf, ropeHeadsOf } from './llamaNames.js';
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
 * The GGUF contents of a Llama decoder from Hugging Face weights, as
 * `convert_hf_to_gguf.py` lays them out: llama.cpp's names, the `llama.*`
 * keys, the rows of Q and K permuted into llama.cpp's RoPE layout, and no
 * `output.weight` when the head is tied. Tensors are converted or quantized
 * as the writer takes them.
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
        kernel: 'llamaToGguf',
        argument: hfName,
        expected: `a Hugging Face Llama weight name with ${sizeOf(shape)} values`,
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
  return {
    version: options.version,
    metadata: [...ggufLlamaMetadata(config), ...(options.metadata ?? [])],
    tensors,
  };
}
