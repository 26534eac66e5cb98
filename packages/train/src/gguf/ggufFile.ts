/**
 * GGUF, llama.cpp's single-file model format, read tensor by tensor.
 *
 * This is a reader of its own rather than `@huggingface/gguf`: that package
 * parses the header only (no tensor data), reads a local file by path in
 * fixed chunks into one growable buffer with a 50 MB cap rather than through
 * a file handle at offsets, reports sizes as bigints, depends on
 * `@huggingface/tasks`, and would be the first runtime dependency of
 * `@rayo/train` besides core. Here the header streams through the same
 * `RandomAccessFile` the safetensors loader reads (so a test can count the
 * reads), and each tensor's bytes are read at their offset in pieces of at
 * most `maxReadBytes`: neither the file nor more than one tensor is held.
 *
 * Layout (little-endian; versions 2 and 3): magic `GGUF`, u32 version, u64
 * tensor count, u64 metadata count; the metadata key/values (u64-length
 * UTF-8 key, u32 value type, value; an array is u32 item type, u64 count,
 * items); the tensor infos (name, u32 dimension count, u64 dims innermost
 * first, u32 ggml type, u64 offset into the data); zero padding to
 * `general.alignment` (default 32); the tensor data, each tensor at an
 * aligned offset.
 */
import { DTypeError, type HostArray, InvalidArgumentError, RayoError, type Shape } from '@rayo/core';
import { type FloatDType, roundF32To, widenToF32 } from '../checkpoint/floatWords.js';
import type { RandomAccessFile } from '../checkpoint/randomAccessFile.js';
import { checkIntegerAtLeast } from '../integerOption.js';
import { namingFile } from '../io/fileError.js';
import { type GgmlType, ggmlTensorBytes, ggmlTypeOfId, isGgmlFloatType } from './ggmlTypes.js';
import { HeaderCursor } from './headerCursor.js';
import {
  type GgufArray,
  type GgufMetadata,
  type GgufValue,
  type GgufValueType,
  ggufValueTypeOfCode,
  SCALAR_BYTES,
  stringArrayEntry,
} from './metadata.js';
import { PackedStringsBuilder } from './packedStrings.js';

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** ggml's limit on a tensor's dimensions. */
export const GGUF_MAX_DIMS = 4;
/**
 * Most array items all metadata may hold: about 8 times what the largest
 * vocabularies in use need (tokens, scores, types and merges of ~256 K
 * entries each), low enough that the values stay within a few hundred MB.
 */
export const GGUF_MAX_METADATA_ITEMS = 2 ** 23;

/** The array items the metadata may still hold. */
interface ItemBudget {
  left: number;
}

/** Deepest nesting of metadata arrays the reader takes (files in use nest at most 2: arrays of arrays). */
export const GGUF_MAX_ARRAY_DEPTH = 4;

const DEFAULT_MAX_READ_BYTES = 64 * 2 ** 20;
const DEFAULT_HEADER_CHUNK_BYTES = 2 ** 20;
const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

/** One tensor of a GGUF file: its type, dims and where its bytes lie. */
export interface GgufTensorInfo {
  readonly name: string;
  readonly type: GgmlType;
  /** As stored, innermost first: `dims[0]` is the row length. */
  readonly dims: readonly number[];
  /** Outermost first, as rayo (and torch) write shapes: `dims` reversed. */
  readonly shape: Shape;
  /** Byte offset into the data section (a multiple of the alignment). */
  readonly offset: number;
  readonly byteLength: number;
}

export interface GgufFileOptions {
  /** Largest single read of tensor data in bytes (default 64 MiB). */
  readonly maxReadBytes?: number;
  /** Bytes read at a time while parsing the header (default 1 MiB). */
  readonly headerChunkBytes?: number;
}

function fail(file: RandomAccessFile, message: string, expected: string, actual: string): never {
  throw new RayoError(message, { operation: 'gguf', argument: file.name, expected, actual });
}

