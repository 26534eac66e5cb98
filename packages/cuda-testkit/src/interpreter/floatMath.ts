import { bitsToF32, f32ToBits } from '../floatBits.js';

// f32, f16 and bf16 rounding as PTX defines it: every rounding mode, fma, ftz and saturation.

const MIN_NORMAL_F32 = 2 ** -126;
const MAX_F32 = bitsToF32(0x7f7fffff);

/** Subnormals to zero of the same sign. */
export function flush(x: number): number {
  return x !== 0 && Math.abs(x) < MIN_NORMAL_F32 ? (x < 0 ? -0 : 0) : x;
}

/** [0, 1], NaN to 0. */
export function saturate(x: number): number {
  return x > 0 ? Math.min(x, 1) : 0;
}

/** The f32 next to finite `x` toward +inf (`up`) or -inf. */
function nextF32(x: number, up: boolean): number {
  if (x === 0) return up ? 2 ** -149 : -(2 ** -149);
  const bits = f32ToBits(x);
  return bitsToF32(x > 0 === up ? bits + 1 : bits - 1);
}

export type FloatRounding = 'rn' | 'rz' | 'rm' | 'rp';

/** How an exact result relates to its double approximation, for directed rounding. */
export const SUM = 0;
export const PRODUCT = 1;
export const QUOTIENT = 2;
export const ROOT = 3;
type ResultKind = typeof SUM | typeof PRODUCT | typeof QUOTIENT | typeof ROOT;

/**
 * Sign of (exact - v) for v an f32 or the midpoint of two: for a sum,
 * exact = approx + err; a product is exact in a double; a quotient x / y and
 * a root sqrt(x) are compared through v·y and v·v, exact in a double.
 */
function residual(kind: ResultKind, approx: number, err: number, x: number, y: number, v: number): number {
  switch (kind) {
    case SUM:
      return Math.sign(approx - v + err);
    case PRODUCT:
      return Math.sign(approx - v);
    case QUOTIENT:
      return Math.sign(x - v * y) * Math.sign(y);
    default:
      return Math.sign(x - v * v);
  }
}

/** The f32 rounding under `mode` of an exact result known by its double approximation. */
export function roundF32(
  approx: number,
  mode: FloatRounding,
  kind: ResultKind,
  err: number,
  x: number,
  y: number,
): number {
  // Zero, infinities and NaN are exact here: f32 operands cannot underflow or overflow a double.
  if (approx === 0 || !Number.isFinite(approx)) return approx;
  const r = Math.fround(approx);
  if (!Number.isFinite(r)) {
    const up = mode === 'rn' || (mode === 'rp' && r > 0) || (mode === 'rm' && r < 0);
    return up ? r : Math.sign(r) * MAX_F32;
  }
  const c = residual(kind, approx, err, x, y, r);
  if (c === 0) return r;
  const other = nextF32(r, c > 0);
  if (mode === 'rn') {
    const m = residual(kind, approx, err, x, y, (r + other) / 2);
    if (m === 0) return (f32ToBits(r) & 1) === 0 ? r : other;
    return m === c ? other : r;
  }
  const lo = c > 0 ? r : other;
  const hi = c > 0 ? other : r;
  if (mode === 'rm') return lo;
  if (mode === 'rp') return hi;
  return Math.abs(lo) < Math.abs(hi) ? lo : hi;
}

/** The rounding error of s = fl(a + b): a + b = s + err exactly. */
export function sumError(a: number, b: number, s: number): number {
  const bb = s - a;
  return a - (s - bb) + (b - bb);
}

/*
 * fma.rn.f32: a·b is exact in a double, so s = fl(a·b + c) has one rounding;
 * rounding s to f32 is then wrong only where s lies exactly halfway between
 * two f32 (r and o below), and the error of the sum says which way the exact
 * value lies. Block code inlines the common path (FMA_JS) and calls fmaTie.
 */
export function fmaF32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const r = Math.fround(s);
  const o = r + 2 * (s - r);
  return r !== s && r - r === 0 && Math.fround(o) === o ? fmaTie(p, c, s, r, o) : r;
}

