import { paramLayout } from '../params.js';
import type { Storage } from '../wgsl/half.js';

// The WGSL pieces the quantizeRows shaders share, written so that a device
// gives the host quantizer's bits (quant/rounding.ts). Scales are range ·
// f32(1 / levels) (a correctly rounded product) rounded to their storage by
// integer code. WGSL's division is not correctly rounded, so a code starts
// from the rounded quotient and is fixed by the exact sign of
// t − (q ± ½) · scale: scale split into two halves of 12 bits makes both
// products exact, and t minus the first is exact wherever the sign is in
// doubt. Half scales (and offsets) share a u32 word with a neighbouring
// group's: each invocation clears and sets its own half with atomics, so no
// word needs zeroing first.

export const QUANTIZE_PARAMS = paramLayout([
  ['count', 'u32'],
  ['k', 'u32'],
  ['units', 'u32'],
  ['groups', 'u32'],
  ['groupSize', 'u32'],
  ['rowWords', 'u32'],
  ['zeroWords', 'u32'],
] as const);

/** The integer nearest to t / s, ties up, for s > 0 (exact; see the note above). */
export const NEAREST = `fn nearest(t: f32, s: f32) -> i32 {
  let q = round(t / s);
  let sh = bitcast<f32>(bitcast<u32>(s) & 0xfffff000u);
  let sl = s - sh;
  let up = q + 0.5;
  let down = q - 0.5;
  var r = i32(q);
  if (t - up * sh >= up * sl) { r = r + 1; } else if (t - down * sh < down * sl) { r = r - 1; }
  return r;
}
fn positive_zero(x: f32) -> f32 { return select(x, 0.0, x == 0.0); }
// Runtime values: a constant expression may not be NaN or infinite.
var<private> nanBits: u32 = 0x7fc00000u;
var<private> infBits: u32 = 0x7f800000u;`;

export function loadWeight(weight: Storage): string {
  if (weight === 'f32') return 'fn weight(i: u32) -> f32 { return w[i]; }';
  const half = '(w[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu';
  return weight === 'f16'
    ? `fn weight(i: u32) -> f32 { return bitcast<f32>(f16_to_f32(${half})); }`
    : `fn weight(i: u32) -> f32 { return bitcast<f32>((${half}) << 16u); }`;
}

/** Stores scale-like value v at element `at` of `array` in `scale` storage. */
export function storeScale(scale: Storage, array: string, at: string, v: string): string {
  if (scale === 'f32') return `${array}[${at}] = ${v};`;
  return `{
    let shift = (${at} & 1u) * 16u;
    atomicAnd(&${array}[${at} >> 1u], ~(0xffffu << shift));
    atomicOr(&${array}[${at} >> 1u], to_${scale}(${v}) << shift);
  }`;
}

/** An f32 constant, exactly. */
export function f32Literal(x: number): string {
  return Number.isInteger(x)
    ? `${x}.0`
    : `bitcast<f32>(${new Uint32Array(new Float32Array([x]).buffer)[0]}u)`;
}

/** The f32 `value` as `scale` storage keeps it. */
export function storedAs(scale: Storage, value: string): string {
  if (scale === 'f32') return value;
  const bits = `to_${scale}(${value})`;
  return scale === 'f16' ? `bitcast<f32>(f16_to_f32(${bits}))` : `bitcast<f32>(${bits} << 16u)`;
}