/** The fewest bytes of a metadata entry (u64 key length, u32 type, a 1-byte value) and of a tensor info. */
const LEAST_METADATA_BYTES = 8 + 4 + 1;
const LEAST_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8;

function countWithin(
  file: RandomAccessFile,
  count: bigint,
  what: string,
  bytes: number,
  least: number,
): number {
  const most = Math.floor(bytes / least);
  if (count > BigInt(most))
    fail(
      file,
      `the file ends inside the GGUF header: its ${what} exceeds what the file can hold`,
      `at most ${most} (${bytes} bytes left)`,
      String(count),
    );
  return Number(count);
}

async function readScalar(
  cursor: HeaderCursor,
  file: RandomAccessFile,
  type: Exclude<GgufValueType, 'array'>,
  what: string,
) {
  if (type === 'string') return cursor.string(what);
  await cursor.ensure(SCALAR_BYTES[type], what);
  return presentScalar(cursor, file, type, what);
}

/** A scalar whose bytes are present, or undefined where they are not. */
function bufferedScalar(
  cursor: HeaderCursor,
  file: RandomAccessFile,
  type: Exclude<GgufValueType, 'array'>,
  what: string,
) {
  if (type === 'string') return cursor.bufferedString(what);
  return cursor.buffered(SCALAR_BYTES[type]) ? presentScalar(cursor, file, type, what) : undefined;
}

/** A scalar other than a string, its bytes present. */
function presentScalar(
  cursor: HeaderCursor,
  file: RandomAccessFile,
  type: Exclude<GgufValueType, 'array' | 'string'>,
  what: string,
) {
  switch (type) {
    case 'uint8':
      return cursor.u8();
    case 'int8':
      return cursor.i8();
    case 'uint16':
      return cursor.u16();
    case 'int16':
      return cursor.i16();
    case 'uint32':
      return cursor.u32();
    case 'int32':
      return cursor.i32();
    case 'float32':
      return cursor.f32();
    case 'float64':
      return cursor.f64();
    case 'uint64':
      return cursor.u64();
    case 'int64':
      return cursor.i64();
    case 'bool': {
      const byte = cursor.u8();
      if (byte > 1) fail(file, `GGUF ${what} is not a bool`, '0 or 1', `${byte}`);
      return byte === 1;
    }
  }
}

async function readValueType(cursor: HeaderCursor, file: RandomAccessFile, what: string) {
  await cursor.ensure(4, what);
  const code = cursor.u32();
  const type = ggufValueTypeOfCode(code);
  if (type === undefined) fail(file, `GGUF ${what} has an unknown value type`, 'a type code 0–12', `${code}`);
  return type;
}

/** The fewest bytes an item of `type` takes in the file: what bounds an array's count by the bytes left. */
function leastItemBytes(type: GgufValueType): number {
  if (type === 'string') return 8; // its u64 length
  if (type === 'array') return 12; // its u32 item type and u64 count
  return SCALAR_BYTES[type];
}

/**
 * An array value. Its count is checked against the bytes left before
 * anything is allocated, its nesting against `GGUF_MAX_ARRAY_DEPTH`, and
 * `what` (for errors) is made once per array, not per item: a small file of
 * deeply nested arrays costs linear time and memory.
 */
