/** Element types a tensor can hold. Kernels declare which ones they accept. */
export type DType = 'f32' | 'f16' | 'bf16' | 'i32' | 'u32';

/** Host-side storage of a tensor's elements: f16 and bf16 travel as raw 16-bit words. */
export type HostArray = Float32Array | Int32Array | Uint32Array | Uint16Array;

export const DTYPES: readonly DType[] = ['f32', 'f16', 'bf16', 'i32', 'u32'];

const BYTES: Record<DType, number> = { f32: 4, f16: 2, bf16: 2, i32: 4, u32: 4 };

export function isDType(value: unknown): value is DType {
  return typeof value === 'string' && (DTYPES as readonly string[]).includes(value);
}

export function bytesPerElement(dtype: DType): number {
  return BYTES[dtype];
}

/** A zero-filled host array of the right class for `dtype`. */
export function allocHost(dtype: DType, length: number): HostArray {
  switch (dtype) {
    case 'f32':
      return new Float32Array(length);
    case 'i32':
      return new Int32Array(length);
    case 'u32':
      return new Uint32Array(length);
    case 'f16':
    case 'bf16':
      return new Uint16Array(length);
  }
}

/** Whether `data` is the host array class that stores `dtype`. */
export function hostArrayMatches(dtype: DType, data: HostArray): boolean {
  switch (dtype) {
    case 'f32':
      return data instanceof Float32Array;
    case 'i32':
      return data instanceof Int32Array;
    case 'u32':
      return data instanceof Uint32Array;
    case 'f16':
    case 'bf16':
      return data instanceof Uint16Array;
  }
}

/** Converts numbers to the host array of `dtype`, rounding f16/bf16 to nearest even. */
export function toHostArray(dtype: DType, values: ArrayLike<number>): HostArray {
  const out = allocHost(dtype, values.length);
  if (isHalf(dtype) && values instanceof Float32Array) {
    // Every value is an f32: round from the bits, read through a word view.
    const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
    if (dtype === 'f16') for (let i = 0; i < bits.length; i++) out[i] = f16FromF32Bits(bits[i]!);
    else for (let i = 0; i < bits.length; i++) out[i] = bf16FromF32Bits(bits[i]!);
  } else if (dtype === 'f16') {
    for (let i = 0; i < values.length; i++) out[i] = f32ToF16Bits(values[i]!);
  } else if (dtype === 'bf16') {
    for (let i = 0; i < values.length; i++) out[i] = f32ToBf16Bits(values[i]!);
  } else {
    // The same conversion as element by element (rounding to f32, ToInt32, ToUint32), done natively.
    out.set(values);
  }
  return out;
}

/** Reads a host array as numbers, decoding f16/bf16 words. */
export function toNumbers(dtype: DType, data: HostArray): Float64Array {
  const out = new Float64Array(data.length);
  if (dtype === 'f16') for (let i = 0; i < data.length; i++) out[i] = f16BitsToF32(data[i]!);
  else if (dtype === 'bf16') for (let i = 0; i < data.length; i++) out[i] = bf16BitsToF32(data[i]!);
  else for (let i = 0; i < data.length; i++) out[i] = data[i]!;
  return out;
}

/** A 16-bit float format: sign, `exponentBits` and `mantissaBits`. */
interface HalfFormat {
  readonly mantissaBits: number;
  readonly quietNaN: number;
  /** The exponent's bias, 2^(exponentBits - 1) - 1. */
  readonly bias: number;
  /** The exponent field of Inf and NaN, 2^exponentBits - 1. */
  readonly maxField: number;
  /** 2^(bias - 1 + mantissaBits): a value below the smallest normal times this counts subnormal steps. */
  readonly subnormalSteps: number;
}

function halfFormat(exponentBits: number, mantissaBits: number, quietNaN: number): HalfFormat {
  const bias = 2 ** (exponentBits - 1) - 1;
  return {
    mantissaBits,
    quietNaN,
    bias,
    maxField: 2 ** exponentBits - 1,
    subnormalSteps: 2 ** (bias - 1 + mantissaBits),
  };
}

const F16 = halfFormat(5, 10, 0x7e00);
const BF16 = halfFormat(8, 7, 0x7fc0);

/** Rounds a non-negative number to an integer, ties to even. */
function roundHalfEven(v: number): number {
  const floor = Math.floor(v);
  const rest = v - floor;
  return rest > 0.5 || (rest === 0.5 && floor % 2 === 1) ? floor + 1 : floor;
}

// The double's two 32-bit words. The conformance references encode every
// half element through here, so the exponent and the rounding are read from
// the bits rather than found with Math.log2 and powers of two.
const f64 = new Float64Array(1);
const f64Words = new Uint32Array(f64.buffer);
const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const HIGH = littleEndian ? 1 : 0;
const LOW = 1 - HIGH;

/**
 * The nearest `format` word to a number, ties to even, from the double itself
 * (rounding to f32 first would round twice). Overflow gives ±Inf, values
 * below the smallest subnormal's half give ±0, NaN gives the quiet NaN.
 */
