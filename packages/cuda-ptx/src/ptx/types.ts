/**
 * PTX scalar types and the register classes that hold them. Each class is one
 * bank of virtual registers, declared once per entry (`.reg .b32 %r<N>;`).
 */

/** A register bank: predicates, 16-, 32- and 64-bit integers/bits, and f32. */
export type RegClass = 'pred' | 'b16' | 'b32' | 'f32' | 'b64';

/** Banks in the order their declarations are emitted. */
export const REG_CLASSES: readonly RegClass[] = ['pred', 'b16', 'b32', 'f32', 'b64'];

export const REG_PREFIX: Readonly<Record<RegClass, string>> = {
  pred: '%p',
  b16: '%rs',
  b32: '%r',
  f32: '%f',
  b64: '%rd',
};

export const REG_DECL_TYPE: Readonly<Record<RegClass, string>> = {
  pred: '.pred',
  b16: '.b16',
  b32: '.b32',
  f32: '.f32',
  b64: '.b64',
};

export type Int16Type = 'u16' | 's16';
export type Int32Type = 'u32' | 's32';
export type Int64Type = 'u64' | 's64';
export type IntType = Int16Type | Int32Type | Int64Type;
export type BitType = 'b16' | 'b32' | 'b64';
/** Half-precision types live in `.b16` registers; they are loaded, stored, moved and converted. */
export type HalfType = 'f16' | 'bf16';
export type ScalarType = 'pred' | IntType | BitType | HalfType | 'f32';
/** Types of kernel parameters. `ptr` is a 64-bit device address (`.u64`). */
export type ParamType = 'u32' | 's32' | 'f32' | 'u64' | 's64' | 'ptr';
/**
 * Types an entry parameter may have: the scalar ParamTypes, and `tensorMap`,
 * a 128-byte `CUtensorMap` passed by value (`.param .align 64 .b8 name[128]`)
 * whose address the bulk tensor copies take (`tensorMapAddress`).
 */
export type EntryParamType = ParamType | 'tensorMap';
/** Bytes (and alignment) of a `CUtensorMap`. */
export const TENSOR_MAP_BYTES = 128;
export const TENSOR_MAP_ALIGN = 64;

/** Types that can be loaded from or stored to memory. */
export type MemType = Exclude<ScalarType, 'pred'>;

export const SCALAR_TYPES: readonly ScalarType[] = [
  'pred',
  'u16',
  's16',
  'u32',
  's32',
  'u64',
  's64',
  'b16',
  'b32',
  'b64',
  'f16',
  'bf16',
  'f32',
];

export const PARAM_TYPES: readonly ParamType[] = ['u32', 's32', 'f32', 'u64', 's64', 'ptr'];
export const ENTRY_PARAM_TYPES: readonly EntryParamType[] = [...PARAM_TYPES, 'tensorMap'];

/** The PTX type a parameter type is declared and loaded as. */
export type ParamScalar<P extends ParamType> = P extends 'ptr' ? 'u64' : P;

export function paramScalar(type: ParamType): Exclude<ParamType, 'ptr'> {
  return type === 'ptr' ? 'u64' : type;
}

/** Size in bytes of a value of each type (a predicate has no memory form). */
export const TYPE_BYTES: Readonly<Record<ScalarType, number>> = {
  pred: 0,
  u16: 2,
  s16: 2,
  b16: 2,
  f16: 2,
  bf16: 2,
  u32: 4,
  s32: 4,
  b32: 4,
  f32: 4,
  u64: 8,
  s64: 8,
  b64: 8,
};

/**
 * The register classes an instruction of type `t` accepts. Bit types take any
 * register of their size, as PTX allows (`mov.b32 %r1, %f1`).
 */
export function acceptedClasses(t: ScalarType): readonly RegClass[] {
  switch (t) {
    case 'pred':
      return ['pred'];
    case 'u16':
    case 's16':
    case 'b16':
    case 'f16':
    case 'bf16':
      return ['b16'];
    case 'u32':
    case 's32':
      return ['b32'];
    case 'f32':
      return ['f32'];
    case 'b32':
      return ['b32', 'f32'];
    case 'u64':
    case 's64':
    case 'b64':
      return ['b64'];
  }
}

/** The register class a fresh register of type `t` is allocated in. */
export function classOf(t: ScalarType): RegClass {
  return acceptedClasses(t)[0]!;
}

export function isSigned(t: ScalarType): boolean {
  return t === 's16' || t === 's32' || t === 's64';
}

export function isInt(t: ScalarType): t is IntType {
  return t === 'u16' || t === 's16' || t === 'u32' || t === 's32' || t === 'u64' || t === 's64';
}

export function isFloat(t: ScalarType): t is 'f32' | HalfType {
  return t === 'f32' || t === 'f16' || t === 'bf16';
}
