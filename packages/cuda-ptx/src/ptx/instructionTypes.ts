/**
 * The instruction-level vocabulary of the kernel builder: the types and
 * options its methods take, and the tables of which PTX types, modifiers and
 * special registers each instruction accepts. Kept apart from kernel.ts so
 * that the builder holds the instructions and this file the rules they obey.
 */
import type { Label, Operand, Pred } from './operands.js';
import {
  type BitType,
  type HalfType,
  type Int16Type,
  type Int32Type,
  type IntType,
  isFloat,
  isInt,
  SCALAR_TYPES,
  type ScalarType,
  TYPE_BYTES,
} from './types.js';

export type Axis = 'x' | 'y' | 'z';
export type SpecialRegister =
  | `%tid.${Axis}`
  | `%ntid.${Axis}`
  | `%ctaid.${Axis}`
  | `%nctaid.${Axis}`
  | '%laneid'
  | '%warpid'
  | '%nwarpid'
  | '%smid'
  | '%nsmid'
  | '%lanemask_eq'
  | '%lanemask_le'
  | '%lanemask_lt'
  | '%lanemask_ge'
  | '%lanemask_gt'
  | '%clock';

export const SPECIAL_REGISTERS: ReadonlySet<string> = new Set([
  ...(['tid', 'ntid', 'ctaid', 'nctaid'] as const).flatMap((r) => ['x', 'y', 'z'].map((a) => `%${r}.${a}`)),
  '%laneid',
  '%warpid',
  '%nwarpid',
  '%smid',
  '%nsmid',
  '%lanemask_eq',
  '%lanemask_le',
  '%lanemask_lt',
  '%lanemask_ge',
  '%lanemask_gt',
  '%clock',
]);

export type FloatRounding = 'rn' | 'rz' | 'rm' | 'rp';
export type IntRounding = 'rni' | 'rzi' | 'rmi' | 'rpi';
export type CmpOp =
  | 'eq'
  | 'ne'
  | 'lt'
  | 'le'
  | 'gt'
  | 'ge'
  | 'lo'
  | 'ls'
  | 'hi'
  | 'hs'
  | 'equ'
  | 'neu'
  | 'ltu'
  | 'leu'
  | 'gtu'
  | 'geu'
  | 'num'
  | 'nan';
export type ShflMode = 'up' | 'down' | 'bfly' | 'idx';
export type AtomOp = 'add' | 'min' | 'max' | 'inc' | 'dec' | 'and' | 'or' | 'xor' | 'exch';
export type LoadCache = 'ca' | 'cg' | 'cs' | 'lu' | 'cv';
export type StoreCache = 'wb' | 'cg' | 'cs' | 'wt';

/** `N` values of `X` as a tuple when `N` is a literal, else an array. */
export type Tuple<X, N extends number, Acc extends X[] = []> = number extends N
  ? X[]
  : Acc['length'] extends N
    ? Acc
    : Tuple<X, N, [...Acc, X]>;
export type Vec2<X> = readonly [X, X];
export type Vec4<X> = readonly [X, X, X, X];
/** A load destination or store source: one register, or a `.v2` / `.v4` vector of them. */
export type VecOf<X> = X | Vec2<X> | Vec4<X>;

export type ArithType = IntType | 'f32';
export type SignedType = 's16' | 's32' | 's64' | 'f32';
export type CmpType = IntType | BitType | 'f32';
export type SelpType = IntType | BitType | 'f32';
export type CvtType = IntType | HalfType | 'f32';
export type WideSource = Int16Type | Int32Type;
/** The result type of a `.wide` multiply of `T`. */
export type Wider<T extends WideSource> = T extends 'u16'
  ? 'u32'
  : T extends 's16'
    ? 's32'
    : T extends 'u32'
      ? 'u64'
      : 's64';

