import {
  type Backend,
  DTypeError,
  type QuantizedHostWeight,
  quantLayout,
  type Shape,
  ShapeError,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import {
  blockHalf,
  q4_0Values,
  q4kScaleMin,
  q4kValues,
  q5kValues,
  q5Values,
  q6kValues,
} from './dequantize.js';
import {
  GGML_TYPES,
  type GgmlQuantizedType,
  type GgmlType,
  isGgmlQuantizedType,
  wholeBlocks,
} from './ggmlTypes.js';

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
      operation: 'loadGgufLlama',
      argument: tensor.name,
      expected: "F32, F16 or BF16, or a 'repack' option that puts quantized blocks in a kernel's format",
      actual: tensor.type,
    },
  );
};

// ---- host repacks of whole blocks (pure functions over bytes; no device) ----------------------

function blocksOf(type: GgmlQuantizedType, bytes: Uint8Array): number {
  return wholeBlocks(type, bytes.length, 'bytes', `repack${type}`);
}

/** `count` 4-bit values of `q` two to a byte, element 2k low, 2k+1 high, into `out` from byte `at`. */
function packNibbles(q: Uint8Array, count: number, out: Uint8Array, at: number): void {
  for (let k = 0; k < count / 2; k++) out[at + k] = q[2 * k]! | (q[2 * k + 1]! << 4);
}

const q = new Uint8Array(256);

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
  for (let b = 0; b < blocks; b++) {
    const block = bytes.subarray(b * 18, (b + 1) * 18);
    scales[b] = block[0]! | (block[1]! << 8);
    q4_0Values(block, q);
    packNibbles(q, 32, nibbles, b * 16);
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
  const { scales, offsets } = superBlockScales('Q4_K', bytes, blocks, (block, b) => {
    q4kValues(block, q);
    packNibbles(q, 256, nibbles, b * 128);
  });
  return { groupSize: 32, nibbles, scales, offsets };
}

/**
 * The f32 scale d·sc and offset dmin·m of every sub-block of 32 of Q4_K or
 * Q5_K blocks (the products ggml forms), with `each` given every block.
 */
function superBlockScales(
  type: 'Q4_K' | 'Q5_K',
  bytes: Uint8Array,
  blocks: number,
  each: (block: Uint8Array, b: number) => void,
): { scales: Float32Array; offsets: Float32Array } {
  const { blockBytes } = GGML_TYPES[type];
  const scales = new Float32Array(blocks * 8);
  const offsets = new Float32Array(blocks * 8);
  for (let b = 0; b < blocks; b++) {
    const block = bytes.subarray(b * blockBytes, (b + 1) * blockBytes);
    const d = blockHalf(block, 0);
    const dmin = blockHalf(block, 2);
    for (let j = 0; j < 8; j++) {
      const { scale, min } = q4kScaleMin(block.subarray(4, 16), j);
      scales[b * 8 + j] = d * scale;
      offsets[b * 8 + j] = dmin * min;
    }
    each(block, b);
  }
  return { scales, offsets };
}

/**
 * Q4_1 as sequential nibbles with the block's f16 d as the scale and −m as
 * the offset (f16 words, the sign bit flipped): f32(f32(q · d) − (−m)) is
 * ggml's d·q + m.
 */
export function repackQ4_1(bytes: Uint8Array): {
  nibbles: Uint8Array;
  scales: Uint16Array;
  offsets: Uint16Array;
} {
  const blocks = blocksOf('Q4_1', bytes);
  const nibbles = new Uint8Array(blocks * 16);
  const { scales, offsets } = halfScalesAndOffsets('Q4_1', bytes, blocks, (block, b) => {
    q4_0Values(block, q, 4);
    packNibbles(q, 32, nibbles, b * 16);
  });
  return { nibbles, scales, offsets };
}

