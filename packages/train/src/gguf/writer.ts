import { InvalidArgumentError, type Shape, sizeOf } from '@rayo/core';
import { roundF32To } from '../checkpoint/floatWords.js';
import { writeFileAtomically } from '../io/atomicWrite.js';
import {
  GGML_QUANTIZED_TYPES,
  GGML_TYPES,
  type GgmlType,
  ggmlTensorBytes,
  isGgmlQuantizedType,
} from './ggmlTypes.js';
import { GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_MAX_DIMS } from './ggufFile.js';
import {
  GGUF_VALUE_TYPES,
  type GgufArray,
  type GgufValue,
  type GgufValueType,
  SCALAR_BYTES,
} from './metadata.js';
import { quantize } from './quantize.js';

/** A tensor to write: f32 `values` converted or quantized to `type`, or its stored `bytes` as they are. */
export interface GgufTensorToWrite {
  readonly name: string;
  readonly type: GgmlType;
  /** Outermost first (the file stores it reversed, innermost first). */
  readonly shape: Shape;
  readonly values?: Float32Array;
  readonly bytes?: Uint8Array;
}

export interface GgufContents {
  /** 3 unless given. */
  readonly version?: 2 | 3;
  /** Written in order; `general.alignment` (uint32) sets the alignment, else 32. */
  readonly metadata: Iterable<readonly [string, GgufValue]>;
  readonly tensors: readonly GgufTensorToWrite[];
}

const KERNEL = 'writeGguf';

function invalid(argument: string, message: string, expected: string, actual: string): never {
  throw new InvalidArgumentError(message, { operation: KERNEL, argument, expected, actual });
}

const INTEGER_RANGES: Partial<Record<GgufValueType, readonly [number, number]>> = {
  uint8: [0, 0xff],
  int8: [-0x80, 0x7f],
  uint16: [0, 0xffff],
  int16: [-0x8000, 0x7fff],
  uint32: [0, 0xffffffff],
  int32: [-0x80000000, 0x7fffffff],
};

/** Little-endian bytes, grown as written. */
class ByteWriter {
  #bytes = new Uint8Array(256);
  #view = new DataView(this.#bytes.buffer);
  length = 0;

