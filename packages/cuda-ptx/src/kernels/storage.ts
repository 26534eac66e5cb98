import type { DType } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { L2Prefetch, Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import {
  type Address,
  type AddressLike,
  addr,
  type F32,
  type Pred,
  type R16,
  type R32,
} from '../ptx/operands.js';
import { asVector } from './common.js';

// Float tensors are stored as f32, f16 or bf16 and computed on as f32. Only
// these loads and stores know the storage: a kernel passes an operand's
// dtype and gets f32 registers. f16 converts with cvt; bf16 is integer code
// on the bit patterns (widening is a shift, narrowing rounds to nearest even
// by hand), so the modules keep the default sm_75 target.

export type FloatStorage = 'f32' | 'f16' | 'bf16';

export const STORAGE_BYTES: Readonly<Record<FloatStorage, number>> = { f32: 4, f16: 2, bf16: 2 };

/** The storage of a float operand. */
export function storageOf(op: { readonly dtype: DType }): FloatStorage {
  return op.dtype === 'f16' || op.dtype === 'bf16' ? op.dtype : 'f32';
}

/** Elements of `type` in one 16-byte access: the widest load the kernels issue. */
export function perVector(type: FloatStorage): number {
  return 16 / STORAGE_BYTES[type];
}

/** A key suffix for the storages of a module's operands ('' when all are f32, so f32 keys stay as they were). */
export function storageKey(types: readonly FloatStorage[]): string {
  return types.every((t) => t === 'f32') ? '' : `/${types.join('_')}`;
}

function offsetBy(at: AddressLike, bytes: number): AddressLike {
  if (bytes === 0) return at;
  if (typeof at === 'object' && 'offset' in at)
    return addr((at as Address).base, (at as Address).offset + bytes);
  return addr(at as Exclude<AddressLike, Address>, bytes);
}

/** The f32 value of a bf16 held in the upper or lower half of `word`. */
function bf16ToF32(k: KernelBuilder, word: R32, upper: boolean): F32 {
  const bits = upper ? k.and('b32', k.reg('u32'), word, 0xffff0000) : k.shl('b32', k.reg('u32'), word, 16);
  return k.mov('b32', k.reg('f32'), bits);
}

/** The f32 value of an f16 held in the upper or lower half of `word`. */
function f16ToF32(k: KernelBuilder, word: R32, upper: boolean): F32 {
  const half = k.cvt('u16', 'u32', k.reg('b16'), upper ? k.shr('b32', k.reg('u32'), word, 16) : word);
  return k.cvt('f32', 'f16', k.reg('f32'), half);
}

/** The f32 value of the f16 or bf16 in the upper or lower half of `word`. */
export function halfToF32(k: KernelBuilder, type: 'f16' | 'bf16', word: R32, upper: boolean): F32 {
  return type === 'f16' ? f16ToF32(k, word, upper) : bf16ToF32(k, word, upper);
}

/**
 * Loads `dst.length` consecutive elements of `type` at `at` into f32
 * registers through the read-only cache, in accesses of at most 16 bytes
 * (the caller keeps `at` aligned to the total size): 1, 2, 4 or 8 elements. Where `ok` is false nothing is read
 * and the registers hold zeros.
 */
export function loadAsF32(
  k: KernelBuilder,
  type: FloatStorage,
  dst: readonly F32[],
  at: AddressLike,
  opts: { ok?: Pred; prefetch?: L2Prefetch } = {},
): void {
  const ld = opts.prefetch === undefined ? { nc: true } : { nc: true, prefetch: opts.prefetch };
  const guarded = (regs: readonly (F32 | R32 | R16)[], load: () => void) => {
    if (!opts.ok) {
      load();
      return;
    }
    for (const r of regs) {
      if (r.cls === 'f32') k.mov('f32', r as F32, 0);
      else if (r.cls === 'b16') k.mov('b16', r as R16, 0);
      else k.mov('b32', r as R32, 0);
    }
    k.predicated(opts.ok, load);
  };
  if (type === 'f32') {
    for (let first = 0; first < dst.length; first += 4) {
      const part = dst.slice(first, first + 4);
      const at4 = offsetBy(at, first * 4);
      guarded(part, () => {
        k.ldGlobal('f32', asVector(part), at4, ld);
      });
    }
    return;
  }
  if (dst.length === 1) {
    const half = k.reg('b16');
    guarded([half], () => k.ldGlobal('b16', half, at, ld));
    if (type === 'f16') k.cvt('f32', 'f16', dst[0]!, half);
    else k.mov('b32', dst[0]!, k.shl('b32', k.reg('u32'), k.cvt('u32', 'u16', k.reg('u32'), half), 16));
    return;
  }
  const words = k.regs('u32', dst.length / 2);
  guarded(words, () => {
    if (words.length === 1) k.ldGlobal('b32', words[0]!, at, ld);
    else if (words.length === 2) k.ldGlobal('b32', words as unknown as Vec2<R32>, at, ld);
    else k.ldGlobal('b32', words as unknown as Vec4<R32>, at, ld);
  });
  words.forEach((word, i) => {
    for (const upper of [false, true]) {
      const value = type === 'f16' ? f16ToF32(k, word, upper) : bf16ToF32(k, word, upper);
      k.mov('f32', dst[2 * i + (upper ? 1 : 0)]!, value);
    }
  });
}

/** One element of `type` at `at`, as f32 (see loadAsF32). */
export function loadOneAsF32(k: KernelBuilder, type: FloatStorage, at: AddressLike, ok?: Pred): F32 {
  const r = k.reg('f32');
  loadAsF32(k, type, [r], at, ok ? { ok } : {});
  return r;
}

/** The bf16 nearest to the f32 `bits` (ties to even), as the low half of a u32; a NaN becomes the quiet NaN. */
export function roundToBf16(k: KernelBuilder, bits: R32): R32 {
  const lsb = k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), bits, 16), 1);
  const rounded = k.add('u32', k.reg('u32'), k.add('u32', k.reg('u32'), bits, 0x7fff), lsb);
  k.shr('b32', rounded, rounded, 16);
  const magnitude = k.and('b32', k.reg('u32'), bits, 0x7fffffff);
  const nan = k.setp('gt', 'u32', k.reg('pred'), magnitude, 0x7f800000);
  const quiet = k.or(
    'b32',
    k.reg('u32'),
    k.and('b32', k.reg('u32'), k.shr('b32', k.reg('u32'), bits, 16), 0x8000),
    0x7fc0,
  );
  return k.selp('b32', k.reg('u32'), quiet, rounded, nan);
}

