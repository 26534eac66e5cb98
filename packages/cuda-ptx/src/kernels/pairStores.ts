import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type Pred, type R16, type R32, type R64 } from '../ptx/operands.js';
import type { HalfDType } from './common.js';

// The epilogue stores of the tensor-core products: two adjacent columns of y
// a thread holds, y = values (+ beta · c), in one store where both are inside
// and aligned (`pairOk`), else one or two single stores (`singleOk`).

/**
 * Whether two adjacent columns of y (and c) may move as one access: N even,
 * so that a pair starts at an even element, and every base aligned to a
 * pair's bytes (an output or c may be a view starting at any element).
 */
export function pairsAligned(
  k: KernelBuilder,
  dtype: HalfDType | 'f32',
  nDim: R32,
  bases: readonly (R64 | undefined)[],
): Pred {
  const pairBytes = dtype === 'f32' ? 8 : 4;
  const ok = k.setp('eq', 'u32', k.reg('pred'), k.and('b32', k.reg('u32'), nDim, 1), 0);
  for (const base of bases) {
    if (!base) continue;
    const low = k.and('b64', k.reg('u64'), base, pairBytes - 1);
    k.and('pred', ok, ok, k.setp('eq', 'u64', k.reg('pred'), low, 0));
  }
  return ok;
}

/** A half element (b16 bits) to f32. */
export function halfToF32(k: KernelBuilder, dtype: HalfDType, h: R16): F32 {
  if (dtype === 'f16') return k.cvt('f32', 'f16', k.reg('f32'), h);
  const wide = k.shl('b32', k.reg('u32'), k.cvt('u32', 'u16', k.reg('u32'), h), 16);
  return k.mov('b32', k.reg('f32'), wide) as F32;
}

/**
 * y (and c) of `dtype` at element `element`: half pairs rounded to nearest
 * even into one word, f32 pairs in one 8-byte store.
 */
export function storePair(
  k: KernelBuilder,
  dtype: HalfDType | 'f32',
  yBase: R64,
  cBase: R64 | undefined,
  element: R32,
  values: readonly F32[],
  beta: F32,
  pairOk: Pred,
  singleOk: readonly [Pred, Pred],
): void {
  const bytes = dtype === 'f32' ? 4 : 2;
  const yAt = k.elementAddress(yBase, element, bytes);
  if (cBase) {
    const cAt = k.elementAddress(cBase, element, bytes);
    const c =
      dtype === 'f32' ? loadF32Pair(k, cAt, pairOk, singleOk) : loadHalfPair(k, dtype, cAt, pairOk, singleOk);
    values.forEach((x, e) => {
      k.fma('f32', x, c[e]!, beta, x);
    });
  }
  if (dtype === 'f32') {
    k.predicated(pairOk, () => k.stGlobal('f32', yAt, [values[0]!, values[1]!]));
    for (const e of [0, 1]) k.predicated(singleOk[e]!, () => k.stGlobal('f32', addr(yAt, 4 * e), values[e]!));
    return;
  }
  const packed = k.cvtPack(dtype, k.reg('u32'), values[0]!, values[1]!);
  k.predicated(pairOk, () => k.stGlobal('b32', yAt, packed));
  const lo = k.reg('b16');
  const hi = k.reg('b16');
  k.unpackHalves(lo, hi, packed);
  k.predicated(singleOk[0], () => k.stGlobal('b16', yAt, lo));
  k.predicated(singleOk[1], () => k.stGlobal('b16', addr(yAt, 2), hi));
}

/** The two half elements at `at` as f32: one word where the pair may be read, else one by one. */
function loadHalfPair(
  k: KernelBuilder,
  dtype: HalfDType,
  at: R64,
  pairOk: Pred,
  singleOk: readonly [Pred, Pred],
): F32[] {
  const h = [k.mov('b16', k.reg('b16'), 0), k.mov('b16', k.reg('b16'), 0)] as const;
  const word = k.mov('u32', k.reg('u32'), 0);
  k.predicated(pairOk, () => k.ldGlobal('b32', word, at));
  k.predicated(pairOk, () => k.unpackHalves(h[0], h[1], word));
  for (const e of [0, 1]) k.predicated(singleOk[e]!, () => k.ldGlobal('b16', h[e]!, addr(at, 2 * e)));
  return h.map((x) => halfToF32(k, dtype, x));
}

/** The two f32 elements at `at`: one 8-byte load where the pair may be read, else one by one. */
function loadF32Pair(k: KernelBuilder, at: R64, pairOk: Pred, singleOk: readonly [Pred, Pred]): F32[] {
  const v = [k.mov('f32', k.reg('f32'), 0), k.mov('f32', k.reg('f32'), 0)] as const;
  k.predicated(pairOk, () => k.ldGlobal('f32', [v[0], v[1]], at));
  for (const e of [0, 1]) k.predicated(singleOk[e]!, () => k.ldGlobal('f32', v[e]!, addr(at, 4 * e)));
  return [...v];
}
