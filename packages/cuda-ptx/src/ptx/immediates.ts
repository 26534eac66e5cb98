import { describeValue, misuse } from './errors.js';
import type { ScalarType } from './types.js';

const TWO = 2n;
const INT_LIMITS: Readonly<Partial<Record<ScalarType, readonly [bigint, bigint]>>> = {
  u16: [0n, TWO ** 16n - 1n],
  s16: [-(TWO ** 15n), TWO ** 15n - 1n],
  b16: [-(TWO ** 15n), TWO ** 16n - 1n],
  u32: [0n, TWO ** 32n - 1n],
  s32: [-(TWO ** 31n), TWO ** 31n - 1n],
  b32: [-(TWO ** 31n), TWO ** 32n - 1n],
  u64: [0n, TWO ** 64n - 1n],
  s64: [-(TWO ** 63n), TWO ** 63n - 1n],
  b64: [-(TWO ** 63n), TWO ** 64n - 1n],
};
const S64_MAX = TWO ** 63n - 1n;

/** The bit pattern of an f32 as PTX writes it (`0f3F800000`), exact where decimals are not. */
export function f32Literal(value: number): string {
  const view = new DataView(new ArrayBuffer(4));
  view.setFloat32(0, value);
  return `0f${view.getUint32(0).toString(16).toUpperCase().padStart(8, '0')}`;
}

/**
 * An immediate operand of PTX type `type`, range-checked. Integers print in
 * decimal; values beyond the signed 64-bit range take PTX's `U` suffix.
 */
export function formatImmediate(
  call: string,
  argument: string,
  type: ScalarType,
  value: number | bigint,
  where: string,
): string {
  if (type === 'f32') {
    if (typeof value !== 'number') {
      throw misuse(call, `an f32 immediate must be a number ${where}`, {
        argument,
        expected: 'number',
        actual: describeValue(value),
      });
    }
    return f32Literal(value);
  }
  const limits = INT_LIMITS[type];
  if (!limits) {
    throw misuse(call, `.${type} has no immediate form ${where}`, {
      argument,
      expected: `a .${type} register`,
      actual: describeValue(value),
    });
  }
  if (typeof value === 'number' && !Number.isSafeInteger(value)) {
    throw misuse(call, `a .${type} immediate must be an exact integer ${where}`, {
      argument,
      expected: 'a safe integer (or a bigint)',
      actual: describeValue(value),
    });
  }
  const v = BigInt(value);
  const [lo, hi] = limits;
  if (v < lo || v > hi) {
    throw misuse(call, `immediate out of range for .${type} ${where}`, {
      argument,
      expected: `${lo} .. ${hi}`,
      actual: String(v),
    });
  }
  return v > S64_MAX ? `0x${v.toString(16).toUpperCase()}U` : v.toString();
}

/** A 32-bit mask immediate in hex, which is how masks are read. */
export function maskLiteral(value: number): string {
  return `0x${(value >>> 0).toString(16).padStart(8, '0')}`;
}