/** The f16 d and −m of every block of a type with a min (Q4_1, Q5_1), with `each` given every block. */
function halfScalesAndOffsets(
  type: 'Q4_1' | 'Q5_1',
  bytes: Uint8Array,
  blocks: number,
  each: (block: Uint8Array, b: number) => void,
): { scales: Uint16Array; offsets: Uint16Array } {
  const { blockBytes } = GGML_TYPES[type];
  const scales = new Uint16Array(blocks);
  const offsets = new Uint16Array(blocks);
  for (let b = 0; b < blocks; b++) {
    const block = bytes.subarray(b * blockBytes, (b + 1) * blockBytes);
    scales[b] = block[0]! | (block[1]! << 8);
    offsets[b] = (block[2]! | (block[3]! << 8)) ^ 0x8000;
    each(block, b);
  }
  return { scales, offsets };
}

/** Q5_0 as int8 codes q − 16 (in −16..15) with the block's f16 d per 32: f32(code · d) is ggml's value. */
export function repackQ5_0(bytes: Uint8Array): Int8Groups {
  const blocks = blocksOf('Q5_0', bytes);
  const values = new Int8Array(blocks * 32);
  const scales = new Uint16Array(blocks);
  for (let b = 0; b < blocks; b++) {
    const block = bytes.subarray(b * 22, (b + 1) * 22);
    scales[b] = block[0]! | (block[1]! << 8);
    q5Values(block, q, 2);
    for (let j = 0; j < 32; j++) values[b * 32 + j] = q[j]! - 16;
  }
  return { groupSize: 32, values, scales };
}

/** Q5_1 as int8 codes q (0..31) with the block's f16 d as the scale and −m as the offset (as `repackQ4_1`). */
export function repackQ5_1(bytes: Uint8Array): {
  values: Int8Array;
  scales: Uint16Array;
  offsets: Uint16Array;
} {
  const blocks = blocksOf('Q5_1', bytes);
  const values = new Int8Array(blocks * 32);
  const { scales, offsets } = halfScalesAndOffsets('Q5_1', bytes, blocks, (block, b) => {
    q5Values(block, q, 4);
    values.set(q.subarray(0, 32), b * 32);
  });
  return { values, scales, offsets };
}

/** Q5_K as int8 codes q (0..31) with Q4_K's f32 scale d·sc and offset dmin·m per 32. */
export function repackQ5_K(bytes: Uint8Array): {
  values: Int8Array;
  scales: Float32Array;
  offsets: Float32Array;
} {
  const blocks = blocksOf('Q5_K', bytes);
  const values = new Int8Array(blocks * 256);
  const { scales, offsets } = superBlockScales('Q5_K', bytes, blocks, (block, b) => {
    q5kValues(block, q);
    values.set(q, b * 256);
  });
  return { values, scales, offsets };
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
    const block = bytes.subarray(b * 210, (b + 1) * 210);
    const d = blockHalf(block, 208);
    for (let g = 0; g < 16; g++) scales[b * 16 + g] = d * ((block[192 + g]! << 24) >> 24);
    q6kValues(block, q);
    for (let e = 0; e < 256; e++) values[b * 256 + e] = q[e]! - 32;
  }
  return { groupSize: 16, values, scales };
}

// ---- onto core's quantized formats ------------------------------------------------------------

/**
 * A Q4_0 tensor [rows, cols] as core's `q4g32` weight, exactly: both are
 * `(q − 8) · scale` with an f16 scale per 32 weights, and `repackQ4_0`'s
 * sequential nibbles read as little-endian u32 words are `q4g32`'s codes
 * (weight k at nibble k mod 8 of word k / 8). GGUF rows are whole blocks, so
 * no row is padded.
 */
export function q4_0AsQ4g32(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  const layout = quantLayout('q4g32', cols);
  if (cols % 32 !== 0 || bytes.byteLength !== rows * (cols / 32) * 18) {
    throw new ShapeError('Q4_0 blocks do not make whole rows of the shape', {
      operation: 'q4_0AsQ4g32',
      argument: 'bytes',
      expected: `cols a multiple of 32 and ${rows} · ${cols / 32} blocks of 18 bytes`,
      actual: `cols ${cols}, ${bytes.byteLength} bytes`,
    });
  }
  const { nibbles, scales } = repackQ4_0(bytes);
  const packed = new Uint32Array(rows * layout.rowWords);
  new Uint8Array(packed.buffer).set(nibbles);
  return { format: 'q4g32', n: rows, k: cols, packed, scales, scaleDType: 'f16' };
}