async function readArray(
  cursor: HeaderCursor,
  file: RandomAccessFile,
  what: string,
  depth: number,
  budget: ItemBudget,
): Promise<GgufArray> {
  if (depth > GGUF_MAX_ARRAY_DEPTH)
    fail(file, `GGUF ${what} nests arrays too deeply`, `at most ${GGUF_MAX_ARRAY_DEPTH} levels`, `${depth}`);
  const itemType = await readValueType(cursor, file, `${what} item type`);
  const left = file.size - cursor.position - 8;
  const count = await cursor.size(`${what} count`, Math.max(0, Math.floor(left / leastItemBytes(itemType))));
  budget.left -= count;
  if (budget.left < 0)
    fail(
      file,
      `GGUF ${what} takes the metadata past its item limit`,
      `at most ${GGUF_MAX_METADATA_ITEMS} array items in all`,
      `${count} more`,
    );
  const itemWhat = `${what} item`;
  if (itemType === 'string') {
    const sink = new PackedStringsBuilder(count, cursor.position, file.name, itemWhat);
    while (sink.count < count) {
      if (cursor.bufferedStringsInto(count - sink.count, sink) === 0) await cursor.stringInto(sink, itemWhat);
    }
    return stringArrayEntry(sink.finish());
  }
  const items: unknown[] = new Array(count);
  for (let i = 0; i < count; i++) {
    if (itemType === 'array') items[i] = await readArray(cursor, file, itemWhat, depth + 1, budget);
    else
      items[i] =
        bufferedScalar(cursor, file, itemType, itemWhat) ??
        (await readScalar(cursor, file, itemType, itemWhat));
  }
  return { type: 'array', itemType, value: items } as GgufArray;
}

async function readValue(
  cursor: HeaderCursor,
  file: RandomAccessFile,
  key: string,
  budget: ItemBudget,
): Promise<GgufValue> {
  const what = `metadata '${key}'`;
  const type = await readValueType(cursor, file, what);
  if (type === 'array') return readArray(cursor, file, what, 1, budget);
  return { type, value: await readScalar(cursor, file, type, what) } as GgufValue;
}

function alignmentOf(file: RandomAccessFile, metadata: GgufMetadata): number {
  const entry = metadata.get('general.alignment');
  if (entry === undefined) return GGUF_DEFAULT_ALIGNMENT;
  const value = entry.type === 'uint32' ? entry.value : 0;
  if (value === 0 || (value & (value - 1)) !== 0)
    fail(file, "GGUF 'general.alignment' is invalid", 'a uint32 power of two', JSON.stringify(entry));
  return value;
}

/**
 * A GGUF file read tensor by tensor: opening streams the header (metadata
 * and tensor infos) and checks that every tensor is of a known type, whole
 * blocks per row, at an aligned offset, within the file and overlapping no
 * other; tensor bytes are read only when asked for.
 */
export class GgufFile {
  readonly file: RandomAccessFile;
  readonly version: 2 | 3;
  readonly metadata: GgufMetadata;
  readonly tensors: ReadonlyMap<string, GgufTensorInfo>;
  readonly alignment: number;
  /** The file position of the data section. */
  readonly dataStart: number;
  readonly #maxReadBytes: number;

  private constructor(
    fields: Pick<GgufFile, 'file' | 'version' | 'metadata' | 'tensors' | 'alignment' | 'dataStart'>,
    maxReadBytes: number,
  ) {
    this.file = fields.file;
    this.version = fields.version;
    this.metadata = fields.metadata;
    this.tensors = fields.tensors;
    this.alignment = fields.alignment;
    this.dataStart = fields.dataStart;
    this.#maxReadBytes = maxReadBytes;
  }

  static async open(file: RandomAccessFile, options: GgufFileOptions = {}): Promise<GgufFile> {
    const maxReadBytes = options.maxReadBytes ?? DEFAULT_MAX_READ_BYTES;
    const chunk = options.headerChunkBytes ?? DEFAULT_HEADER_CHUNK_BYTES;
    checkIntegerAtLeast('GgufFile.open', 'maxReadBytes', maxReadBytes, 4);
    checkIntegerAtLeast('GgufFile.open', 'headerChunkBytes', chunk, 8);
    try {
      return await GgufFile.#read(file, chunk, maxReadBytes);
    } catch (error) {
      throw namingFile(error, file.name);
    }
  }

