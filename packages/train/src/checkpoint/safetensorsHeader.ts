import { type DType, RayoError, type Shape, sizeOf } from '@rayo/core';

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

export function failSafetensors(message: string, expected: string, actual: string): never {
  throw new RayoError(message, { operation: 'safetensors', expected, actual });
}

/** The JSON header's length from the first 8 bytes of a file of `fileBytes` bytes. */
export function headerLengthOf(first8: Uint8Array, fileBytes: number): number {
  if (first8.length < 8 || fileBytes < 8)
    failSafetensors('file too short for a header length', 'at least 8 bytes', `${fileBytes}`);
  const length = Number(new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true));
  if (length > MAX_HEADER_BYTES || 8 + length > fileBytes) {
    failSafetensors(
      'header length out of range',
      `at most ${Math.min(MAX_HEADER_BYTES, fileBytes - 8)}`,
      `${length}`,
    );
  }
  return length;
}

/**
 * Parses and validates a JSON header against a data section of `dataBytes`
 * bytes: known dtypes, valid shapes, offsets that fit dtype and shape, and
 * data covered exactly, without holes or overlaps.
 */
export function parseSafetensorsHeader(json: Uint8Array, dataBytes: number): SafetensorsHeader {
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder().decode(json));
  } catch (error) {
    failSafetensors('header is not JSON', 'a JSON object', (error as Error).message);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    failSafetensors('header is not a JSON object', 'an object', typeof header);
  }
  const metadata: Record<string, string> = {};
  const entries = new Map<string, SafetensorsEntry>();
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === METADATA) {
      for (const [k, v] of Object.entries((raw ?? {}) as Record<string, unknown>)) {
        if (typeof v !== 'string') failSafetensors(`metadata '${k}' is not a string`, 'a string', typeof v);
        metadata[k] = v;
      }
      continue;
    }
    const { dtype: format, shape, data_offsets: offsets } = (raw ?? {}) as Record<string, unknown>;
    const known = typeof format === 'string' ? FORMATS[format] : undefined;
    if (!known) {
      failSafetensors(
        `tensor '${name}' has an unsupported dtype`,
        Object.keys(FORMATS).join(' | '),
        String(format),
      );
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
      failSafetensors(
        `tensor '${name}' has an invalid shape`,
        'an array of non-negative integers',
        JSON.stringify(shape),
      );
    }
    if (
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !offsets.every((o) => Number.isInteger(o) && o >= 0)
    ) {
      failSafetensors(`tensor '${name}' has invalid data_offsets`, '[begin, end]', JSON.stringify(offsets));
    }
    const [begin, end] = offsets as [number, number];
    const byteLength = sizeOf(shape as number[]) * known.bytes;
    if (end - begin !== byteLength || end > dataBytes) {
      failSafetensors(
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
      failSafetensors(
        `tensor '${name}' does not start where the previous one ends`,
        `${covered}`,
        `${begin}`,
      );
    covered = end;
  }
  if (covered !== dataBytes)
    failSafetensors('the data has bytes no tensor owns', `${covered} bytes`, `${dataBytes}`);
  return { entries, metadata, dataStart: 8 + json.length };
}
