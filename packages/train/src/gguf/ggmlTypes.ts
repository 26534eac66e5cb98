import { InvalidArgumentError } from '@rayo/core';

/**
 * ggml's tensor types by their numeric id in a GGUF tensor info, with the
 * block each packs: `blockSize` elements in `blockBytes` bytes. A row
 * (`dims[0]` elements) is a whole number of blocks. Ids 4, 5 and 31–33 were
 * removed from ggml and are absent here; the i-quants are listed so that a
 * file holding them opens and names them, though none of them is decoded.
 */
export const GGML_TYPES = {
  F32: { id: 0, blockSize: 1, blockBytes: 4 },
  F16: { id: 1, blockSize: 1, blockBytes: 2 },
  Q4_0: { id: 2, blockSize: 32, blockBytes: 18 },
  Q4_1: { id: 3, blockSize: 32, blockBytes: 20 },
  Q5_0: { id: 6, blockSize: 32, blockBytes: 22 },
  Q5_1: { id: 7, blockSize: 32, blockBytes: 24 },
  Q8_0: { id: 8, blockSize: 32, blockBytes: 34 },
  Q8_1: { id: 9, blockSize: 32, blockBytes: 36 },
  Q2_K: { id: 10, blockSize: 256, blockBytes: 84 },
  Q3_K: { id: 11, blockSize: 256, blockBytes: 110 },
  Q4_K: { id: 12, blockSize: 256, blockBytes: 144 },
  Q5_K: { id: 13, blockSize: 256, blockBytes: 176 },
  Q6_K: { id: 14, blockSize: 256, blockBytes: 210 },
  Q8_K: { id: 15, blockSize: 256, blockBytes: 292 },
  IQ2_XXS: { id: 16, blockSize: 256, blockBytes: 66 },
  IQ2_XS: { id: 17, blockSize: 256, blockBytes: 74 },
  IQ3_XXS: { id: 18, blockSize: 256, blockBytes: 98 },
  IQ1_S: { id: 19, blockSize: 256, blockBytes: 50 },
  IQ4_NL: { id: 20, blockSize: 32, blockBytes: 18 },
  IQ3_S: { id: 21, blockSize: 256, blockBytes: 110 },
  IQ2_S: { id: 22, blockSize: 256, blockBytes: 82 },
  IQ4_XS: { id: 23, blockSize: 256, blockBytes: 136 },
  I8: { id: 24, blockSize: 1, blockBytes: 1 },
  I16: { id: 25, blockSize: 1, blockBytes: 2 },
  I32: { id: 26, blockSize: 1, blockBytes: 4 },
  I64: { id: 27, blockSize: 1, blockBytes: 8 },
  F64: { id: 28, blockSize: 1, blockBytes: 8 },
  IQ1_M: { id: 29, blockSize: 256, blockBytes: 56 },
  BF16: { id: 30, blockSize: 1, blockBytes: 2 },
} as const;

export type GgmlType = keyof typeof GGML_TYPES;

/** The float types a loader uploads as they are (or converts between on the host). */
export type GgmlFloatType = 'F32' | 'F16' | 'BF16';

/**
 * The block-quantized types rayo reads: a Q4_K_M file mixes Q4_K and Q6_K,
 * a Q5_K_M file Q5_K and Q6_K, and both fall back to Q5_0, Q5_1 or Q8_0
 * for rows that do not divide into 256-blocks; Q4_1 and Q5_1 fill older files.
 */
export const GGML_QUANTIZED_TYPES = ['Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q4_K', 'Q5_K', 'Q6_K'] as const;
export type GgmlQuantizedType = (typeof GGML_QUANTIZED_TYPES)[number];

const BY_ID = new Map<number, GgmlType>(
  Object.entries(GGML_TYPES).map(([name, t]) => [t.id, name as GgmlType]),
);

/** The type of a numeric id, or undefined for an id ggml does not define. */
export function ggmlTypeOfId(id: number): GgmlType | undefined {
  return BY_ID.get(id);
}

export function isGgmlFloatType(type: GgmlType): type is GgmlFloatType {
  return type === 'F32' || type === 'F16' || type === 'BF16';
}

export function isGgmlQuantizedType(type: GgmlType): type is GgmlQuantizedType {
  return (GGML_QUANTIZED_TYPES as readonly string[]).includes(type);
}

/**
 * Bytes of a tensor of `type` with `dims` (innermost first): rows of
 * `dims[0]` elements, each a whole number of blocks. A row that does not
 * divide into blocks is an InvalidArgumentError naming `what`.
 */
export function ggmlTensorBytes(type: GgmlType, dims: readonly number[], what: string): number {
  const { blockSize, blockBytes } = GGML_TYPES[type];
  const row = dims[0] ?? 1;
  if (row % blockSize !== 0) {
    throw new InvalidArgumentError(`tensor '${what}' has rows that do not divide into ${type} blocks`, {
      operation: 'gguf',
      argument: what,
      expected: `a row length (dims[0]) that is a multiple of ${blockSize}`,
      actual: `${row}`,
    });
  }
  let elements = 1;
  for (const d of dims) elements *= d;
  return (elements / blockSize) * blockBytes;
}

/** How many whole blocks of `type` `count` bytes or values make; otherwise an InvalidArgumentError for `kernel`. */
export function wholeBlocks(type: GgmlType, count: number, unit: 'bytes' | 'values', kernel: string): number {
  const { blockSize, blockBytes } = GGML_TYPES[type];
  const per = unit === 'bytes' ? blockBytes : blockSize;
  if (count % per !== 0) {
    throw new InvalidArgumentError(`${type} takes whole blocks of ${per} ${unit}`, {
      operation: kernel,
      argument: unit,
      expected: `a multiple of ${per} ${unit}`,
      actual: `${count}`,
    });
  }
  return count / per;
}
