import type {
  EntryParamType,
  HalfType,
  Int16Type,
  Int32Type,
  Int64Type,
  MemType,
  RegClass,
  ScalarType,
} from './types.js';
import { REG_DECL_TYPE } from './types.js';

/**
 * The entry a register, label, parameter or shared variable belongs to.
 * Handles carry it so that one entry's operands cannot leak into another's.
 */
export interface Scope {
  readonly entry: string;
}

/** A virtual register of one bank (`%r3`, `%f0`, `%p1`, ...). */
export class Register<C extends RegClass = RegClass> {
  constructor(
    readonly cls: C,
    readonly name: string,
    readonly scope: Scope,
  ) {}

  describe(): string {
    return `${REG_DECL_TYPE[this.cls]} register ${this.name}`;
  }

  toString(): string {
    return this.name;
  }
}

export type Pred = Register<'pred'>;
export type R16 = Register<'b16'>;
export type R32 = Register<'b32'>;
export type F32 = Register<'f32'>;
export type R64 = Register<'b64'>;

/** The register type an instruction of PTX type `T` reads or writes. */
export type RegOf<T extends ScalarType> = T extends 'pred'
  ? Pred
  : T extends 'b32'
    ? R32 | F32
    : T extends 'f32'
      ? F32
      : T extends Int32Type
        ? R32
        : T extends Int64Type | 'b64'
          ? R64
          : T extends Int16Type | 'b16' | HalfType
            ? R16
            : never;

/** An immediate of PTX type `T`: integers as numbers (or bigints for 64 bits), f32 as a number. */
export type Imm<T extends ScalarType> = T extends 'pred' | HalfType
  ? never
  : T extends Int64Type | 'b64'
    ? number | bigint
    : number;

/** A source operand: a register of the right bank or an immediate. */
export type Operand<T extends ScalarType> = RegOf<T> | Imm<T>;

/** A kernel parameter, read with `ldParam`. */
export class Param<T extends EntryParamType = EntryParamType> {
  constructor(
    readonly name: string,
    readonly type: T,
    /** The symbol it is declared as in the entry's parameter list. */
    readonly symbol: string,
    readonly scope: Scope,
  ) {}

  describe(): string {
    return `parameter '${this.name}' (${this.type === 'tensorMap' ? 'a 128-byte tensor map' : `.${this.type === 'ptr' ? 'u64' : this.type}`})`;
  }
}

/** A `.shared` variable: entry-scoped, or the module's dynamic (`.extern`) shared memory. */
export class SharedVar {
  constructor(
    readonly name: string,
    /** Size in bytes; `undefined` for dynamic shared memory, sized at launch. */
    readonly bytes: number | undefined,
    readonly align: number,
    /** The element type of a typed array (`.f32 tile[256]`), or `undefined` for `.b8` bytes. */
    readonly elemType: MemType | undefined,
    /** `undefined` for module-scope (dynamic) shared memory, usable by every entry. */
    readonly scope: Scope | undefined,
  ) {}

  describe(): string {
    return `shared variable '${this.name}'`;
  }
}

/** A branch target; created with `label()` and placed once with `place()`. */
export class Label {
  placed = false;
  referenced = false;

  constructor(
    readonly name: string,
    readonly scope: Scope,
  ) {}

  describe(): string {
    return `label ${this.name}`;
  }
}

/** A memory address: a base (register or shared variable) plus a byte offset. */
export interface Address {
  readonly base: R64 | R32 | SharedVar;
  readonly offset: number;
}

export type AddressLike = Address | R64 | R32 | SharedVar;

/** `[base + offset]` where `offset` is in bytes. */
export function addr(base: R64 | R32 | SharedVar, offset = 0): Address {
  return { base, offset };
}

/** A predicate guard on one instruction: `@%p` or `@!%p`. */
export interface Guard {
  readonly pred: Pred;
  readonly negate: boolean;
}