/** The 16 bits of `value` rounded to a half type (nearest even). */
export function toHalfBits(k: KernelBuilder, type: 'f16' | 'bf16', value: F32): R16 {
  if (type === 'f16') return k.cvt('f16', 'f32', k.reg('b16'), value, { rnd: 'rn' });
  const bits = k.mov('b32', k.reg('u32'), value);
  return k.cvt('u16', 'u32', k.reg('b16'), roundToBf16(k, bits));
}

/** Stores an f32 value as one element of `type` at `at`, rounded to nearest even. */
export function storeFromF32(k: KernelBuilder, type: FloatStorage, at: AddressLike, value: F32): void {
  if (type === 'f32') k.stGlobal('f32', at, value);
  else k.stGlobal('b16', at, toHalfBits(k, type, value));
}

/**
 * Converts f32 values (1, 2 or 4) to `type` at once and returns their stores
 * at consecutive elements, to emit later (under a predicate, say): f32 as
 * one access, halves one by one.
 */
export function storesOf(
  k: KernelBuilder,
  type: FloatStorage,
  values: readonly F32[],
): (at: AddressLike) => void {
  if (type === 'f32') return (at) => k.stGlobal('f32', at, asVector(values));
  const bits = values.map((v) => toHalfBits(k, type, v));
  return (at) => {
    bits.forEach((b, j) => {
      k.stGlobal('b16', offsetBy(at, j * 2), b);
    });
  };
}

/** Zeroes a tensor of any float storage: whole words with a memset, a trailing half from a zeroed scratch word. */
export function fillZero(encoder: KernelEncoder, op: Operand): void {
  const words = Math.floor(op.byteLength / 4);
  if (words > 0) encoder.fill32(op.ptr, 0, words);
  if (op.byteLength % 4 !== 0) {
    const zero = encoder.scratch(4);
    encoder.fill32(zero, 0, 1);
    encoder.copy(zero, op.ptr + BigInt(words * 4), op.byteLength % 4);
  }
}
