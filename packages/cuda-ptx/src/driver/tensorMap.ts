/**
 * Tiled tensor maps (`CUtensorMap`): what the bulk tensor copies
 * (`cp.async.bulk.tensor`, TMA) read to find a box of a tensor in global
 * memory and to lay it out in shared memory. A map is 128 opaque bytes
 * encoded on the host by `cuTensorMapEncodeTiled` and passed to a kernel by
 * value (a `tensorMap` entry parameter).
 */

/** `CUtensorMapDataType` values rayo encodes maps for. */
export const TENSOR_MAP_DTYPE = { f16: 6, f32: 7, bf16: 9 } as const;
export type TensorMapDType = keyof typeof TENSOR_MAP_DTYPE;

/** `CUtensorMapSwizzle`: the shared-memory layout of each box (swizzle.ts). */
export const TENSOR_MAP_SWIZZLE = { none: 0, '32B': 1, '64B': 2, '128B': 3 } as const;

/** `CU_TENSOR_MAP_L2_PROMOTION_L2_256B`: fetch whole 256-byte L2 sectors around each box row. */
export const TENSOR_MAP_L2_256B = 3;

/** Element bytes of each data type. */
const ELEMENT_BYTES: Readonly<Record<TensorMapDType, number>> = { f16: 2, f32: 4, bf16: 2 };

/**
 * A tiled tensor map: a tensor of `dims` elements (innermost first) at
 * `address`, each outer dimension `strides` bytes apart, copied in boxes of
 * `box` elements that land `swizzle`d in shared memory; elements outside the
 * tensor read as zero.
 */
export interface TensorMapTiled {
  readonly dtype: TensorMapDType;
  readonly address: bigint;
  /** Elements along each dimension, innermost first (1 to 5 dimensions). */
  readonly dims: readonly number[];
  /** Bytes between consecutive indices of dimensions 1 … rank − 1 (multiples of 16). */
  readonly strides: readonly number[];
  /** The box: elements along each dimension (at most 256; the inner one at most the swizzle span). */
  readonly box: readonly number[];
  readonly swizzle: keyof typeof TENSOR_MAP_SWIZZLE;
}

/** Why a tensor map cannot be encoded, or undefined when it can (the driver's documented limits). */
export function tensorMapProblem(t: TensorMapTiled): string | undefined {
  const rank = t.dims.length;
  const bytes = ELEMENT_BYTES[t.dtype];
  if (bytes === undefined) return `unknown data type ${String(t.dtype)}`;
  if (rank < 1 || rank > 5) return `rank ${rank} outside 1 .. 5`;
  if (t.strides.length !== rank - 1 || t.box.length !== rank) return 'strides or box of the wrong length';
  if (t.address % 16n !== 0n) return 'the global address is not 16-byte aligned';
  if (t.dims.some((d) => !Number.isInteger(d) || d < 1 || d > 2 ** 32))
    return 'a dimension outside 1 .. 2^32';
  if (t.strides.some((s) => !Number.isInteger(s) || s % 16 !== 0 || s <= 0 || s >= 2 ** 40)) {
    return 'a stride that is not a positive multiple of 16 below 2^40';
  }
  if (t.box.some((b) => !Number.isInteger(b) || b < 1 || b > 256)) return 'a box dimension outside 1 .. 256';
  const span = { none: 0, '32B': 32, '64B': 64, '128B': 128 }[t.swizzle];
  if (span === undefined) return `unknown swizzle ${String(t.swizzle)}`;
  if ((t.box[0]! * bytes) % 16 !== 0) return 'the inner box dimension is not a multiple of 16 bytes';
  if (span > 0 && t.box[0]! * bytes > span) return `the inner box dimension exceeds the ${t.swizzle} span`;
  return undefined;
}