/** Bytes of `rows` rows of `cols` elements in whole blocks of `type`; otherwise a ShapeError for `kernel`. */
function checkBlockRows(
  kernel: string,
  type: GgmlQuantizedType,
  bytes: Uint8Array,
  rows: number,
  cols: number,
): void {
  const { blockSize, blockBytes } = GGML_TYPES[type];
  if (cols % blockSize !== 0 || bytes.byteLength !== rows * (cols / blockSize) * blockBytes) {
    throw new ShapeError(`${type} blocks do not make whole rows of the shape`, {
      operation: kernel,
      argument: 'bytes',
      expected: `cols a multiple of ${blockSize} and ${rows} · ${cols / blockSize} blocks of ${blockBytes} bytes`,
      actual: `cols ${cols}, ${bytes.byteLength} bytes`,
    });
  }
}

/**
 * A Q8_0 tensor [rows, cols] as core's `q8g32` weight, exactly: both are
 * int8 · f16 scale per 32 weights; the int8 values in order are `q8g32`'s
 * codes (weight k at byte k mod 4 of word k / 4).
 */
export function q8_0AsQ8g32(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  checkBlockRows('q8_0AsQ8g32', 'Q8_0', bytes, rows, cols);
  const { values, scales } = repackQ8_0(bytes);
  return {
    format: 'q8g32',
    n: rows,
    k: cols,
    packed: int8Rows(values, rows, cols, 'q8g32'),
    scales,
    scaleDType: 'f16',
  };
}

/**
 * A Q4_K tensor [rows, cols] as core's `q4g32a` weight, exactly: `repackQ4_K`'s
 * sequential nibbles are `q4g32a`'s codes, its f32 scales d·sc and offsets
 * dmin·m the format's, and f32(f32(q · scale) − offset) is ggml's value.
 */
export function q4_KAsQ4g32a(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  checkBlockRows('q4_KAsQ4g32a', 'Q4_K', bytes, rows, cols);
  const { nibbles, scales, offsets } = repackQ4_K(bytes);
  const packed = new Uint32Array(rows * quantLayout('q4g32a', cols).rowWords);
  new Uint8Array(packed.buffer).set(nibbles);
  return { format: 'q4g32a', n: rows, k: cols, packed, scales, offsets, scaleDType: 'f32' };
}

/**
 * A Q6_K tensor [rows, cols] as core's `q8g16` weight, exactly: `repackQ6_K`'s
 * int8 values (q − 32) are `q8g16`'s codes and its f32 scales d·scale the
 * format's; f32(code · scale) is ggml's value. 10 bits per weight where Q6_K
 * stores 6.5625: the kernels read the int8 codes they read for Q8_0.
 */
export function q6_KAsQ8g16(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  checkBlockRows('q6_KAsQ8g16', 'Q6_K', bytes, rows, cols);
  const { values, scales } = repackQ6_K(bytes);
  const packed = new Uint32Array(rows * quantLayout('q8g16', cols).rowWords);
  new Int8Array(packed.buffer).set(values);
  return { format: 'q8g16', n: rows, k: cols, packed, scales, scaleDType: 'f32' };
}

/** `rows` rows of int8 codes in order as q8 layouts' packed words (rows of whole 32-blocks). */
function int8Rows(values: Int8Array, rows: number, cols: number, format: 'q8g32' | 'q8g32a'): Uint32Array {
  const packed = new Uint32Array(rows * quantLayout(format, cols).rowWords);
  new Int8Array(packed.buffer).set(values);
  return packed;
}

/**
 * A Q4_1 tensor [rows, cols] as core's `q4g32a` weight with f16 scales and
 * offsets, exactly (see `repackQ4_1`): 5 bits per weight, as in the file.
 */
export function q4_1AsQ4g32a(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  checkBlockRows('q4_1AsQ4g32a', 'Q4_1', bytes, rows, cols);
  const { nibbles, scales, offsets } = repackQ4_1(bytes);
  const packed = new Uint32Array(rows * quantLayout('q4g32a', cols).rowWords);
  new Uint8Array(packed.buffer).set(nibbles);
  return { format: 'q4g32a', n: rows, k: cols, packed, scales, offsets, scaleDType: 'f16' };
}

