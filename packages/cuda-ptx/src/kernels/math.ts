import { GELU_CUBIC, GELU_SQRT_2_OVER_PI } from '@rayo/core';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32 } from '../ptx/operands.js';

/**
 * f32 functions for kernels, accurate to a few ulp over the whole range
 * (the conformance tolerance is 1e-5, relative and absolute), with NaN and
 * infinities handled as the reference does. Each helper emits instructions
 * into `k` and returns the register holding the result.
 */

/** log2(e) split into an f32 head and the remainder, for an exact x·log2(e). */
const LOG2E_HI = Math.fround(Math.LOG2E);
const LOG2E_LO = Math.LOG2E - LOG2E_HI;
// GELU's constants come from core's activation table.
const SQRT_2_OVER_PI = GELU_SQRT_2_OVER_PI;
const GELU_C = GELU_CUBIC;

function f32(k: KernelBuilder): F32 {
  return k.reg('f32');
}

/** d = a op b in f32, rounded to nearest (the binary maps and the formulas of activations.ts). */
export function arithmeticF32(
  k: KernelBuilder,
  op: '+' | '-' | '*' | '/',
  d: F32,
  a: F32 | number,
  b: F32 | number,
): F32 {
  switch (op) {
    case '+':
      return k.add('f32', d, a, b, { rnd: 'rn' });
    case '-':
      return k.sub('f32', d, a, b, { rnd: 'rn' });
    case '*':
      return k.mul('f32', d, a, b, { rnd: 'rn' });
    case '/':
      return k.div('f32', d, a, b, 'rn');
  }
}

/** `y`, or `x` where `x` is NaN (min and max return the other operand for NaN, which would hide it). */
export function keepNaN(k: KernelBuilder, x: F32, y: F32): F32 {
  const nan = k.setp('nan', 'f32', k.reg('pred'), x, x);
  return k.selp('f32', f32(k), x, y, nan);
}

/** min(max(x, lo), hi), with NaN kept. */
export function clampF32(k: KernelBuilder, x: F32, lo: F32 | number, hi: F32 | number): F32 {
  const y = k.max('f32', f32(k), x, lo);
  k.min('f32', y, y, hi);
  return keepNaN(k, x, y);
}

/**
 * e^x as 2^(x·log2 e) with `ex2.approx.f32` (about 2 ulp, subnormals kept),
 * where the rounding error of the product is recovered with fma and applied
 * as a first-order correction, so the result stays within a few ulp even for
 * large |x|. x is clamped to [-104, 89] first (e^x is 0 or +inf beyond), which
 * keeps the correction finite.
 */
export function expF32(k: KernelBuilder, x: F32): F32 {
  const xc = k.max('f32', f32(k), x, -104);
  k.min('f32', xc, xc, 89);
  const t = k.mul('f32', f32(k), xc, LOG2E_HI, { rnd: 'rn' });
  const err = k.fma('f32', f32(k), xc, LOG2E_HI, k.neg('f32', f32(k), t));
  k.fma('f32', err, xc, LOG2E_LO, err);
  const p = k.ex2(f32(k), t);
  // 2^(t + err) = 2^t · (1 + err·ln 2 + O(err²)), |err| < 2^-16.
  const correction = k.fma('f32', f32(k), err, Math.LN2, 1);
  k.mul('f32', p, p, correction, { rnd: 'rn' });
  return keepNaN(k, x, p);
}

/**
 * sigmoid(z) = 1 / (1 + e^-z) with an IEEE reciprocal, and 1 − sigmoid(z)
 * computed without cancellation: as e^-z · sigmoid(z) where sigmoid(z) > ½,
 * as 1 − sigmoid(z) elsewhere (where e^-z may be +inf).
 */
export function sigmoidParts(k: KernelBuilder, z: F32): { s: F32; oneMinusS: F32 } {
  const e = expF32(k, k.neg('f32', f32(k), z));
  const s = k.rcp(f32(k), k.add('f32', f32(k), e, 1, { rnd: 'rn' }), 'rn');
  const upper = k.mul('f32', f32(k), e, s, { rnd: 'rn' });
  const lower = k.sub('f32', f32(k), 1, s, { rnd: 'rn' });
  const isUpper = k.setp('gt', 'f32', k.reg('pred'), s, 0.5);
  const oneMinusS = k.selp('f32', f32(k), upper, lower, isUpper);
  return { s, oneMinusS };
}