export interface FloatOptions {
  /** Flush subnormal inputs and results to sign-preserving zero. */
  readonly ftz?: boolean;
}
export interface FloatArithOptions extends FloatOptions {
  /** Rounding mode; PTX's default (round to nearest even, fusable into fma) when omitted. */
  readonly rnd?: FloatRounding;
  /** Clamp the result to [0, 1]. */
  readonly sat?: boolean;
}
export interface MinMaxOptions extends FloatOptions {
  /** Propagate NaN instead of returning the other operand (sm_80+). */
  readonly nan?: boolean;
}
export interface CvtOptions extends FloatOptions {
  /**
   * Rounding: a float rounding (`rn`, ...) for int-to-float and narrowing
   * float conversions, an integer rounding (`rzi`, ...) for float-to-int.
   * PTX requires one exactly where it can lose precision and forbids it elsewhere.
   */
  readonly rnd?: FloatRounding | IntRounding;
  /** Saturate to the destination's range (float: [0, 1]). */
  readonly sat?: boolean;
}
export interface LoadOptions {
  /** Read through the non-coherent (read-only) cache: the data must not be written during the kernel. */
  readonly nc?: boolean;
  readonly cache?: LoadCache;
  /**
   * `.L2::{64,128,256}B`: L2 fetches this many bytes around the address, a
   * hint for streams read once (PTX 7.4; 256 needs sm_80).
   */
  readonly prefetch?: L2Prefetch;
}
export type L2Prefetch = 64 | 128 | 256;
export interface StoreOptions {
  readonly cache?: StoreCache;
}
export interface ShflOptions {
  /** Clamp / segment mask operand; 0 for `up`, 31 otherwise (whole warp). */
  readonly c?: Operand<'b32'>;
  /** Participating lanes; the whole warp by default. */
  readonly membermask?: Operand<'b32'>;
  /** Set to whether the source lane was in range. */
  readonly pred?: Pred;
}
export interface LoopOptions {
  /** Compare the counter as signed (`s32`/`s64`) rather than unsigned. */
  readonly signed?: boolean;
}
/** Labels a loop body can branch to: `exit` leaves the loop, `next` starts the next iteration. */
export interface LoopControl {
  readonly exit: Label;
  readonly next: Label;
}

export const ARITH_TYPES: readonly ScalarType[] = ['u16', 's16', 'u32', 's32', 'u64', 's64', 'f32'];
export const INT_TYPES: readonly ScalarType[] = ['u16', 's16', 'u32', 's32', 'u64', 's64'];
export const BIT_TYPES: readonly ScalarType[] = ['b16', 'b32', 'b64'];
export const SIGNED_TYPES: readonly ScalarType[] = ['s16', 's32', 's64', 'f32'];
export const CMP_TYPES: readonly ScalarType[] = [...INT_TYPES, ...BIT_TYPES, 'f32'];
export const CVT_TYPES: readonly ScalarType[] = [...INT_TYPES, 'f16', 'bf16', 'f32'];
export const MEM_TYPES: readonly ScalarType[] = SCALAR_TYPES.filter((t) => t !== 'pred');
export const WIDE_SOURCES: readonly ScalarType[] = ['u16', 's16', 'u32', 's32'];
export const WIDER: Readonly<Record<string, ScalarType>> = { u16: 'u32', s16: 's32', u32: 'u64', s32: 's64' };
export const FLOAT_ROUNDINGS: readonly string[] = ['rn', 'rz', 'rm', 'rp'];
export const INT_ROUNDINGS: readonly string[] = ['rni', 'rzi', 'rmi', 'rpi'];
const ORDERED_CMP: readonly string[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge'];
const UNSIGNED_CMP: readonly string[] = ['lo', 'ls', 'hi', 'hs'];
const FLOAT_ONLY_CMP: readonly string[] = ['equ', 'neu', 'ltu', 'leu', 'gtu', 'geu', 'num', 'nan'];
/** The comparisons `setp` takes for `type`: bit types compare only for equality. */
export function cmpOpsFor(type: ScalarType): readonly string[] {
  if (type === 'f32') return [...ORDERED_CMP, ...FLOAT_ONLY_CMP];
  if (type.startsWith('b')) return ['eq', 'ne'];
  return type.startsWith('u') ? [...ORDERED_CMP, ...UNSIGNED_CMP] : ORDERED_CMP;
}
export const SHFL_MODES: readonly string[] = ['up', 'down', 'bfly', 'idx'];
export const LOAD_CACHES: readonly string[] = ['ca', 'cg', 'cs', 'lu', 'cv'];
export const NC_CACHES: readonly string[] = ['ca', 'cg', 'cs'];
export const L2_PREFETCH_SIZES: readonly string[] = ['64', '128', '256'];
export const STORE_CACHES: readonly string[] = ['wb', 'cg', 'cs', 'wt'];
export const ATOM_TYPES: Readonly<Record<AtomOp, readonly ScalarType[]>> = {
  add: ['u32', 's32', 'u64', 'f32'],
  min: ['u32', 's32', 'u64', 's64'],
  max: ['u32', 's32', 'u64', 's64'],
  inc: ['u32'],
  dec: ['u32'],
  and: ['b32', 'b64'],
  or: ['b32', 'b64'],
  xor: ['b32', 'b64'],
  exch: ['b32', 'b64'],
};
/** Which rounding PTX requires for `cvt.dtype.atype`. */
export function cvtRounding(dtype: ScalarType, atype: ScalarType): 'int' | 'float' | 'none' | 'optional-int' {
  if (isFloat(atype) && isInt(dtype)) return 'int';
  if (isInt(atype) && isFloat(dtype)) return 'float';
  if (isFloat(atype) && isFloat(dtype)) {
    if (TYPE_BYTES[dtype] < TYPE_BYTES[atype]) return 'float';
    if (dtype === atype) return 'optional-int';
    return 'none';
  }
  return 'none';
}
