import { TENSOR_MAP_DTYPE, TENSOR_MAP_SWIZZLE, type TensorMapTiled } from '@rayo/cuda-ptx';

/**
 * The fake driver's own encoding of a tiled tensor map into its 128 bytes
 * (the real one is opaque): a marker, then the fields, which the PTX
 * interpreter decodes for `cp.async.bulk.tensor`.
 *
 *   0 marker   4 data type   8 rank   12 swizzle   16 address (u64)
 *   24 dims (5 × u64)   64 strides (4 × u64)   96 box (5 × u32)
 */
const MARKER = 0x70a7_3a9d;

const DTYPE_OF_CODE = new Map(Object.entries(TENSOR_MAP_DTYPE).map(([k, v]) => [v, k] as const));
const SWIZZLE_OF_CODE = new Map(Object.entries(TENSOR_MAP_SWIZZLE).map(([k, v]) => [v, k] as const));

export function encodeFakeTensorMap(t: TensorMapTiled): Uint8Array {
  const bytes = new Uint8Array(128);
  const v = new DataView(bytes.buffer);
  v.setUint32(0, MARKER, true);
  v.setUint32(4, TENSOR_MAP_DTYPE[t.dtype], true);
  v.setUint32(8, t.dims.length, true);
  v.setUint32(12, TENSOR_MAP_SWIZZLE[t.swizzle], true);
  v.setBigUint64(16, t.address, true);
  t.dims.forEach((d, i) => {
    v.setBigUint64(24 + 8 * i, BigInt(d), true);
  });
  t.strides.forEach((s, i) => {
    v.setBigUint64(64 + 8 * i, BigInt(s), true);
  });
  t.box.forEach((b, i) => {
    v.setUint32(96 + 4 * i, b, true);
  });
  return bytes;
}

/** The map `encodeFakeTensorMap` wrote, or undefined for bytes it did not write. */
export function decodeFakeTensorMap(bytes: Uint8Array): TensorMapTiled | undefined {
  if (bytes.byteLength < 128) return undefined;
  const v = new DataView(bytes.buffer, bytes.byteOffset, 128);
  if (v.getUint32(0, true) !== MARKER) return undefined;
  const dtype = DTYPE_OF_CODE.get(v.getUint32(4, true) as never);
  const swizzle = SWIZZLE_OF_CODE.get(v.getUint32(12, true) as never);
  const rank = v.getUint32(8, true);
  if (dtype === undefined || swizzle === undefined || rank < 1 || rank > 5) return undefined;
  const range = (n: number) => Array.from({ length: n }, (_, i) => i);
  return {
    dtype: dtype as TensorMapTiled['dtype'],
    swizzle: swizzle as TensorMapTiled['swizzle'],
    address: v.getBigUint64(16, true),
    dims: range(rank).map((i) => Number(v.getBigUint64(24 + 8 * i, true))),
    strides: range(rank - 1).map((i) => Number(v.getBigUint64(64 + 8 * i, true))),
    box: range(rank).map((i) => v.getUint32(96 + 4 * i, true)),
  };
}