  static async #read(file: RandomAccessFile, chunk: number, maxReadBytes: number): Promise<GgufFile> {
    const cursor = new HeaderCursor(file, chunk);
    await cursor.ensure(24, 'fixed header');
    const magic = cursor.u32();
    if (magic !== GGUF_MAGIC)
      fail(file, 'not a GGUF file', "the magic 'GGUF'", `0x${magic.toString(16).padStart(8, '0')}`);
    const version = cursor.u32();
    if (version !== 2 && version !== 3) {
      const hint = (version & 0xffff) === 0 ? ' (a big-endian file?)' : '';
      fail(file, `unsupported GGUF version${hint}`, 'version 2 or 3, little-endian', `${version}`);
    }
    // Counts beyond what the bytes after the fixed header can hold are corrupt; checked before any loop.
    const left = file.size - 24;
    const tensorCount = countWithin(file, cursor.u64(), 'tensor count', left, LEAST_TENSOR_INFO_BYTES);
    const kvCount = countWithin(file, cursor.u64(), 'metadata count', left, LEAST_METADATA_BYTES);
    const metadata = new Map<string, GgufValue>();
    const budget: ItemBudget = { left: GGUF_MAX_METADATA_ITEMS };
    for (let i = 0; i < kvCount; i++) {
      const key = await cursor.string(`metadata key ${i}`);
      if (metadata.has(key)) fail(file, `GGUF metadata key '${key}' appears twice`, 'unique keys', key);
      metadata.set(key, await readValue(cursor, file, key, budget));
    }
    const alignment = alignmentOf(file, metadata);
    const infos: GgufTensorInfo[] = [];
    for (let i = 0; i < tensorCount; i++) infos.push(await readTensorInfo(cursor, file, i));
    const dataStart = Math.ceil(cursor.position / alignment) * alignment;
    const tensors = checkTensorLayout(file, infos, alignment, file.size - dataStart);
    return new GgufFile({ file, version, metadata, tensors, alignment, dataStart }, maxReadBytes);
  }

  /**
   * This header over another handle of the same file (`TextModel.load`
   * reads the header, then the loader opens the file again): nothing is
   * parsed again; a file of another size is refused.
   */
  reopened(file: RandomAccessFile): GgufFile {
    if (file.size !== this.file.size) {
      fail(file, 'the file is not the one whose header was read', `${this.file.size} bytes`, `${file.size}`);
    }
    const { version, metadata, tensors, alignment, dataStart } = this;
    return new GgufFile({ file, version, metadata, tensors, alignment, dataStart }, this.#maxReadBytes);
  }

  /** The info of tensor `name`, or an InvalidArgumentError naming it. */
  tensor(name: string, api = 'GgufFile'): GgufTensorInfo {
    const info = this.tensors.get(name);
    if (!info) {
      throw new InvalidArgumentError('no such tensor in the GGUF file', {
        operation: api,
        argument: name,
        expected: `one of the ${this.tensors.size} tensors of ${this.file.name}`,
        actual: 'absent',
      });
    }
    return info;
  }

  /** The stored bytes of tensor `name` (blocks as they are), read in pieces of at most `maxReadBytes`. */
  async readBytes(name: string): Promise<Uint8Array> {
    const info = this.tensor(name, 'GgufFile.readBytes');
    const bytes = new Uint8Array(info.byteLength);
    const start = this.dataStart + info.offset;
    for (let at = 0; at < bytes.length; at += this.#maxReadBytes) {
      await this.file.read(bytes.subarray(at, Math.min(at + this.#maxReadBytes, bytes.length)), start + at);
    }
    return bytes;
  }

  /**
   * The elements of an F32, F16 or BF16 tensor as a host array of `dtype`
   * (words for the half dtypes): as stored where the formats match, else
   * widened to f32 (exact) and rounded once to nearest even. A quantized
   * tensor is a DTypeError: it is never dequantized on the host.
   */
  async readFloat(name: string, dtype: FloatDType): Promise<HostArray> {
    const info = this.tensor(name, 'GgufFile.readFloat');
    if (!isGgmlFloatType(info.type)) {
      throw new DTypeError(`tensor '${name}' is not a float tensor`, {
        operation: 'GgufFile.readFloat',
        argument: name,
        expected: 'F32, F16 or BF16 (quantized tensors go through a repack)',
        actual: info.type,
      });
    }
    return floatElements(info.type, await this.readBytes(name), dtype);
  }

  close(): Promise<void> {
    return this.file.close();
  }
}

/** The rayo dtype of a GGUF float type. */
export function floatDTypeOf(type: 'F32' | 'F16' | 'BF16'): FloatDType {
  return type === 'F32' ? 'f32' : type === 'F16' ? 'f16' : 'bf16';
}

/** Stored little-endian float bytes of `type` as a host array of `dtype` (see `readFloat`). */
export function floatElements(type: 'F32' | 'F16' | 'BF16', bytes: Uint8Array, dtype: FloatDType): HostArray {
  const stored = floatDTypeOf(type);
  const width = stored === 'f32' ? 4 : 2;
  if (!LITTLE_ENDIAN) for (let i = 0; i < bytes.length; i += width) bytes.subarray(i, i + width).reverse();
  const aligned = bytes.byteOffset % width === 0 ? bytes : bytes.slice();
  const words =
    stored === 'f32'
      ? new Float32Array(aligned.buffer, aligned.byteOffset, aligned.length / 4)
      : new Uint16Array(aligned.buffer, aligned.byteOffset, aligned.length / 2);
  if (stored === dtype) return words;
  const values = stored === 'f32' ? (words as Float32Array) : widenToF32(stored, words);
  return roundF32To(dtype, values);
}

async function readTensorInfo(
  cursor: HeaderCursor,
  file: RandomAccessFile,
  i: number,
): Promise<GgufTensorInfo> {
  const name = await cursor.string(`tensor name ${i}`);
  await cursor.ensure(4, `tensor '${name}'`);
  const nDims = cursor.u32();
  if (nDims < 1 || nDims > GGUF_MAX_DIMS)
    fail(file, `tensor '${name}' has an invalid dimension count`, `1 to ${GGUF_MAX_DIMS}`, `${nDims}`);
  const dims: number[] = [];
  for (let d = 0; d < nDims; d++) dims.push(await cursor.size(`tensor '${name}' dims[${d}]`, 2 ** 53 - 1));
  await cursor.ensure(12, `tensor '${name}'`);
  const typeId = cursor.u32();
  const type = ggmlTypeOfId(typeId);
  if (type === undefined)
    fail(file, `tensor '${name}' has an unknown ggml type`, 'a ggml type id', `${typeId}`);
  const offset = cursor.u64();
  if (offset > BigInt(file.size))
    fail(file, `tensor '${name}' has an offset beyond the file`, `at most ${file.size}`, String(offset));
  const byteLength = ggmlTensorBytes(type, dims, name);
  return { name, type, dims, shape: [...dims].reverse(), offset: Number(offset), byteLength };
}

function checkTensorLayout(
  file: RandomAccessFile,
  infos: readonly GgufTensorInfo[],
  alignment: number,
  dataBytes: number,
): Map<string, GgufTensorInfo> {
  const tensors = new Map<string, GgufTensorInfo>();
  for (const info of infos) {
    if (tensors.has(info.name)) fail(file, `tensor '${info.name}' appears twice`, 'unique names', info.name);
    if (info.offset % alignment !== 0)
      fail(
        file,
        `tensor '${info.name}' is not aligned`,
        `an offset that is a multiple of ${alignment}`,
        `${info.offset}`,
      );
    if (info.offset + info.byteLength > dataBytes) {
      fail(
        file,
        `tensor '${info.name}' lies beyond the end of the file`,
        `${info.byteLength} bytes within the ${dataBytes} of the data section`,
        `[${info.offset}, ${info.offset + info.byteLength})`,
      );
    }
    tensors.set(info.name, info);
  }
  const spans = [...infos].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < spans.length; i++) {
    const before = spans[i - 1]!;
    const span = spans[i]!;
    if (span.offset < before.offset + before.byteLength)
      fail(
        file,
        `tensor '${span.name}' overlaps '${before.name}'`,
        `an offset >= ${before.offset + before.byteLength}`,
        `${span.offset}`,
      );
  }
  return tensors;
}
