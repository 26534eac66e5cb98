import {
  allocHost,
  bytesPerElement,
  type DType,
  formatShape,
  type HostArray,
  hostArrayMatches,
  InvalidArgumentError,
  type Shape,
  sizeOf,
} from '@rayo/core';
import { failSafetensors, headerLengthOf, parseSafetensorsHeader } from './safetensorsHeader.js';

/** A tensor on the host, as the safetensors format stores it. */
export interface StoredTensor {
  readonly dtype: DType;
  readonly shape: Shape;
  readonly data: HostArray;
}

export interface Safetensors {
  readonly tensors: Map<string, StoredTensor>;
  /** `__metadata__`: string keys to string values. */
  readonly metadata: Record<string, string>;
}

const TO_FORMAT: Readonly<Record<DType, string>> = {
  f32: 'F32',
  f16: 'F16',
  bf16: 'BF16',
  i32: 'I32',
  u32: 'U32',
};

const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;
const METADATA = '__metadata__';

/** Little-endian bytes of a host array. */
function toBytes(data: HostArray): Uint8Array {
  const view = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (LITTLE_ENDIAN) return view;
  const width = data.BYTES_PER_ELEMENT;
  const out = new Uint8Array(view.length);
  for (let i = 0; i < view.length; i += width)
    for (let j = 0; j < width; j++) out[i + j] = view[i + width - 1 - j]!;
  return out;
}

/** A host array of `dtype` from little-endian bytes (copied, so it is aligned). */
export function hostArrayFromBytes(dtype: DType, bytes: Uint8Array): HostArray {
  const width = bytesPerElement(dtype);
  const out = allocHost(dtype, bytes.length / width);
  const target = new Uint8Array(out.buffer);
  if (LITTLE_ENDIAN) target.set(bytes);
  else
    for (let i = 0; i < bytes.length; i += width)
      for (let j = 0; j < width; j++) target[i + j] = bytes[i + width - 1 - j]!;
  return out;
}

/**
 * Serialises tensors in the safetensors format: an 8-byte little-endian header
 * length, a JSON header (dtype, shape and data_offsets of each tensor, and
 * `__metadata__`), padded with spaces to 8 bytes, then the raw little-endian
 * data in name order.
 */
export function encodeSafetensors(
  tensors: ReadonlyMap<string, StoredTensor> | Readonly<Record<string, StoredTensor>>,
  metadata: Readonly<Record<string, string>> = {},
): Uint8Array {
  const entries = (tensors instanceof Map ? [...tensors] : Object.entries(tensors)) as [
    string,
    StoredTensor,
  ][];
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string') {
        throw new InvalidArgumentError('metadata values must be strings', {
          operation: 'encodeSafetensors',
          argument: `metadata.${k}`,
          expected: 'a string',
          actual: typeof v,
        });
      }
    }
    header[METADATA] = metadata;
  }
  let offset = 0;
  for (const [name, t] of entries) {
    if (name === METADATA) {
      throw new InvalidArgumentError('a tensor cannot be named __metadata__', {
        operation: 'encodeSafetensors',
        argument: name,
      });
    }
    const expected = sizeOf(t.shape);
    if (t.data.length !== expected || !hostArrayMatches(t.dtype, t.data)) {
      throw new InvalidArgumentError('tensor data does not match its dtype and shape', {
        operation: 'encodeSafetensors',
        argument: name,
        expected: `${expected} ${t.dtype} elements for ${formatShape(t.shape)}`,
        actual: `${t.data.length} elements in a ${t.data.constructor.name}`,
      });
    }
    const end = offset + t.data.byteLength;
    header[name] = { dtype: TO_FORMAT[t.dtype], shape: [...t.shape], data_offsets: [offset, end] };
    offset = end;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded !== json.length) {
    const spaced = new Uint8Array(padded).fill(0x20);
    spaced.set(json);
    json = spaced;
  }
  const out = new Uint8Array(8 + json.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  let at = 8 + json.length;
  for (const [, t] of entries) {
    out.set(toBytes(t.data), at);
    at += t.data.byteLength;
  }
  return out;
}

/** Parses the safetensors format, validating the header against the data. */
export function decodeSafetensors(bytes: Uint8Array): Safetensors {
  const headerLength = headerLengthOf(bytes.subarray(0, 8), bytes.length);
  const data = bytes.subarray(8 + headerLength);
  const header = parseSafetensorsHeader(bytes.subarray(8, 8 + headerLength), data.length);
  const tensors = new Map<string, StoredTensor>();
  for (const { name, format, dtype, shape, begin, end } of header.entries.values()) {
    if (!dtype) {
      failSafetensors(
        `tensor '${name}' has an unsupported dtype`,
        Object.values(TO_FORMAT).join(' | '),
        format,
      );
    }
    tensors.set(name, { dtype, shape, data: hostArrayFromBytes(dtype, data.subarray(begin, end)) });
  }
  return { tensors, metadata: header.metadata };
}
