import { InvalidArgumentError } from '@rayo/core';
import type { PackedStrings } from './packedStrings.js';

/** GGUF metadata value types by their numeric code in the file. */
export const GGUF_VALUE_TYPES = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;

export type GgufValueType = keyof typeof GGUF_VALUE_TYPES;
export type GgufNumberType =
  | 'uint8'
  | 'int8'
  | 'uint16'
  | 'int16'
  | 'uint32'
  | 'int32'
  | 'float32'
  | 'float64';
export type GgufBigIntType = 'uint64' | 'int64';

/** One array of a metadata value: its items' type and the items (arrays of arrays nest). */
export type GgufArray =
  | { readonly type: 'array'; readonly itemType: GgufNumberType; readonly value: readonly number[] }
  | { readonly type: 'array'; readonly itemType: GgufBigIntType; readonly value: readonly bigint[] }
  | { readonly type: 'array'; readonly itemType: 'bool'; readonly value: readonly boolean[] }
  | {
      readonly type: 'array';
      readonly itemType: 'string';
      readonly value: readonly string[];
      /** Where read from a file: the items packed (`value` is made from them when first read). */
      readonly packed?: PackedStrings;
    }
  | { readonly type: 'array'; readonly itemType: 'array'; readonly value: readonly GgufArray[] };

/**
 * A metadata value with its stored type, so that a value read from a file
 * writes back as the same bytes: 64-bit integers are bigints, strings UTF-8.
 */
export type GgufValue =
  | { readonly type: GgufNumberType; readonly value: number }
  | { readonly type: GgufBigIntType; readonly value: bigint }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | GgufArray;

export type GgufMetadata = ReadonlyMap<string, GgufValue>;

/** A string array read from a file: its items stay packed until `value` is first read. */
export function stringArrayEntry(packed: PackedStrings): GgufArray {
  let items: readonly string[] | undefined;
  const array = {
    type: 'array',
    itemType: 'string',
    get value() {
      items ??= packed.toArray();
      return items;
    },
  } as const;
  // Not enumerable: the entry compares and copies as the plain array it stands for.
  return Object.defineProperty(array, 'packed', { value: packed, enumerable: false });
}

/** An array's length, without making a packed string array's items. */
function arrayLength(array: GgufArray): number {
  return array.itemType === 'string' && array.packed ? array.packed.length : array.value.length;
}

const TYPE_OF_CODE = new Map<number, GgufValueType>(
  Object.entries(GGUF_VALUE_TYPES).map(([name, code]) => [code, name as GgufValueType]),
);

/** The value type of a numeric code, or undefined for a code the format does not define. */
export function ggufValueTypeOfCode(code: number): GgufValueType | undefined {
  return TYPE_OF_CODE.get(code);
}

/** Fixed widths of the scalar types (strings and arrays have none). */
export const SCALAR_BYTES: Readonly<Record<GgufNumberType | GgufBigIntType | 'bool', number>> = {
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  uint32: 4,
  int32: 4,
  float32: 4,
  bool: 1,
  uint64: 8,
  int64: 8,
  float64: 8,
};

function describe(value: GgufValue | undefined): string {
  if (value === undefined) return 'absent';
  if (value.type === 'array') return `an array of ${arrayLength(value)} ${value.itemType}`;
  return `${value.type} ${JSON.stringify(typeof value.value === 'bigint' ? String(value.value) : value.value)}`;
}

function wrongKey(key: string, expected: string, value: GgufValue | undefined): never {
  throw new InvalidArgumentError(`GGUF metadata '${key}' is invalid`, {
    operation: 'gguf',
    argument: key,
    expected,
    actual: describe(value),
  });
}

/** An integer-typed value as a number (a 64-bit one only where it is exact). */
export function metadataInteger(metadata: GgufMetadata, key: string): number | undefined {
  const entry = metadata.get(key);
  if (entry === undefined) return undefined;
  if (entry.type === 'uint64' || entry.type === 'int64') {
    if (entry.value > BigInt(Number.MAX_SAFE_INTEGER) || entry.value < -BigInt(Number.MAX_SAFE_INTEGER))
      wrongKey(key, 'an integer below 2^53', entry);
    return Number(entry.value);
  }
  if (entry.type === 'float32' || entry.type === 'float64' || typeof entry.value !== 'number')
    wrongKey(key, 'an integer', entry);
  return entry.value;
}

/** A float- or integer-typed value as a number. */
export function metadataNumber(metadata: GgufMetadata, key: string): number | undefined {
  const entry = metadata.get(key);
  if (entry?.type === 'float32' || entry?.type === 'float64') return entry.value;
  return metadataInteger(metadata, key);
}

export function metadataString(metadata: GgufMetadata, key: string): string | undefined {
  const entry = metadata.get(key);
  if (entry === undefined) return undefined;
  if (entry.type !== 'string') wrongKey(key, 'a string', entry);
  return entry.value;
}

/** The length of an array-typed value. */
export function metadataArrayLength(metadata: GgufMetadata, key: string): number | undefined {
  const entry = metadata.get(key);
  if (entry === undefined) return undefined;
  if (entry.type !== 'array') wrongKey(key, 'an array', entry);
  return arrayLength(entry);
}
