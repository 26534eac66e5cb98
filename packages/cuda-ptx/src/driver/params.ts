import { InvalidArgumentError } from '@rayo/core';
import type { ParamInfo } from '../ptx/module.js';
import { TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES } from '../ptx/types.js';

/**
 * Kernel parameters as `cuLaunchKernel` takes them: `void *kernelParams[]`,
 * one pointer per parameter, each pointing at that parameter's value. Both
 * live in one native block:
 *
 *   [0, 8·n)        the pointer table: entry i holds base + 8·n + 8·i
 *   [8·n, 16·n)     the values: parameter i in the 8-byte slot at 8·n + 8·i,
 *                   little-endian, 32-bit values in the slot's first 4 bytes
 *   after them      tensor maps (128 bytes each, at 64-byte aligned
 *                   addresses), which entry i then points at instead
 *
 * Every slot is 8-byte aligned, which satisfies the alignment of every
 * parameter type; the driver copies each value (by the size the kernel
 * declares) when the launch is enqueued, so the block can be reused at once.
 */

/** Bytes of the block for `count` scalar parameters, or for these parameters. */
export function kernelParamBytes(params: number | readonly Pick<ParamInfo, 'type'>[]): number {
  if (typeof params === 'number') return params * 16;
  const maps = params.filter((p) => p.type === 'tensorMap').length;
  return params.length * 16 + (maps > 0 ? maps * TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN : 0);
}

/**
 * A parameter value checked against its type: numbers for 32-bit types,
 * bigints for 64-bit ones, the 128 bytes of a tensor map.
 */
export type ParamValue = number | bigint | Uint8Array;

const U32_MAX = 2 ** 32 - 1;
const I32_MIN = -(2 ** 31);
const I32_MAX = 2 ** 31 - 1;
const U64_MAX = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

function fail(kernel: string, param: ParamInfo, expected: string, actual: unknown): never {
  throw new InvalidArgumentError('kernel argument does not fit its parameter', {
    operation: kernel,
    argument: `args.${param.name}`,
    expected: `${expected} for .${param.type === 'ptr' ? 'u64 pointer' : param.type} parameter '${param.name}'`,
    actual: typeof actual === 'bigint' ? `${actual}n` : String(actual),
  });
}

/** Checks one value against its parameter and returns it in the form `writeKernelParams` takes. */
export function checkParamValue(kernel: string, param: ParamInfo, value: unknown): ParamValue {
  switch (param.type) {
    case 'u32':
      if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > U32_MAX) {
        fail(kernel, param, `an integer in [0, ${U32_MAX}]`, value);
      }
      return value;
    case 's32':
      if (typeof value !== 'number' || !Number.isInteger(value) || value < I32_MIN || value > I32_MAX) {
        fail(kernel, param, `an integer in [${I32_MIN}, ${I32_MAX}]`, value);
      }
      return value;
    case 'f32':
      if (typeof value !== 'number') fail(kernel, param, 'a number', value);
      return value;
    case 'u64':
    case 'ptr': {
      const v = toBigInt(value);
      if (v === undefined || v < 0n || v > U64_MAX)
        fail(kernel, param, 'a bigint (or safe integer) in [0, 2^64)', value);
      if (param.type === 'ptr' && v === 0n) fail(kernel, param, 'a device address, not NULL', value);
      return v;
    }
    case 's64': {
      const v = toBigInt(value);
      if (v === undefined || v < I64_MIN || v > I64_MAX)
        fail(kernel, param, 'a bigint (or safe integer) in [-2^63, 2^63)', value);
      return v;
    }
    case 'tensorMap':
      if (!(value instanceof Uint8Array) || value.byteLength !== TENSOR_MAP_BYTES) {
        fail(
          kernel,
          param,
          `a ${TENSOR_MAP_BYTES}-byte Uint8Array (an encoded tensor map)`,
          value instanceof Uint8Array ? `${value.byteLength} bytes` : value,
        );
      }
      return value;
  }
}

function toBigInt(value: unknown): bigint | undefined {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  return undefined;
}

/**
 * Writes the pointer table and the values of one launch into `block`, whose
 * first byte is at native address `base`. Values must have passed
 * `checkParamValue` for their parameters.
 */
export function writeKernelParams(
  params: readonly ParamInfo[],
  values: readonly ParamValue[],
  block: Uint8Array,
  base: bigint,
): void {
  const n = params.length;
  const bytes = kernelParamBytes(params);
  if (values.length !== n || block.byteLength < bytes) {
    throw new InvalidArgumentError('kernel parameter block does not match the parameters', {
      operation: 'writeKernelParams',
      expected: `${n} values in >= ${bytes} bytes`,
      actual: `${values.length} values in ${block.byteLength} bytes`,
    });
  }
  const view = new DataView(block.buffer, block.byteOffset, bytes);
  // Tensor maps follow the slots, from the first 64-byte aligned address.
  const align = BigInt(TENSOR_MAP_ALIGN);
  let mapAt = Number(((base + BigInt(16 * n) + align - 1n) / align) * align - base);
  for (let i = 0; i < n; i++) {
    const slot = 8 * n + 8 * i;
    if (params[i]!.type === 'tensorMap') {
      view.setBigUint64(8 * i, base + BigInt(mapAt), true);
      view.setBigUint64(slot, 0n, true);
      block.set(values[i] as Uint8Array, mapAt);
      mapAt += TENSOR_MAP_BYTES;
      continue;
    }
    view.setBigUint64(8 * i, base + BigInt(slot), true);
    // Zero the whole slot first so 32-bit values never carry stale high bytes.
    view.setBigUint64(slot, 0n, true);
    const value = values[i]!;
    switch (params[i]!.type) {
      case 'u32':
        view.setUint32(slot, value as number, true);
        break;
      case 's32':
        view.setInt32(slot, value as number, true);
        break;
      case 'f32':
        view.setFloat32(slot, value as number, true);
        break;
      case 'u64':
      case 'ptr':
        view.setBigUint64(slot, value as bigint, true);
        break;
      case 's64':
        view.setBigInt64(slot, value as bigint, true);
        break;
    }
  }
}
