import { gridFor, type KernelEncoder, linearWorkgroup } from '../kernel.js';

/** Threads per workgroup of the one-element-per-thread kernels. */
export const WG = 256;

/** WGSL prologue of a 1-D kernel over `n` elements on a `gridFor` grid: defines `i` and returns past the end. */
export function elementIndex(n: string): string {
  return `let i = (${linearWorkgroup}) * ${WG}u + lid.x;\n  if (i >= ${n}) { return; }`;
}

/** The builtins every kernel entry point takes. */
export const BUILTINS =
  '@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>';

/** Workgroups for `n` elements, one per thread. */
export function elementGrid(encoder: KernelEncoder, n: number): [number, number] {
  return gridFor(Math.ceil(n / WG), encoder.limits);
}

/** vec4 loads where rows are a whole number of vec4s, scalars otherwise. */
export function vectorOf(headDim: number): { width: 1 | 4; type: 'vec4<f32>' | 'f32'; zero: string } {
  return headDim % 4 === 0
    ? { width: 4, type: 'vec4<f32>', zero: 'vec4<f32>()' }
    : { width: 1, type: 'f32', zero: '0.0' };
}
