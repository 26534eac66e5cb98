import {
  type Backend,
  DTypeError,
  f16BitsToF32,
  InvalidArgumentError,
  type Shape,
  type Tensor,
} from '@rayo/core';
import { q4kScaleMin } from './dequantize.js';
import { GGML_TYPES, type GgmlType } from './ggmlTypes.js';

/** One quantized tensor of a GGUF file, as a repack receives it. */
export interface GgufQuantizedTensor {
  /** Its name in the GGUF file, e.g. `blk.0.attn_q.weight`. */
  readonly name: string;
  /** The decoder's (Hugging Face) name of the weight, e.g. `model.layers.0.self_attn.q_proj.weight`. */
  readonly weight: string;
  readonly type: GgmlType;
  /** As stored, innermost first: `dims[0]` is the row length (the input features of a projection). */
  readonly dims: readonly number[];
  /** Outermost first: [out, in] for a projection, [vocab, hidden] for the embedding. */
  readonly shape: Shape;
  /**
   * The stored blocks, one row after another, in the decoder's row order:
   * the rows of Q and K already moved back from llama.cpp's RoPE layout.
   */
  readonly bytes: Uint8Array;
}

/** A weight on the device in a quantized kernel's format: its named parts (values, scales, …). */
export interface RepackedWeight {
  /** The kernel format, e.g. `q8` or `q4`. */
  readonly format: string;
  /** The logical shape, outermost first. */
  readonly shape: Shape;
  readonly tensors: Readonly<Record<string, Tensor>>;
}

/**
 * Turns the raw blocks of one quantized tensor into device tensors in the
 * format the quantized kernels read: the blocks uploaded as they are where
 * the layout suits the kernels, otherwise repacked once at load. Never
 * dequantized to f32 on the host.
 */
export type GgufRepack = (
  backend: Backend,
  tensor: GgufQuantizedTensor,
) => RepackedWeight | Tensor | Promise<RepackedWeight | Tensor>;

/** The repack used until the quantized kernels land: a DTypeError naming the tensor and its type. */
export const refuseQuantized: GgufRepack = (_backend, tensor) => {
  throw new DTypeError(
    `quantized GGUF tensors need the quantized kernels: '${tensor.name}' is ${tensor.type}`,
    {
      kernel: 'loadGgufLlama',
      argument: tensor.name,
      expected: "F32, F16 or BF16, or a 'repack' option that puts quantized blocks in a kernel's format",
      actual: tensor.type,
    },
  );
};

// ---- host repacks of whole blocks (pure functions over bytes; no device) ----------------------

function blocksOf(type: 'Q8_0' | 'Q4_0' | 'Q4_K' | 'Q6_K', bytes: Uint8Array): number {
  const { blockBytes } = GGML_TYPES[type];
  if (bytes.length % blockBytes !== 0) {
    throw new InvalidArgumentError(`${type} data is not a whole number of blocks`, {
      kernel: `repack${type}`,
      argument: 'bytes',
      expected: `a multiple of ${blockBytes} bytes`,
      actual: `${bytes.length}`,
    });
  }
  return bytes.length / blockBytes;
}

/** Symmetric int8 groups: element i is `values[i] · f16(scales[i / groupSize])`. */
export interface Int8Groups {
  readonly groupSize: number;
  readonly values: Int8Array;
  /** f16 words, one per group. */
  readonly scales: Uint16Array;
}

/** 4-bit groups with a zero point of 8: element i is `(q_i − 8) · f16(scales[i / groupSize])`. */
export interface Int4Groups {
  readonly groupSize: number;
  /** Element 2k in the low nibble of byte k, element 2k+1 in its high nibble. */
  readonly nibbles: Uint8Array;
  /** f16 words, one per group. */
  readonly scales: Uint16Array;
}

/** Q8_0 as int8 values and one f16 scale per 32: the block's d and q split apart, losslessly. */
export function repackQ8_0(bytes: Uint8Array): Int8Groups {
  const blocks = blocksOf('Q8_0', bytes);
  const values = new Int8Array(blocks * 32);
  const scales = new Uint16Array(blocks);
  for (let b = 0; b < blocks; b++) {
    const at = b * 34;
    scales[b] = bytes[at]! | (bytes[at + 1]! << 8);
    values.set(new Int8Array(bytes.buffer, bytes.byteOffset + at + 2, 32), b * 32);
  }
  return { groupSize: 32, values, scales };
}

/**
 * Q4_0 as sequential nibbles and one f16 scale per 32, losslessly: ggml
 * keeps element j and j+16 in one byte; here elements 2k and 2k+1 share
 * byte k, so that a kernel reads a group's values in order.
 */
