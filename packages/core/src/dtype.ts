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
  if (dtype === 'f16') {
    for (let i = 0; i < values.length; i++) out[i] = f32ToF16Bits(values[i]!);
  } else if (dtype === 'bf16') {
    for (let i = 0; i < values.length; i++) out[i] = f32ToBf16Bits(values[i]!);
  } else {
    for (let i = 0; i < values.length; i++) out[i] = values[i]!;
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

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32ToBf16Bits(value: number): number {
  f32[0] = value;
  const bits = u32[0]!;
  if (Number.isNaN(value)) return 0x7fc0;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16BitsToF32(bits: number): number {
  u32[0] = bits << 16;
  return f32[0]!;
}

export function f32ToF16Bits(value: number): number {
  f32[0] = value;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rest > mid || (rest === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && half & 1)) half++;
  return sign | half;
}

export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