function encodeHalf(value: number, format: HalfFormat): number {
  if (Number.isNaN(value)) return format.quietNaN;
  f64[0] = value;
  const high = f64Words[HIGH]!;
  const sign = (high >>> 16) & 0x8000;
  const { mantissaBits, bias, maxField } = format;
  const inf = sign | (maxField << mantissaBits);
  const exponent = ((high >>> 20) & 0x7ff) - 1023;
  if (exponent === 1024) return inf;
  // Subnormals (and the carry into the smallest normal) are multiples of one
  // step; scaling by a power of two is exact.
  if (exponent < 1 - bias) return sign | roundHalfEven(Math.abs(value) * format.subnormalSteps);
  const field = exponent + bias;
  if (field >= maxField) return inf;
  // The double's 52 fraction bits: the top 20 in the high word, which hold the
  // kept mantissa and the round bit; the rest only decide ties.
  const fraction = high & 0xfffff;
  const dropped = 20 - mantissaBits;
  const half = 1 << (dropped - 1);
  const rest = fraction & ((1 << dropped) - 1);
  let mantissa = fraction >>> dropped;
  if (rest > half || (rest === half && (f64Words[LOW] !== 0 || (mantissa & 1) === 1))) mantissa++;
  // A mantissa rounded up to 2^mantissaBits carries into the exponent (Inf past the largest).
  const word = (field << mantissaBits) + mantissa;
  return word >= maxField << mantissaBits ? inf : sign | word;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

// Values that are f32 already (numbers read from a Float32Array, the usual
// case) round from the f32's bits with integer steps, which is rounding once
// and several times faster than reading the double; other numbers take
// `encodeHalf`.

/** The nearest bf16 word to the f32 whose bits are `bits`, ties to even. */
function bf16FromF32Bits(bits: number): number {
  if ((bits & 0x7f800000) === 0x7f800000) return bits & 0x7fffff ? BF16.quietNaN : bits >>> 16;
  // A carry out of the mantissa steps the exponent (to Inf past the largest bf16).
  return (bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16;
}

/** The nearest f16 word to the f32 whose bits are `bits`, ties to even. */
function f16FromF32Bits(bits: number): number {
  const sign = (bits >>> 16) & 0x8000;
  const magnitude = bits & 0x7fffffff;
  // f16's normal range [2^-14, 2^16): drop 13 bits, rounding to even; a carry
  // steps the exponent (to Inf from 65520 on); 112 = 127 − 15 rebiases it.
  if (magnitude >= 0x38800000 && magnitude < 0x47800000) {
    return sign | (((magnitude + 0xfff + ((magnitude >>> 13) & 1)) >>> 13) - (112 << 10));
  }
  const exponent = (bits >>> 23) & 0xff;
  const mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return mantissa ? F16.quietNaN : sign | 0x7c00;
  if (magnitude >= 0x47800000) return sign | 0x7c00;
  // Below f16's normals: steps of 2^-24, the significand (with its leading
  // one) shifted by 126 − exponent; an f32 subnormal is below half a step.
  // Rounding up to 0x400 is the smallest normal.
  if (exponent === 0) return sign;
  const significand = mantissa | 0x800000;
  const dropped = 126 - exponent;
  if (dropped > 24) return sign;
  const kept = significand >>> dropped;
  const rest = significand & ((1 << dropped) - 1);
  const half = 1 << (dropped - 1);
  return sign | (kept + (rest > half || (rest === half && (kept & 1) === 1) ? 1 : 0));
}

/** The nearest bf16 word to `value` (any number, rounded once), ties to even. */
export function f32ToBf16Bits(value: number): number {
  f32[0] = value;
  return f32[0] === value ? bf16FromF32Bits(u32[0]!) : encodeHalf(value, BF16);
}

export function bf16BitsToF32(bits: number): number {
  u32[0] = bits << 16;
  return f32[0]!;
}

/** The nearest f16 word to `value` (any number, rounded once), ties to even. */
export function f32ToF16Bits(value: number): number {
  f32[0] = value;
  return f32[0] === value ? f16FromF32Bits(u32[0]!) : encodeHalf(value, F16);
}

function decodeF16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

// Every f16 word decoded once (512 KiB), on first use: references decode
// millions of words.
let f16Values: Float64Array | undefined;

export function f16BitsToF32(bits: number): number {
  if (!f16Values) {
    f16Values = new Float64Array(0x10000);
    for (let w = 0; w < 0x10000; w++) f16Values[w] = decodeF16(w);
  }
  return f16Values[bits & 0xffff]!;
}

/** `values` rounded (nearest even) to `half` and back: what a kernel that multiplies them in `half` sees. */
export function roundedToHalf(half: 'f16' | 'bf16', values: ArrayLike<number>): Float32Array {
  const round =
    half === 'bf16'
      ? (x: number) => bf16BitsToF32(f32ToBf16Bits(x))
      : (x: number) => f16BitsToF32(f32ToF16Bits(x));
  return Float32Array.from(values, round);
}

/** Whether `dtype` is a 16-bit float stored as raw words on the host. */
export function isHalf(dtype: DType): dtype is 'f16' | 'bf16' {
  return dtype === 'f16' || dtype === 'bf16';
}

/** Whether `dtype` holds floating-point values. */
export function isFloat(dtype: DType): dtype is 'f32' | 'f16' | 'bf16' {
  return dtype === 'f32' || isHalf(dtype);
}