export function repackQ4_0(bytes: Uint8Array): Int4Groups {
  const blocks = blocksOf('Q4_0', bytes);
  const nibbles = new Uint8Array(blocks * 16);
  const scales = new Uint16Array(blocks);
  const q = new Uint8Array(32);
  for (let b = 0; b < blocks; b++) {
    const at = b * 18;
    scales[b] = bytes[at]! | (bytes[at + 1]! << 8);
    for (let j = 0; j < 16; j++) {
      q[j] = bytes[at + 2 + j]! & 0xf;
      q[j + 16] = bytes[at + 2 + j]! >> 4;
    }
    for (let k = 0; k < 16; k++) nibbles[b * 16 + k] = q[2 * k]! | (q[2 * k + 1]! << 4);
  }
  return { groupSize: 32, nibbles, scales };
}

/**
 * Unsigned 4-bit groups with an offset: element i is
 * `q_i · scales[g] − offsets[g]` with g = i / groupSize, in f32 parameters.
 */
export interface Uint4OffsetGroups {
  readonly groupSize: number;
  /** Element 2k in the low nibble of byte k, element 2k+1 in its high nibble. */
  readonly nibbles: Uint8Array;
  readonly scales: Float32Array;
  readonly offsets: Float32Array;
}

/**
 * Q4_K as sequential nibbles with an f32 scale (d·sc) and offset (dmin·m)
 * per 32: the products ggml forms itself, so the values are the same bit
 * for bit. The f16 group scales of `Int4Groups` cannot hold them exactly
 * (and have no offset), so a symmetric 4-bit kernel would need a lossy
 * requantization instead.
 */
export function repackQ4_K(bytes: Uint8Array): Uint4OffsetGroups {
  const blocks = blocksOf('Q4_K', bytes);
  const nibbles = new Uint8Array(blocks * 128);
  const scales = new Float32Array(blocks * 8);
  const offsets = new Float32Array(blocks * 8);
  const q = new Uint8Array(256);
  for (let b = 0; b < blocks; b++) {
    const at = b * 144;
    const d = f16BitsToF32(bytes[at]! | (bytes[at + 1]! << 8));
    const dmin = f16BitsToF32(bytes[at + 2]! | (bytes[at + 3]! << 8));
    const packed = bytes.subarray(at + 4, at + 16);
    for (let j = 0; j < 8; j++) {
      const { scale, min } = q4kScaleMin(packed, j);
      scales[b * 8 + j] = d * scale;
      offsets[b * 8 + j] = dmin * min;
    }
    for (let j = 0; j < 4; j++) {
      for (let l = 0; l < 32; l++) {
        const byte = bytes[at + 16 + 32 * j + l]!;
        q[64 * j + l] = byte & 0xf;
        q[64 * j + 32 + l] = byte >> 4;
      }
    }
    for (let k = 0; k < 128; k++) nibbles[b * 128 + k] = q[2 * k]! | (q[2 * k + 1]! << 4);
  }
  return { groupSize: 32, nibbles, scales, offsets };
}

/** Symmetric int8 groups with f32 scales: element i is `values[i] · scales[i / groupSize]`. */
export interface Int8F32Groups {
  readonly groupSize: number;
  readonly values: Int8Array;
  readonly scales: Float32Array;
}

/**
 * Q6_K as int8 values (q − 32, in −32..31) with an f32 scale (d·scale) per
 * 16: ggml's own products, so the values are the same bit for bit.
 */
export function repackQ6_K(bytes: Uint8Array): Int8F32Groups {
  const blocks = blocksOf('Q6_K', bytes);
  const values = new Int8Array(blocks * 256);
  const scales = new Float32Array(blocks * 16);
  for (let b = 0; b < blocks; b++) {
    const at = b * 210;
    const d = f16BitsToF32(bytes[at + 208]! | (bytes[at + 209]! << 8));
    for (let g = 0; g < 16; g++) scales[b * 16 + g] = d * ((bytes[at + 192 + g]! << 24) >> 24);
    for (let h = 0; h < 2; h++) {
      for (let l = 0; l < 32; l++) {
        const ql0 = bytes[at + 64 * h + l]!;
        const ql1 = bytes[at + 64 * h + l + 32]!;
        const qh = bytes[at + 128 + 32 * h + l]!;
        const e = b * 256 + 128 * h + l;
        values[e] = ((ql0 & 0xf) | ((qh & 3) << 4)) - 32;
        values[e + 32] = ((ql1 & 0xf) | (((qh >> 2) & 3) << 4)) - 32;
        values[e + 64] = ((ql0 >> 4) | (((qh >> 4) & 3) << 4)) - 32;
        values[e + 96] = ((ql1 >> 4) | (((qh >> 6) & 3) << 4)) - 32;
      }
    }
  }
  return { groupSize: 16, values, scales };
}