export function sigmoidF32(k: KernelBuilder, x: F32): F32 {
  return sigmoidParts(k, x).s;
}

/**
 * tanh(x) = sign(x) · (1 − e^-2|x|) / (1 + e^-2|x|), which never overflows;
 * below |x| = 0.125, where 1 − e^-2|x| cancels, the odd Taylor polynomial
 * to x^7 (truncation error under 2e-9 relative).
 */
export function tanhF32(k: KernelBuilder, x: F32): F32 {
  const a = k.abs('f32', f32(k), x);
  const t = expF32(k, k.mul('f32', f32(k), a, -2, { rnd: 'rn' }));
  const num = k.sub('f32', f32(k), 1, t, { rnd: 'rn' });
  const den = k.add('f32', f32(k), t, 1, { rnd: 'rn' });
  const r = k.div('f32', f32(k), num, den, 'rn');
  const negative = k.setp('lt', 'f32', k.reg('pred'), x, 0);
  const signed = k.selp('f32', f32(k), k.neg('f32', f32(k), r), r, negative);
  const x2 = k.mul('f32', f32(k), x, x, { rnd: 'rn' });
  const poly = k.fma('f32', f32(k), x2, -17 / 315, 2 / 15);
  k.fma('f32', poly, poly, x2, -1 / 3);
  k.mul('f32', poly, poly, x2, { rnd: 'rn' });
  const small = k.fma('f32', f32(k), poly, x, x);
  const isSmall = k.setp('lt', 'f32', k.reg('pred'), a, 0.125);
  const y = k.selp('f32', f32(k), small, signed, isSmall);
  // ±0 in, ±0 out (the polynomial gives +0 for -0).
  const isZero = k.setp('eq', 'f32', k.reg('pred'), x, 0);
  return k.selp('f32', y, x, y, isZero);
}

/** 2u where GELU's tanh approximation is 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³). */
function geluTwiceU(k: KernelBuilder, x: F32): F32 {
  const x2 = k.mul('f32', f32(k), x, x, { rnd: 'rn' });
  const inner = k.fma('f32', f32(k), x2, 2 * SQRT_2_OVER_PI * GELU_C, 2 * SQRT_2_OVER_PI);
  return k.mul('f32', f32(k), x, inner, { rnd: 'rn' });
}

/** GELU (tanh form) as x · sigmoid(2u), the same function without 1 + tanh cancelling. */
export function geluF32(k: KernelBuilder, x: F32): F32 {
  const { s } = sigmoidParts(k, geluTwiceU(k, x));
  return k.mul('f32', f32(k), x, s, { rnd: 'rn' });
}

/**
 * d GELU/dx = s + 2x·s·(1 − s)·u' with s = sigmoid(2u), u' = √(2/π)·(1 + 3·0.044715·x²).
 * Beyond |x| = 30 the second term is 0 and s is 0 or 1; clamping there keeps
 * x² from overflowing into inf·0.
 */
export function geluGradF32(k: KernelBuilder, x: F32): F32 {
  const xc = clampF32(k, x, -30, 30);
  const { s, oneMinusS } = sigmoidParts(k, geluTwiceU(k, xc));
  const x2 = k.mul('f32', f32(k), xc, xc, { rnd: 'rn' });
  const du = k.fma('f32', f32(k), x2, 3 * GELU_C * SQRT_2_OVER_PI, SQRT_2_OVER_PI);
  const term = k.mul('f32', f32(k), xc, s, { rnd: 'rn' });
  k.mul('f32', term, term, oneMinusS, { rnd: 'rn' });
  k.mul('f32', term, term, du, { rnd: 'rn' });
  const grad = k.fma('f32', f32(k), term, 2, s);
  return keepNaN(k, x, grad);
}

/** SiLU: x · sigmoid(x). */
export function siluF32(k: KernelBuilder, x: F32): F32 {
  return k.mul('f32', f32(k), x, sigmoidF32(k, x), { rnd: 'rn' });
}

/** d SiLU/dx = s · (1 + x·(1 − s)). */
export function siluGradF32(k: KernelBuilder, x: F32): F32 {
  const { s, oneMinusS } = sigmoidParts(k, x);
  const inner = k.fma('f32', f32(k), x, oneMinusS, 1);
  return k.mul('f32', f32(k), s, inner, { rnd: 'rn' });
}
