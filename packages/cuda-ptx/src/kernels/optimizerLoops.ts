import type { KernelEncoder, Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32, Param, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { BLOCK, gridFor } from './common.js';
import { accessWidth, GroupReducer, groupPlace, loadFloats, storeFloats } from './rowReduce.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES, storesOf } from './storage.js';

// Optimizer steps stream every element once: f32 moves as `.v4` where every
// operand is 16-byte aligned (the pool's allocations are), and the per-step
// constants (bias corrections, 1 − β) are computed once per launch on the
// host in double precision, never per element on the device.

/** Elements per access. */
export type VectorWidth = 1 | 2 | 4;

/** The widest access all operands' alignment allows; the loops handle any n mod width themselves. */
export function vectorWidthFor(operands: readonly Operand[]): VectorWidth {
  return accessWidth(4, operands);
}

/**
 * Runs `body` over the elements [0, n): a grid-stride loop over whole groups
 * of `width`, then the last n mod width elements, one per thread.
 */
export function vectorLoop(
  k: KernelBuilder,
  n: R32,
  width: VectorWidth,
  body: (index: R32, width: VectorWidth) => void,
): void {
  if (width === 1) {
    k.gridStrideLoop(n, (i) => body(i, 1));
    return;
  }
  const shift = Math.log2(width);
  const groups = k.shr('u32', k.reg('u32'), n, shift);
  k.gridStrideLoop(groups, (g) => body(k.shl('b32', k.reg('u32'), g, shift), width));
  const tail = k.shl('b32', k.reg('u32'), groups, shift);
  k.add('u32', tail, tail, k.globalThreadIndex('x'));
  k.guard(tail, n, () => body(tail, 1));
}

/** Blocks of a grid-stride launch over `n` elements at `width` per access. */
export function vectorGrid(encoder: KernelEncoder, n: number, width: VectorWidth): number {
  return gridFor(encoder.device, Math.ceil(n / width));
}

export function load(k: KernelBuilder, base: R64, index: R32, width: VectorWidth): F32[] {
  return loadFloats(k, k.elementAddress(base, index, 4), width);
}

export function store(k: KernelBuilder, base: R64, index: R32, values: readonly F32[]): void {
  storeFloats(k, k.elementAddress(base, index, 4), values);
}

/** `width` elements of `type` at `index` as f32: f32 as `load` does, halves widened (gradients may be half). */
export function loadTyped(
  k: KernelBuilder,
  type: FloatStorage,
  base: R64,
  index: R32,
  width: VectorWidth,
): F32[] {
  if (type === 'f32') return load(k, base, index, width);
  const regs = k.regs('f32', width);
  loadAsF32(k, type, regs, k.elementAddress(base, index, STORAGE_BYTES[type]));
  return regs;
}

/** Stores f32 values as elements of `type` at `index`, rounded to nearest even. */
export function storeTyped(
  k: KernelBuilder,
  type: FloatStorage,
  base: R64,
  index: R32,
  values: readonly F32[],
): void {
  if (type === 'f32') store(k, base, index, values);
  else storesOf(k, type, values)(k.elementAddress(base, index, STORAGE_BYTES[type]));
}

/** IEEE round-to-nearest f32 arithmetic, each result in a fresh register. */
export function arithmetic(k: KernelBuilder) {
  const f = () => k.reg('f32');
  type In = F32 | number;
  return {
    mul: (a: F32, b: In) => k.mul('f32', f(), a, b, { rnd: 'rn' }),
    fma: (a: In, b: In, c: In) => k.fma('f32', f(), a, b, c),
    div: (a: F32, b: F32) => k.div('f32', f(), a, b, 'rn'),
    neg: (a: F32) => k.neg('f32', f(), a),
  };
}

export function f32Params(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  names: readonly string[],
): Record<string, F32> {
  return Object.fromEntries(names.map((name) => [name, k.ldParam(p[name] as Param<'f32'>)]));
}

/** The block's sum of `value`, in every thread, combined in a fixed order (deterministic). */
export function blockSum(k: KernelBuilder, value: F32): F32 {
  const place = groupPlace(k, { threads: BLOCK, block: BLOCK, width: 1, slots: 0 });
  return new GroupReducer(k, place).reduce(['sum'], [value])[0]!;
}

export function isThreadZero(k: KernelBuilder) {
  return k.setp('eq', 'u32', k.reg('pred'), k.tid('x'), 0);
}
