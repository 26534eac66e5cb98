import type { DType } from '@rayo/core';
import type { ShaderModule, WgslType } from './module.js';

// Half-precision storage read as u32 words of two elements, the lower one
// first: f16 through the core builtin `unpack2x16float` (no `shader-f16`
// needed, so every adapter runs it), bf16 by shifting into the upper half of
// an f32 (bf16 has no WGSL type). Arithmetic stays in f32. A vec4<u32> load
// brings 8 halves, as many bytes as the f32 kernels' vec4<f32> loads.

/** How a float tensor is stored: f32 or one of the half dtypes, in u32 words. */
export type Storage = 'f32' | 'f16' | 'bf16';

/** The storage of a tensor's dtype (float dtypes only). */
export function storageOf(dtype: DType): Storage {
  if (dtype === 'f32' || dtype === 'f16' || dtype === 'bf16') return dtype;
  throw new RangeError(`no float storage for ${dtype}`);
}

/** Elements per vector load: vec4<f32> holds 4, vec4<u32> of halves 8. */
export function vectorElements(storage: Storage): 4 | 8 {
  return storage === 'f32' ? 4 : 8;
}

/** WGSL element type of a binding of `storage`, scalar or vector. */
export function bindingType(storage: Storage, vec: boolean): WgslType {
  if (storage === 'f32') return vec ? 'vec4<f32>' : 'f32';
  return vec ? 'vec4<u32>' : 'u32';
}

/** Module-scope WGSL that `unpack2` needs for `storage` (declare it once). */
export function halfFunctions(storage: Storage): string {
  if (storage !== 'bf16') return '';
  return `fn unpack2xbf16(w: u32) -> vec2<f32> {
  return bitcast<vec2<f32>>(vec2<u32>(w << 16u, w & 0xffff0000u));
}`;
}

/** WGSL: the two elements of `word` (a u32 of halves) as vec2<f32>, the lower first. */
export function unpack2(storage: Exclude<Storage, 'f32'>, word: string): string {
  return storage === 'f16' ? `unpack2x16float(${word})` : `unpack2xbf16(${word})`;
}

/** WGSL: element `index` of binding `array` (scalar binding of `storage`) as f32. */
export function loadScalar(storage: Storage, array: string, index: string): string {
  if (storage === 'f32') return `${array}[${index}]`;
  return `${unpack2(storage, `${array}[(${index}) >> 1u]`)}[(${index}) & 1u]`;
}

/**
 * WGSL: the vec4<f32> pieces of one vector load `value` of a vector binding
 * of `storage`: one for f32, two (elements 0–3, then 4–7) for halves.
 */
export function unpackVector(storage: Storage, value: string): string[] {
  if (storage === 'f32') return [value];
  const u = (c: string) => unpack2(storage, `${value}.${c}`);
  return [`vec4<f32>(${u('x')}, ${u('y')})`, `vec4<f32>(${u('z')}, ${u('w')})`];
}

/** WGSL type of a load of 4 elements: vec4<f32>, or vec2<u32> of halves. */
export function quadType(storage: Storage): WgslType {
  return storage === 'f32' ? 'vec4<f32>' : 'vec2<u32>';
}

/** WGSL: a load `value` of `quadType(storage)` as vec4<f32>. */
export function unpackQuad(storage: Storage, value: string): string {
  if (storage === 'f32') return value;
  return `vec4<f32>(${unpack2(storage, `${value}.x`)}, ${unpack2(storage, `${value}.y`)})`;
}

// Exact conversions as integer code on the bit patterns: WGSL's pack2x16float
// leaves overflow unspecified, and no float arithmetic can flush a subnormal
// or quiet a NaN here.

/** f32 bits from f16 bits, exact (subnormals normalised, NaN kept NaN). */
export const F16_TO_F32 = `
fn f16_to_f32(h: u32) -> u32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return sign | 0x7f800000u | (m << 13u); }
  if (e == 0u) {
    if (m == 0u) { return sign; }
    let shift = countLeadingZeros(m) - 21u;
    return sign | ((113u - shift) << 23u) | (((m << shift) & 0x3ffu) << 13u);
  }
  return sign | ((e + 112u) << 23u) | (m << 13u);
}`;

/** f16 bits from f32 bits, round to nearest even; overflow to Inf, NaN to the quiet NaN. */
export const F32_TO_F16 = `
fn f32_to_f16(x: u32) -> u32 {
  let sign = (x >> 16u) & 0x8000u;
  let a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u; }
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }
  if (a >= 0x38800000u) {
    let b = a - 0x38000000u;
    return sign | ((b + 0xfffu + ((b >> 13u) & 1u)) >> 13u);
  }
  if (a < 0x33000000u) { return sign; }
  let m = (a & 0x7fffffu) | 0x800000u;
  let shift = 126u - (a >> 23u);
  let q = m >> shift;
  let rest = m & ((1u << shift) - 1u);
  let halfway = 1u << (shift - 1u);
  return sign | select(q, q + 1u, rest > halfway || (rest == halfway && (q & 1u) == 1u));
}`;

/** bf16 bits from f32 bits, round to nearest even; NaN to the quiet NaN. */
export const F32_TO_BF16 = `
fn f32_to_bf16(x: u32) -> u32 {
  if ((x & 0x7fffffffu) > 0x7f800000u) { return ((x >> 16u) & 0x8000u) | 0x7fc0u; }
  return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}`;

/**
 * Module-scope WGSL `fn to_<storage>(v: f32) -> u32`: the half bits of v,
 * rounded to nearest even (declare it once, or through `declareHalf`).
 */
export function narrowFunctions(storage: Exclude<Storage, 'f32'>): string {
  return storage === 'f16'
    ? `${F32_TO_F16}\nfn to_f16(v: f32) -> u32 { return f32_to_f16(bitcast<u32>(v)); }`
    : `${F32_TO_BF16}\nfn to_bf16(v: f32) -> u32 { return f32_to_bf16(bitcast<u32>(v)); }`;
}

/** Declares in `module` what loads (`unpack2`) and rounding stores (`to_<storage>`) of `storage` need. */
export function declareHalf(module: ShaderModule, storage: Storage): void {
  if (storage === 'f32') return;
  if (storage === 'bf16') module.declare(halfFunctions(storage));
  module.declare(narrowFunctions(storage));
}