  #room(n: number): number {
    if (this.length + n > this.#bytes.length) {
      const grown = new Uint8Array(Math.max(2 * this.#bytes.length, this.length + n));
      grown.set(this.#bytes.subarray(0, this.length));
      this.#bytes = grown;
      this.#view = new DataView(grown.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  u32(v: number): void {
    const at = this.#room(4);
    this.#view.setUint32(at, v, true);
  }
  u64(v: number | bigint): void {
    const at = this.#room(8);
    this.#view.setBigUint64(at, BigInt(v), true);
  }
  bytes(b: Uint8Array): void {
    const at = this.#room(b.length);
    this.#bytes.set(b, at);
  }
  string(s: string): void {
    const utf8 = new TextEncoder().encode(s);
    this.u64(utf8.length);
    this.bytes(utf8);
  }
  zeros(n: number): void {
    this.#room(n);
  }

  scalar(type: Exclude<GgufValueType, 'array'>, value: unknown, what: string): void {
    const range = INTEGER_RANGES[type];
    if (range) {
      if (typeof value !== 'number' || !Number.isInteger(value) || value < range[0] || value > range[1])
        invalid(
          what,
          `a ${type} value is out of range`,
          `an integer in [${range[0]}, ${range[1]}]`,
          String(value),
        );
    }
    switch (type) {
      case 'float32':
      case 'float64':
        if (typeof value !== 'number')
          invalid(what, `a ${type} value is not a number`, 'a number', typeof value);
        break;
      case 'uint64':
      case 'int64': {
        const [lo, hi] = type === 'uint64' ? [0n, 2n ** 64n - 1n] : [-(2n ** 63n), 2n ** 63n - 1n];
        if (typeof value !== 'bigint' || value < lo || value > hi)
          invalid(what, `a ${type} value is out of range`, `a bigint in [${lo}, ${hi}]`, String(value));
        break;
      }
      case 'bool':
        if (typeof value !== 'boolean')
          invalid(what, 'a bool value is not a boolean', 'true or false', String(value));
        break;
      case 'string':
        if (typeof value !== 'string')
          invalid(what, 'a string value is not a string', 'a string', typeof value);
        this.string(value);
        return;
    }
    // The position first: making room may replace the view.
    const at = this.#room(SCALAR_BYTES[type]);
    const view = this.#view;
    switch (type) {
      case 'uint8':
        view.setUint8(at, value as number);
        break;
      case 'int8':
        view.setInt8(at, value as number);
        break;
      case 'uint16':
        view.setUint16(at, value as number, true);
        break;
      case 'int16':
        view.setInt16(at, value as number, true);
        break;
      case 'uint32':
        view.setUint32(at, value as number, true);
        break;
      case 'int32':
        view.setInt32(at, value as number, true);
        break;
      case 'float32':
        view.setFloat32(at, value as number, true);
        break;
      case 'float64':
        view.setFloat64(at, value as number, true);
        break;
      case 'uint64':
        view.setBigUint64(at, value as bigint, true);
        break;
      case 'int64':
        view.setBigInt64(at, value as bigint, true);
        break;
      case 'bool':
        view.setUint8(at, value ? 1 : 0);
        break;
    }
  }

  array(array: GgufArray, what: string): void {
    this.u32(GGUF_VALUE_TYPES[array.itemType]);
    this.u64(array.value.length);
    array.value.forEach((item, i) => {
      if (array.itemType === 'array') this.array(item as GgufArray, `${what}[${i}]`);
      else this.scalar(array.itemType, item, `${what}[${i}]`);
    });
  }

  value(value: GgufValue, what: string): void {
    const code = GGUF_VALUE_TYPES[value.type];
    if (code === undefined) invalid(what, 'unknown metadata type', 'a GGUF value type', String(value.type));
    this.u32(code);
    if (value.type === 'array') this.array(value, what);
    else this.scalar(value.type, value.value, what);
  }

  take(): Uint8Array {
    return this.#bytes.slice(0, this.length);
  }
}

/** The stored bytes of one tensor: its `bytes` checked, or its `values` converted or quantized. */
function tensorBytes(tensor: GgufTensorToWrite): Uint8Array {
  const dims = [...tensor.shape].reverse();
  const byteLength = ggmlTensorBytes(tensor.type, dims, tensor.name);
  if ((tensor.bytes === undefined) === (tensor.values === undefined))
    invalid(
      tensor.name,
      'a tensor needs either values or bytes',
      'exactly one of values, bytes',
      'both or neither',
    );
  if (tensor.bytes) {
    if (tensor.bytes.length !== byteLength)
      invalid(
        tensor.name,
        'tensor bytes do not fit its type and shape',
        `${byteLength} bytes`,
        `${tensor.bytes.length}`,
      );
    return tensor.bytes;
  }
  const values = tensor.values!;
  if (values.length !== sizeOf(tensor.shape))
    invalid(
      tensor.name,
      'tensor values do not fit its shape',
      `${sizeOf(tensor.shape)} values`,
      `${values.length}`,
    );
  if (isGgmlQuantizedType(tensor.type)) return quantize(tensor.type, values);
  if (tensor.type === 'F32') return new Uint8Array(Float32Array.from(values).buffer);
  if (tensor.type === 'F16' || tensor.type === 'BF16') {
    const words = roundF32To(tensor.type === 'F16' ? 'f16' : 'bf16', values) as Uint16Array;
    return new Uint8Array(words.buffer, words.byteOffset, words.byteLength);
  }
  return invalid(
    tensor.name,
    `the writer takes ${tensor.type} tensors only as bytes`,
    `F32, F16, BF16 or ${GGML_QUANTIZED_TYPES.join(', ')} values, or stored bytes`,
    tensor.type,
  );
}

/**
 * A GGUF file in pieces, in file order: the header (magic, version, counts,
 * metadata, tensor infos, padding), then each tensor's bytes with the
 * padding that aligns the next. Tensors are converted one at a time, as the
 * pieces are taken.
 */
export function* ggufPieces(contents: GgufContents): Generator<Uint8Array> {
  const version = contents.version ?? 3;
  const metadata = [...contents.metadata];
  const alignmentEntry = metadata.find(([key]) => key === 'general.alignment')?.[1];
  const alignment =
    alignmentEntry === undefined
      ? GGUF_DEFAULT_ALIGNMENT
      : alignmentEntry.type === 'uint32' && (alignmentEntry.value & (alignmentEntry.value - 1)) === 0
        ? alignmentEntry.value
        : invalid(
            'general.alignment',
            'the alignment is invalid',
            'a uint32 power of two',
            JSON.stringify(alignmentEntry),
          );
  const header = new ByteWriter();
  header.u32(GGUF_MAGIC);
  header.u32(version);
  header.u64(contents.tensors.length);
  header.u64(metadata.length);
  const keys = new Set<string>();
  for (const [key, value] of metadata) {
    if (keys.has(key)) invalid(key, 'a metadata key appears twice', 'unique keys', key);
    keys.add(key);
    header.string(key);
    header.value(value, key);
  }
  const padded = (n: number) => Math.ceil(n / alignment) * alignment;
  const names = new Set<string>();
  let offset = 0;
  for (const tensor of contents.tensors) {
    if (names.has(tensor.name))
      invalid(tensor.name, 'a tensor name appears twice', 'unique names', tensor.name);
    names.add(tensor.name);
    if (!GGML_TYPES[tensor.type])
      invalid(tensor.name, 'unknown ggml type', 'a ggml type name', String(tensor.type));
    if (tensor.shape.length < 1 || tensor.shape.length > GGUF_MAX_DIMS)
      invalid(
        tensor.name,
        'a tensor has too many or no dimensions',
        `1 to ${GGUF_MAX_DIMS}`,
        `${tensor.shape.length}`,
      );
    const dims = [...tensor.shape].reverse();
    header.string(tensor.name);
    header.u32(dims.length);
    for (const d of dims) header.u64(d);
    header.u32(GGML_TYPES[tensor.type].id);
    header.u64(offset);
    offset = padded(offset + ggmlTensorBytes(tensor.type, dims, tensor.name));
  }
  header.zeros(padded(header.length) - header.length);
  yield header.take();
  for (const tensor of contents.tensors) {
    const bytes = tensorBytes(tensor);
    yield bytes;
    const pad = padded(bytes.length) - bytes.length;
    if (pad > 0) yield new Uint8Array(pad);
  }
}

/** A whole GGUF file in memory (for small files and tests; `writeGgufFile` streams). */
export function encodeGguf(contents: GgufContents): Uint8Array {
  const pieces = [...ggufPieces(contents)];
  const out = new Uint8Array(pieces.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of pieces) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * Writes a GGUF file piece by piece (one tensor's bytes in memory at a time),
 * atomically: aside, flushed, then renamed over `path`, so that a failed or
 * interrupted save leaves the previous file whole and no partial file behind.
 */
export async function writeGgufFile(path: string, contents: GgufContents): Promise<void> {
  await writeFileAtomically(path, ggufPieces(contents), 'writeGgufFile');
}
