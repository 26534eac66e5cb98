import type { DType } from '@rayo/core';

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
export function bindingType(storage: Storage, vec: boolean): string {
  if (storage === 'f32') return vec ? 'vec4<f32>' : 'f32';
  return vec ? 'vec4<u32>' : 'u32';
}

/** Module-scope WGSL the helpers below need for `storage` (declare it once). */
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
export function quadType(storage: Storage): string {
  return storage === 'f32' ? 'vec4<f32>' : 'vec2<u32>';
}

/** WGSL: a load `value` of `quadType(storage)` as vec4<f32>. */
export function unpackQuad(storage: Storage, value: string): string {
  if (storage === 'f32') return value;
  return `vec4<f32>(${unpack2(storage, `${value}.x`)}, ${unpack2(storage, `${value}.y`)})`;
}