export function fmaTie(p: number, c: number, s: number, r: number, o: number): number {
  const err = sumError(p, c, s);
  if (err === 0) return r;
  return err > 0 === o > r ? o : r;
}

/** JS for `f[d] = fma(f[a], f[b], f[c])`, as fmaF32. */
export function fmaJs(d: number, a: number, b: number, c: number): string {
  return `{ const c = f[${c}], p = f[${a}] * f[${b}], s = p + c, r = Math.fround(s), o = r + 2 * (s - r); f[${d}] = r !== s && r - r === 0 && Math.fround(o) === o ? fmaTie(p, c, s, r, o) : r; }`;
}

interface FloatFormat {
  readonly precision: number;
  readonly minExp: number;
  readonly maxExp: number;
}
export const F16: FloatFormat = { precision: 11, minExp: -14, maxExp: 15 };
export const BF16: FloatFormat = { precision: 8, minExp: -126, maxExp: 127 };
export const F32_FORMAT: FloatFormat = { precision: 24, minExp: -126, maxExp: 127 };

/** `x` (exact in a double) rounded to `format` under `mode`; ±Infinity past its range. */
export function roundToFormat(x: number, format: FloatFormat, mode: FloatRounding): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const ax = Math.abs(x);
  let e = Math.floor(Math.log2(ax));
  if (2 ** e > ax) e--;
  else if (2 ** (e + 1) <= ax) e++;
  const quantum = 2 ** (Math.max(e, format.minExp) - (format.precision - 1));
  const scaled = ax / quantum;
  let n = Math.floor(scaled);
  const frac = scaled - n;
  if (frac !== 0) {
    const away =
      mode === 'rn'
        ? frac > 0.5 || (frac === 0.5 && n % 2 === 1)
        : mode === 'rp'
          ? x > 0
          : mode === 'rm' && x < 0;
    if (away) n++;
  }
  let value = n * quantum;
  const max = (2 - 2 ** (1 - format.precision)) * 2 ** format.maxExp;
  if (value > max) {
    const toInfinity = mode === 'rn' || (mode === 'rp' && x > 0) || (mode === 'rm' && x < 0);
    value = toInfinity ? Number.POSITIVE_INFINITY : max;
  }
  return x < 0 ? -value : value;
}

/** A 64-bit integer as a double rounded to odd: rounding that to 24 bits or fewer is then correct. */
export function bigToDoubleRoundOdd(v: bigint): number {
  const negative = v < 0n;
  const a = negative ? -v : v;
  const shift = a.toString(2).length - 53;
  if (shift <= 0) return Number(v);
  let top = a >> BigInt(shift);
  if (top << BigInt(shift) !== a) top |= 1n;
  const value = Number(top) * 2 ** shift;
  return negative ? -value : value;
}

/** Bits of a value representable in f16 (or ±Infinity, NaN). */
export function numberToF16(value: number): number {
  if (Number.isNaN(value)) return 0x7fff;
  const sign = value < 0 || Object.is(value, -0) ? 0x8000 : 0;
  const a = Math.abs(value);
  if (a === Number.POSITIVE_INFINITY) return sign | 0x7c00;
  if (a < 2 ** -14) return sign | (a * 2 ** 24);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  return sign | ((e + 15) << 10) | ((a / 2 ** e - 1) * 1024);
}

/** Bits of a value representable in bf16 (or ±Infinity, NaN). */
export function numberToBf16(value: number): number {
  return Number.isNaN(value) ? 0x7fff : f32ToBits(value) >>> 16;
}

export type IntRounding = 'rni' | 'rzi' | 'rmi' | 'rpi';

export function roundIntegral(x: number, mode: IntRounding): number {
  switch (mode) {
    case 'rni':
      // Math.round breaks ties upward; PTX breaks them to even.
      return x - Math.floor(x) === 0.5 ? 2 * Math.round(x / 2) : Math.round(x);
    case 'rzi':
      return Math.trunc(x);
    case 'rmi':
      return Math.floor(x);
    default:
      return Math.ceil(x);
  }
}
