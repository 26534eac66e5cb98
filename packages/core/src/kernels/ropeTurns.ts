/**
 * RoPE's angles as fractions of a turn, for backends without f64. The angle
 * position · frequency reaches 2^31 radians; rounded to f32 anywhere on the
 * way, its error grows with the position. Held instead as turns per position
 * in a 64-bit binary fraction, frequency / 2π · 2^64, the product with a u32
 * position modulo 2^64 is the angle's fraction of a turn, off by at most
 * position · 2^−64 turns: about 1e−10 radians at 2^24.
 */

/** The first 120 bits of 2/π (the table of fdlibm's argument reduction). */
const TWO_OVER_PI_120 = 0xa2f9836e4e441529fc2757d1f534ddn;

/** floor(2^bits / 2π) for bits up to 122: 1 / 2π as a binary fraction of `bits` bits. */
export function inverseTwoPiFixed(bits: number): bigint {
  if (!(Number.isInteger(bits) && bits >= 0 && bits <= 122))
    throw new RangeError(`bits ${bits} not in [0, 122]`);
  // 2^bits / 2π = (2/π) · 2^(bits − 2), and TWO_OVER_PI_120 is 2/π · 2^120.
  return TWO_OVER_PI_120 >> BigInt(122 - bits);
}

/** Pair i's frequency from theta, theta^(−2i/headDim), in f64: the one the reference rotates by. */
export function thetaFrequency(theta: number, headDim: number, i: number): number {
  return theta ** ((-2 * i) / headDim);
}

const bits64 = new DataView(new ArrayBuffer(8));
const INVERSE_TWO_PI_120 = inverseTwoPiFixed(120);
const MASK_64 = (1n << 64n) - 1n;

/**
 * floor(frequency / 2π · 2^64) mod 2^64: the frequency's turns per position
 * as a 64-bit binary fraction (its whole turns dropped: positions are
 * integers). Exact to 2^−64 for any finite frequency >= 0.
 */
export function frequencyTurns64(frequency: number): bigint {
  if (!(Number.isFinite(frequency) && frequency >= 0))
    throw new RangeError(`frequency ${frequency} is not finite and >= 0`);
  // frequency = m · 2^e exactly, m an integer below 2^53.
  bits64.setFloat64(0, frequency);
  const word = bits64.getBigUint64(0);
  const exponent = Number((word >> 52n) & 0x7ffn);
  const fraction = word & ((1n << 52n) - 1n);
  const m = exponent === 0 ? fraction : fraction | (1n << 52n);
  const e = (exponent === 0 ? 1 : exponent) - 1075;
  // m · 2^e / 2π · 2^64 = m · (2^120 / 2π) · 2^(e − 56).
  const shift = 56 - e;
  const product = m * INVERSE_TWO_PI_120;
  return (shift >= 0 ? product >> BigInt(shift) : product << BigInt(-shift)) & MASK_64;
}
