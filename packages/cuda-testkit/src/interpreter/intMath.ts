import { TWO32 } from './threads.js';

// 64-bit integer arithmetic on pairs of 32-bit words, and bit counts.

/** The 64-bit product of two u32 as [low, high] words. */
export function mulWideU32(a: number, b: number, out: Uint32Array, d: number): void {
  const p = a * b;
  if (p < 2 ** 53) {
    out[d] = p;
    out[d + 1] = Math.floor(p / TWO32);
    return;
  }
  const aLo = a & 0xffff;
  const aHi = a >>> 16;
  const bLo = b & 0xffff;
  const bHi = b >>> 16;
  const mid = aLo * bHi + aHi * bLo;
  const low = aLo * bLo + (mid % 65536) * 65536;
  out[d] = low;
  out[d + 1] = aHi * bHi + Math.floor(mid / 65536) + Math.floor(low / TWO32);
}

/** The 64-bit product of two s32. */
export function mulWideS32(a: number, b: number, out: Uint32Array, d: number): void {
  const p = (a | 0) * (b | 0);
  if (Math.abs(p) < 2 ** 53) {
    out[d] = p;
    out[d + 1] = Math.floor(p / TWO32);
    return;
  }
  set64(out, d, BigInt(a | 0) * BigInt(b | 0));
}

export function get64(u: Uint32Array, i: number): bigint {
  return (BigInt(u[i + 1]!) << 32n) | BigInt(u[i]!);
}

export function getS64(u: Uint32Array, i: number): bigint {
  return BigInt.asIntN(64, get64(u, i));
}

export function set64(u: Uint32Array, i: number, v: bigint): void {
  const w = BigInt.asUintN(64, v);
  u[i] = Number(w & 0xffffffffn);
  u[i + 1] = Number(w >> 32n);
}

/** a + b + carry-in into d (pairs of words; d may alias a or b). */
export function add64(u: Uint32Array, d: number, aLo: number, aHi: number, bLo: number, bHi: number): void {
  const lo = aLo + bLo;
  u[d + 1] = aHi + bHi + (lo >= TWO32 ? 1 : 0);
  u[d] = lo;
}

/** -1, 0 or 1 as the 64-bit values at a and b compare. */
export function compare64(u: Uint32Array, a: number, b: number, signed: boolean): number {
  let ah = u[a + 1]!;
  let bh = u[b + 1]!;
  if (signed) {
    ah |= 0;
    bh |= 0;
  }
  if (ah !== bh) return ah < bh ? -1 : 1;
  const al = u[a]!;
  const bl = u[b]!;
  return al === bl ? 0 : al < bl ? -1 : 1;
}

export function popcount32(x: number): number {
  let v = x >>> 0;
  v = v - ((v >>> 1) & 0x55555555);
  v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
  return (Math.imul((v + (v >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24) & 0xff;
}

export function reverse32(x: number): number {
  let v = x >>> 0;
  v = ((v >>> 1) & 0x55555555) | ((v & 0x55555555) << 1);
  v = ((v >>> 2) & 0x33333333) | ((v & 0x33333333) << 2);
  v = ((v >>> 4) & 0x0f0f0f0f) | ((v & 0x0f0f0f0f) << 4);
  v = ((v >>> 8) & 0x00ff00ff) | ((v & 0x00ff00ff) << 8);
  return ((v >>> 16) | (v << 16)) >>> 0;
}
