/** f32, f16 and bf16 values and their bit patterns, for the PTX interpreter and its tensor-core semantics. */

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

export function bitsToF32(bits: number): number {
  u32Scratch[0] = bits;
  return f32Scratch[0]!;
}

export function f32ToBits(value: number): number {
  f32Scratch[0] = value;
  return u32Scratch[0]!;
}

/** Every f16 value by its bits. */
export const F16_VALUES = Float32Array.from({ length: 65536 }, (_, b) => {
  const sign = b & 0x8000 ? -1 : 1;
  const exp = (b >>> 10) & 31;
  const mant = b & 1023;
  if (exp === 31) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return exp === 0 ? sign * mant * 2 ** -24 : sign * (1 + mant / 1024) * 2 ** (exp - 15);
});

export function f16ToNumber(bits: number): number {
  return F16_VALUES[bits]!;
}

export function bf16ToNumber(bits: number): number {
  return bitsToF32(bits << 16);
}