/**
 * A Q5_0 tensor [rows, cols] as core's `q8g32` weight, exactly (see
 * `repackQ5_0`): 8.5 bits per weight where Q5_0 stores 5.5.
 */
export function q5_0AsQ8g32(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  checkBlockRows('q5_0AsQ8g32', 'Q5_0', bytes, rows, cols);
  const { values, scales } = repackQ5_0(bytes);
  return {
    format: 'q8g32',
    n: rows,
    k: cols,
    packed: int8Rows(values, rows, cols, 'q8g32'),
    scales,
    scaleDType: 'f16',
  };
}

/**
 * A Q5_1 tensor [rows, cols] as core's `q8g32a` weight with f16 scales and
 * offsets, exactly (see `repackQ5_1`): 9 bits per weight where Q5_1 stores 6.
 */
export function q5_1AsQ8g32a(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  checkBlockRows('q5_1AsQ8g32a', 'Q5_1', bytes, rows, cols);
  const { values, scales, offsets } = repackQ5_1(bytes);
  const packed = int8Rows(values, rows, cols, 'q8g32a');
  return { format: 'q8g32a', n: rows, k: cols, packed, scales, offsets, scaleDType: 'f16' };
}

/**
 * A Q5_K tensor [rows, cols] as core's `q8g32a` weight, exactly (see
 * `repackQ5_K`): 10 bits per weight where Q5_K stores 5.5.
 */
export function q5_KAsQ8g32a(bytes: Uint8Array, rows: number, cols: number): QuantizedHostWeight {
  checkBlockRows('q5_KAsQ8g32a', 'Q5_K', bytes, rows, cols);
  const { values, scales, offsets } = repackQ5_K(bytes);
  const packed = int8Rows(values, rows, cols, 'q8g32a');
  return { format: 'q8g32a', n: rows, k: cols, packed, scales, offsets, scaleDType: 'f32' };
}

/** A quantized GGUF tensor [rows, cols] in core's format for its type, exactly (see each function). */
export function ggufAsCoreFormat(
  type: GgmlQuantizedType,
  bytes: Uint8Array,
  rows: number,
  cols: number,
): QuantizedHostWeight {
  switch (type) {
    case 'Q4_0':
      return q4_0AsQ4g32(bytes, rows, cols);
    case 'Q8_0':
      return q8_0AsQ8g32(bytes, rows, cols);
    case 'Q4_K':
      return q4_KAsQ4g32a(bytes, rows, cols);
    case 'Q4_1':
      return q4_1AsQ4g32a(bytes, rows, cols);
    case 'Q5_0':
      return q5_0AsQ8g32(bytes, rows, cols);
    case 'Q5_1':
      return q5_1AsQ8g32a(bytes, rows, cols);
    case 'Q5_K':
      return q5_KAsQ8g32a(bytes, rows, cols);
    case 'Q6_K':
      return q6_KAsQ8g16(bytes, rows, cols);
  }
}

/**
 * A repack for `loadGgufLlama` that puts quantized tensors on the device in
 * core's formats, exactly (the values ggml's own dequantization gives):
 * Q4_0 as `q4g32`, Q8_0 and Q5_0 as `q8g32`, Q4_K and Q4_1 as `q4g32a`,
 * Q6_K as `q8g16`, Q5_K and Q5_1 as `q8g32a`. The
 * parts are named as `quantizedWeightOf` takes them (`packed`, `scales`,
 * `offsets`). Other quantized types are refused by name.
 */
export const repackOntoCoreFormats: GgufRepack = (backend, tensor) => {
  if (!isGgmlQuantizedType(tensor.type) || tensor.shape.length !== 2) return refuseQuantized(backend, tensor);
  const [rows, cols] = tensor.shape as [number, number];
  const weight = uploadQuantized(backend, ggufAsCoreFormat(tensor.type, tensor.bytes, rows, cols));
  const tensors: Record<string, Tensor> = { packed: weight.packed, scales: weight.scales };
  if (weight.offsets) tensors.offsets = weight.offsets;
  return { format: weight.format, shape: tensor.shape, tensors };
};
