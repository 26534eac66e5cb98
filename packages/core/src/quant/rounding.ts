/**
 * The arithmetic of quantizing, written so that a device gives the same bits:
 * every value an f32 formed by one correctly rounded f32 operation (a GPU's
 * division is not always correctly rounded, so scales multiply by f32
 * reciprocals), and a code the nearest integer to the exact quotient
 * t / scale, ties up (as Math.round), decided by the sign of an exact
 * t − (q ± ½) · scale rather than by a rounded quotient.
 */

const fround = Math.fround;

/** f32(1 / levels): scale = f32(range · this). */
export function reciprocalOf(levels: number): number {
  return fround(1 / levels);
}

/**
 * The integer nearest to t / scale (ties up) for scale > 0, exactly: the
 * products (q ± ½) · scale hold at most 34 bits, exact in f64, and a
 * rounded difference keeps its sign.
 */
export function nearestQuotient(t: number, scale: number): number {
  let q = Math.round(t / scale);
  if (t - (q + 0.5) * scale >= 0) q++;
  else if (t - (q - 0.5) * scale < 0) q--;
  return q;
}

/** ±0 as +0, so that a group's range does not depend on which zero a min or max kept. */
export function positiveZero(value: number): number {
  return value === 0 ? 0 : value;
}
