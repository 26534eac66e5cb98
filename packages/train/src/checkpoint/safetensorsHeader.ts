import { type DType, InvalidArgumentError, type Shape, sizeOf } from '@rayo/core';
import { duplicateJsonKey } from '../io/duplicateJsonKey.js';

/** Element width of every dtype the format defines, and the rayo dtype where there is one. */
const FORMATS: Readonly<Record<string, { readonly bytes: number; readonly dtype?: DType }>> = {
  F64: { bytes: 8 },
  F32: { bytes: 4, dtype: 'f32' },
  F16: { bytes: 2, dtype: 'f16' },
  BF16: { bytes: 2, dtype: 'bf16' },
  I64: { bytes: 8 },
  I32: { bytes: 4, dtype: 'i32' },
  U32: { bytes: 4, dtype: 'u32' },
  I16: { bytes: 2 },
  U16: { bytes: 2 },
  I8: { bytes: 1 },
  U8: { bytes: 1 },
  BOOL: { bytes: 1 },
  F8_E4M3: { bytes: 1 },
  F8_E5M2: { bytes: 1 },
  U64: { bytes: 8 },
};

/** The Rust reference refuses headers above 100 MB. */
export const MAX_HEADER_BYTES = 100_000_000;
const METADATA = '__metadata__';

/** One tensor of a safetensors header: where its bytes lie in the data section. */
export interface SafetensorsEntry {
  readonly name: string;
  /** The format's dtype name, e.g. `F32`, `BF16`. */
  readonly format: string;
  /** The rayo dtype of `format`, where rayo has one. */
  readonly dtype: DType | undefined;
  readonly shape: Shape;
  /** Byte offsets into the data section (after the header). */
  readonly begin: number;
  readonly end: number;
}

export interface SafetensorsHeader {
  readonly entries: ReadonlyMap<string, SafetensorsEntry>;
  readonly metadata: Record<string, string>;
  /** Bytes before the data section: the 8-byte length and the JSON header. */
  readonly dataStart: number;
}

/** A refusal of a safetensors file, naming it (`source`) where it came from one. */
export function failSafetensors(message: string, expected: string, actual: string, source?: string): never {
  throw new InvalidArgumentError(message, { operation: 'safetensors', argument: source, expected, actual });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The JSON header's length from the first 8 bytes of a file of `fileBytes` bytes (`source` names it). */
export function headerLengthOf(first8: Uint8Array, fileBytes: number, source?: string): number {
  if (first8.length < 8 || fileBytes < 8)
    failSafetensors('file too short for a header length', 'at least 8 bytes', `${fileBytes}`, source);
  const length = Number(new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true));
  if (length > MAX_HEADER_BYTES || 8 + length > fileBytes) {
    failSafetensors(
      'header length out of range',
      `at most ${Math.min(MAX_HEADER_BYTES, fileBytes - 8)}`,
      `${length}`,
      source,
    );
  }
  return length;
}

/**
 * Parses and validates a JSON header against a data section of `dataBytes`
 * bytes: keys that appear once, known dtypes, valid shapes, offsets that fit
 * dtype and shape, and data covered exactly, without holes or overlaps.
 * Errors name `source` (the file) where given.
 */
export function parseSafetensorsHeader(
  json: Uint8Array,
  dataBytes: number,
  source?: string,
): SafetensorsHeader {
  const fail: (message: string, expected: string, actual: string) => never = (message, expected, actual) =>
    failSafetensors(message, expected, actual, source);
  let text = '';
  let header: unknown;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(json);
    header = JSON.parse(text);
  } catch (error) {
    fail('header is not UTF-8 JSON', 'a UTF-8 JSON object', (error as Error).message);
  }
  if (!isObject(header))
    fail('header is not a JSON object', 'an object', JSON.stringify(header)?.slice(0, 80));
  const duplicate = duplicateJsonKey(text);
  if (duplicate)
    fail(
      `header key '${duplicate.key}' appears twice${duplicate.path ? ` in '${duplicate.path}'` : ''}`,
      'each tensor and metadata key once',
      `'${duplicate.key}' twice`,
    );
  const metadata: Record<string, string> = {};
  const entries = new Map<string, SafetensorsEntry>();
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === METADATA) {
      if (!isObject(raw)) fail(`'${METADATA}' is not an object`, 'string keys to string values', typeof raw);
      for (const [k, v] of Object.entries(raw)) {
        if (typeof v !== 'string') fail(`metadata '${k}' is not a string`, 'a string', typeof v);
        metadata[k] = v;
      }
      continue;
    }
    if (!isObject(raw))
      fail(`tensor '${name}' is not an object`, '{ dtype, shape, data_offsets }', typeof raw);
    const { dtype: format, shape, data_offsets: offsets } = raw;
    const known = typeof format === 'string' && Object.hasOwn(FORMATS, format) ? FORMATS[format] : undefined;
    if (!known) {
      fail(`tensor '${name}' has an unsupported dtype`, Object.keys(FORMATS).join(' | '), String(format));
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      fail(
        `tensor '${name}' has an invalid shape`,
        'an array of non-negative integers',
        JSON.stringify(shape),
      );
    }
    if (
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)
    ) {
      fail(`tensor '${name}' has invalid data_offsets`, '[begin, end]', JSON.stringify(offsets));
    }
    const [begin, end] = offsets as [number, number];
    const byteLength = sizeOf(shape as number[]) * known.bytes;
    if (end - begin !== byteLength || end > dataBytes) {
      fail(
        `tensor '${name}' data_offsets do not fit its dtype and shape`,
        `${byteLength} bytes within ${dataBytes}`,
        `[${begin}, ${end}]`,
      );
    }
    entries.set(name, {
      name,
      format: format as string,
      dtype: known.dtype,
      shape: shape as number[],
      begin,
      end,
    });
  }
  const spans = [...entries.values()].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let covered = 0;
  for (const { begin, end, name } of spans) {
    if (begin !== covered)
      fail(`tensor '${name}' does not start where the previous one ends`, `${covered}`, `${begin}`);
    covered = end;
  }
  if (covered !== dataBytes) fail('the data has bytes no tensor owns', `${covered} bytes`, `${dataBytes}`);
  return { entries, metadata, dataStart: 8 + json.length };
}
