import { bf16ToNumber, f32ToBits } from './floatBits.js';

// fma.rn.bf16x2: each 16-bit half of the registers is a bf16, and each half's
// a · b + c is rounded once to bf16 (nearest, ties to even), as the hardware
// does. The product of two bf16 is exact in a double; the sum may not be, so
// its error (two-sum) breaks the ties the double's rounding could invent.

/** The canonical NaN bf16 arithmetic returns. */
const BF16_NAN = 0x7fff;

/** The bf16 bits of `value + error` rounded to nearest even, `error` far below `value`'s last bit. */
function roundToBf16(value: number, error: number): number {
  if (Number.isNaN(value)) return BF16_NAN;
  if (value === 0 || !Number.isFinite(value)) return f32ToBits(value) >>> 16;
  let exponent = Math.floor(Math.log2(Math.abs(value)));
  if (2 ** exponent > Math.abs(value)) exponent -= 1;
  if (2 ** (exponent + 1) <= Math.abs(value)) exponent += 1;
  // 8 significant bits; below 2^-126 the quantum stays that of the subnormals.
  const quantum = 2 ** (Math.max(exponent, -126) - 7);
  const scaled = value / quantum;
  const floor = Math.floor(scaled);
  const fraction = scaled - floor;
  const up = fraction > 0.5 || (fraction === 0.5 && (error === 0 ? floor % 2 !== 0 : error > 0));
  const rounded = (up ? floor + 1 : floor) * quantum;
  // Exact in f32 (or past its range, where it becomes ±∞ as bf16 does).
  return f32ToBits(rounded === 0 ? value * 0 : rounded) >>> 16;
}

/** One half: bf16 bits a · b + c. */
export function fmaBf16(a: number, b: number, c: number): number {
  const x = bf16ToNumber(a);
  const y = bf16ToNumber(b);
  const z = bf16ToNumber(c);
  const product = x * y;
  const sum = product + z;
  if (!Number.isFinite(sum)) return Number.isNaN(sum) ? BF16_NAN : f32ToBits(sum) >>> 16;
  const back = sum - product;
  const error = product - (sum - back) + (z - back);
  return roundToBf16(sum, error);
}

/** `fma.rn.bf16x2` on the 32-bit words a, b, c. */
export function fmaBf16x2(a: number, b: number, c: number): number {
  const lo = fmaBf16(a & 0xffff, b & 0xffff, c & 0xffff);
  const hi = fmaBf16(a >>> 16, b >>> 16, c >>> 16);
  return ((hi << 16) | lo) >>> 0;
}
