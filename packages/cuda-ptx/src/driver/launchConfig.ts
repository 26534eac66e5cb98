import type { Dim3Tuple } from './device.js';

// The native block `cuLaunchKernelEx` reads (cuda.h, x86-64 and aarch64
// layouts): a CUlaunchConfig followed by the one CUlaunchAttribute it points
// at, programmatic stream serialization. The attribute never changes; each
// launch rewrites the grid, block, shared bytes and stream.
//
// CUlaunchConfig: gridDimX/Y/Z, blockDimX/Y/Z, sharedMemBytes (u32 each, 0–27),
// hStream (pointer at 32), attrs (pointer at 40), numAttrs (u32 at 48); 56 bytes.
// CUlaunchAttribute: id (u32), 4 bytes of padding, a 64-byte value union; 72 bytes.

const STREAM_OFFSET = 32;
const ATTRS_OFFSET = 40;
const NUM_ATTRS_OFFSET = 48;
/** Where the attribute starts: after the 56-byte config, 8-byte aligned. */
const ATTRIBUTE_OFFSET = 64;
const ATTRIBUTE_BYTES = 72;
export const LAUNCH_CONFIG_BYTES = ATTRIBUTE_OFFSET + ATTRIBUTE_BYTES;
/** CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION. */
export const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

/** Writes the constant part: one attribute, programmatic stream serialization allowed. */
export function writeDependentLaunchAttribute(bytes: Uint8Array, address: bigint): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, LAUNCH_CONFIG_BYTES);
  bytes.fill(0, 0, LAUNCH_CONFIG_BYTES);
  view.setBigUint64(ATTRS_OFFSET, address + BigInt(ATTRIBUTE_OFFSET), true);
  view.setUint32(NUM_ATTRS_OFFSET, 1, true);
  view.setUint32(ATTRIBUTE_OFFSET, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, true);
  // value.programmaticStreamSerializationAllowed (an int at the union's start).
  view.setInt32(ATTRIBUTE_OFFSET + 8, 1, true);
}

/** Writes one launch's grid, block, dynamic shared bytes and stream. */
export function writeLaunchDims(
  bytes: Uint8Array,
  grid: Dim3Tuple,
  block: Dim3Tuple,
  sharedBytes: number,
  stream: bigint,
): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, LAUNCH_CONFIG_BYTES);
  for (let i = 0; i < 3; i++) {
    view.setUint32(4 * i, grid[i]!, true);
    view.setUint32(12 + 4 * i, block[i]!, true);
  }
  view.setUint32(24, sharedBytes, true);
  view.setBigUint64(STREAM_OFFSET, stream, true);
}
