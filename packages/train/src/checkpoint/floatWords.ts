import { type DType, f16BitsToF32, f32ToF16Bits, type HostArray } from '@rayo/core';

/** The float dtypes a checkpoint's weights may be read as. */
export type FloatDType = 'f32' | 'f16' | 'bf16';

const word = new Float32Array(1);
const bits = new Uint32Array(word.buffer);

/**
 * The bf16 word nearest an f32, ties to even, from the f32's bits (core's
 * `f32ToBf16Bits` rounds any double and is slower per element; for an f32
 * input both give the same word). NaN becomes the quiet NaN.
 */
function bf16OfF32(value: number): number {
  word[0] = value;
  const u = bits[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;
  return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
}

/** The f32 values of a float host array of `dtype` (a copy for f32; exact for every dtype). */
export function widenToF32(dtype: FloatDType, data: HostArray): Float32Array {
  if (dtype === 'f32') return Float32Array.from(data);
  const words = data as Uint16Array;
  const out = new Float32Array(words.length);
  if (dtype === 'bf16') {
    const outBits = new Uint32Array(out.buffer);
    for (let i = 0; i < words.length; i++) outBits[i] = words[i]! << 16;
  } else {
    for (let i = 0; i < words.length; i++) out[i] = f16BitsToF32(words[i]!);
  }
  return out;
}

/** `values` (f32) rounded once to `dtype`, to nearest even: the host array an upload of that dtype takes. */
export function roundF32To(dtype: FloatDType, values: Float32Array): HostArray {
  if (dtype === 'f32') return values;
  const out = new Uint16Array(values.length);
  if (dtype === 'bf16') for (let i = 0; i < values.length; i++) out[i] = bf16OfF32(values[i]!);
  else for (let i = 0; i < values.length; i++) out[i] = f32ToF16Bits(values[i]!);
  return out;
}

/** Whether `dtype` is one of the float dtypes weights are read as. */
export function isFloatDType(dtype: DType | undefined): dtype is FloatDType {
  return dtype === 'f32' || dtype === 'f16' || dtype === 'bf16';
}
