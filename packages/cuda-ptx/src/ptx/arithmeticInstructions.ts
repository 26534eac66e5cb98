import { BuilderCore } from './builderCore.js';
import {
  ARITH_TYPES,
  type ArithType,
  BIT_TYPES,
  CMP_TYPES,
  type CmpOp,
  type CmpType,
  CVT_TYPES,
  type CvtOptions,
  type CvtType,
  cmpOpsFor,
  FLOAT_ROUNDINGS,
  type FloatArithOptions,
  type FloatOptions,
  type FloatRounding,
  INT_TYPES,
  type MinMaxOptions,
  type SelpType,
  SIGNED_TYPES,
  type SignedType,
  WIDE_SOURCES,
  WIDER,
  type Wider,
  type WideSource,
} from './instructionTypes.js';
import type { F32, Operand, Pred, R32, Register, RegOf } from './operands.js';
import type { BitType, IntType, ScalarType } from './types.js';

/** The arithmetic, bitwise, compare-and-select and conversion instructions of KernelBuilder. */
export abstract class ArithmeticInstructions extends BuilderCore {
  // --------------------------------------------------------------- arithmetic

  /** `add.type d, a, b` (float options apply to f32 only). */
  add<T extends ArithType, D extends RegOf<T>>(
    type: T,
    d: D,
    a: Operand<T>,
    b: Operand<T>,
    opts?: FloatArithOptions,
  ): D {
    return this.#binary('add', type, ARITH_TYPES, d, a, b, opts);
  }

  /** `sub.type d, a, b`. */
  sub<T extends ArithType, D extends RegOf<T>>(
    type: T,
    d: D,
    a: Operand<T>,
    b: Operand<T>,
    opts?: FloatArithOptions,
  ): D {
    return this.#binary('sub', type, ARITH_TYPES, d, a, b, opts);
  }

  /** `mul{.rnd}{.ftz}{.sat}.f32 d, a, b`; integers use `mulLo`, `mulHi` or `mulWide`. */
  mul(type: 'f32', d: F32, a: Operand<'f32'>, b: Operand<'f32'>, opts?: FloatArithOptions): F32 {
    return this.#binary('mul', type, ['f32'], d, a, b, opts);
  }

  /** `mul.lo.type d, a, b`: the low half of the product. */
  mulLo<T extends IntType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>): D {
    return this.#binary('mul.lo', type, INT_TYPES, d, a, b);
  }

  /** `mul.hi.type d, a, b`: the high half of the product. */
  mulHi<T extends IntType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>): D {
    return this.#binary('mul.hi', type, INT_TYPES, d, a, b);
  }

  /** `mul.wide.type d, a, b`: the full product, twice as wide as the sources. */
  mulWide<T extends WideSource>(type: T, d: RegOf<Wider<T>>, a: Operand<T>, b: Operand<T>): RegOf<Wider<T>> {
    const call = 'mulWide';
    this.check.oneOf(call, 'type', type, WIDE_SOURCES);
    const wide = WIDER[type]!;
    this.emit(
      `mul.wide.${type} ${this.check.reg(call, 'd', d, wide)}, ${this.check.src(call, 'a', a, type)}, ${this.check.src(call, 'b', b, type)}`,
    );
    return d;
  }

  /** `mad.lo.type d, a, b, c`: `a * b + c`, low half. */
  madLo<T extends IntType, D extends RegOf<T>>(
    type: T,
    d: D,
    a: Operand<T>,
    b: Operand<T>,
    c: Operand<T>,
  ): D {
    const call = 'madLo';
    this.check.oneOf(call, 'type', type, INT_TYPES);
    this.emit(
      `mad.lo.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.src(call, 'a', a, type)}, ${this.check.src(call, 'b', b, type)}, ${this.check.src(call, 'c', c, type)}`,
    );
    return d;
  }

  /** `mad.wide.type d, a, b, c`: `a * b + c` with a double-width product and addend. */
  madWide<T extends WideSource>(
    type: T,
    d: RegOf<Wider<T>>,
    a: Operand<T>,
    b: Operand<T>,
    c: Operand<Wider<T>>,
  ): RegOf<Wider<T>> {
    const call = 'madWide';
    this.check.oneOf(call, 'type', type, WIDE_SOURCES);
    const wide = WIDER[type]!;
    this.emit(
      `mad.wide.${type} ${this.check.reg(call, 'd', d, wide)}, ${this.check.src(call, 'a', a, type)}, ${this.check.src(call, 'b', b, type)}, ${this.check.src(call, 'c', c, wide)}`,
    );
    return d;
  }

  /** `fma.rnd{.ftz}{.sat}.f32 d, a, b, c`: `a * b + c` rounded once (round to nearest by default). */
  fma(
    type: 'f32',
    d: F32,
    a: Operand<'f32'>,
    b: Operand<'f32'>,
    c: Operand<'f32'>,
    opts: FloatArithOptions = {},
  ): F32 {
    const call = 'fma';
    this.check.oneOf(call, 'type', type, ['f32']);
    const rnd = opts.rnd ?? 'rn';
    this.check.oneOf(call, 'opts.rnd', rnd, FLOAT_ROUNDINGS);
    const mods = `.${rnd}${opts.ftz ? '.ftz' : ''}${opts.sat ? '.sat' : ''}`;
    this.emit(
      `fma${mods}.f32 ${this.check.reg(call, 'd', d, 'f32')}, ${this.check.src(call, 'a', a, 'f32')}, ${this.check.src(call, 'b', b, 'f32')}, ${this.check.src(call, 'c', c, 'f32')}`,
    );
    return d;
  }

  /**
   * `div.type d, a, b` for integers; for f32 a mode is required: `rn` (IEEE,
   * or `rz`/`rm`/`rp`), `approx` (fast, ~2 ulp) or `full` (approximate,
   * full range).
   */
  div<T extends IntType>(type: T, d: RegOf<T>, a: Operand<T>, b: Operand<T>): RegOf<T>;
  div(
    type: 'f32',
    d: F32,
    a: Operand<'f32'>,
    b: Operand<'f32'>,
    mode: FloatRounding | 'approx' | 'full',
    opts?: FloatOptions,
  ): F32;
  div(
    type: ArithType,
    d: Register,
    a: unknown,
    b: unknown,
    mode?: FloatRounding | 'approx' | 'full',
    opts: FloatOptions = {},
  ): Register {
    const call = 'div';
    this.check.oneOf(call, 'type', type, ARITH_TYPES);
    let mods = '';
    if (type === 'f32') {
      this.check.oneOf(call, 'mode', mode, [...FLOAT_ROUNDINGS, 'approx', 'full']);
      mods = `.${mode}${opts.ftz ? '.ftz' : ''}`;
    } else if (mode !== undefined) {
      this.check.noMode(call, type, mode);
    }
    this.emit(
      `div${mods}.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.src(call, 'a', a, type)}, ${this.check.src(call, 'b', b, type)}`,
    );
    return d;
  }

  /** `rem.type d, a, b`: the integer remainder. */
  rem<T extends IntType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>): D {
    return this.#binary('rem', type, INT_TYPES, d, a, b);
  }

  /** `min.type d, a, b`. */
  min<T extends ArithType, D extends RegOf<T>>(
    type: T,
    d: D,
    a: Operand<T>,
    b: Operand<T>,
    opts?: MinMaxOptions,
  ): D {
    return this.#minMax('min', type, d, a, b, opts);
  }

  /** `max.type d, a, b`. */
  max<T extends ArithType, D extends RegOf<T>>(
    type: T,
    d: D,
    a: Operand<T>,
    b: Operand<T>,
    opts?: MinMaxOptions,
  ): D {
    return this.#minMax('max', type, d, a, b, opts);
  }

  /** `neg.type d, a`. */
  neg<T extends SignedType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, opts?: FloatOptions): D {
    return this.#unarySigned('neg', type, d, a, opts);
  }

  /** `abs.type d, a`. */
  abs<T extends SignedType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, opts?: FloatOptions): D {
    return this.#unarySigned('abs', type, d, a, opts);
  }

  /** `sqrt.rn.f32` (IEEE; or `rz`/`rm`/`rp`) or `sqrt.approx.f32`. */
  sqrt(d: F32, a: Operand<'f32'>, mode: FloatRounding | 'approx' = 'rn', opts: FloatOptions = {}): F32 {
    return this.#f32Unary('sqrt', d, a, mode, [...FLOAT_ROUNDINGS, 'approx'], opts);
  }

  /** `rcp.rn.f32` (IEEE; or `rz`/`rm`/`rp`) or `rcp.approx.f32`: `1 / a`. */
  rcp(d: F32, a: Operand<'f32'>, mode: FloatRounding | 'approx', opts: FloatOptions = {}): F32 {
    return this.#f32Unary('rcp', d, a, mode, [...FLOAT_ROUNDINGS, 'approx'], opts);
  }

  /** `rsqrt.approx.f32 d, a`: `1 / sqrt(a)`. */
  rsqrt(d: F32, a: Operand<'f32'>, opts: FloatOptions = {}): F32 {
    return this.#f32Unary('rsqrt', d, a, 'approx', ['approx'], opts);
  }

  /** `ex2.approx.f32 d, a`: `2^a`. */
  ex2(d: F32, a: Operand<'f32'>, opts: FloatOptions = {}): F32 {
    return this.#f32Unary('ex2', d, a, 'approx', ['approx'], opts);
  }

  /** `lg2.approx.f32 d, a`: `log2(a)`. */
  lg2(d: F32, a: Operand<'f32'>, opts: FloatOptions = {}): F32 {
    return this.#f32Unary('lg2', d, a, 'approx', ['approx'], opts);
  }

  /** `sin.approx.f32 d, a`. */
  sin(d: F32, a: Operand<'f32'>, opts: FloatOptions = {}): F32 {
    return this.#f32Unary('sin', d, a, 'approx', ['approx'], opts);
  }

  /** `cos.approx.f32 d, a`. */
  cos(d: F32, a: Operand<'f32'>, opts: FloatOptions = {}): F32 {
    return this.#f32Unary('cos', d, a, 'approx', ['approx'], opts);
  }

  /** `tanh.approx.f32 d, a` (sm_75+, PTX 7.0+). */
  tanh(d: F32, a: Operand<'f32'>): F32 {
    this.check.require('tanh', 'tanh.approx.f32', { sm: 75, ptx: '7.0' });
    return this.#f32Unary('tanh', d, a, 'approx', ['approx'], {});
  }

  // ------------------------------------------------------------------ bitwise

  /** `and.type d, a, b` (bits or predicates). */
  and<T extends BitType | 'pred', D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>): D {
    return this.#binary('and', type, [...BIT_TYPES, 'pred'], d, a, b);
  }

  /** `or.type d, a, b`. */
  or<T extends BitType | 'pred', D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>): D {
    return this.#binary('or', type, [...BIT_TYPES, 'pred'], d, a, b);
  }

  /** `xor.type d, a, b`. */
  xor<T extends BitType | 'pred', D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>): D {
    return this.#binary('xor', type, [...BIT_TYPES, 'pred'], d, a, b);
  }

  /** `not.type d, a`. */
  not<T extends BitType | 'pred', D extends RegOf<T>>(type: T, d: D, a: Operand<T>): D {
    const call = 'not';
    this.check.oneOf(call, 'type', type, [...BIT_TYPES, 'pred']);
    this.emit(`not.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.src(call, 'a', a, type)}`);
    return d;
  }

  /** `shl.type d, a, b`: shift left by `b` bits (a u32). */
  shl<T extends BitType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<'u32'>): D {
    return this.#shift('shl', type, BIT_TYPES, d, a, b);
  }

  /** `shr.type d, a, b`: shift right by `b` bits; signed types shift in the sign. */
  shr<T extends BitType | IntType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<'u32'>): D {
    return this.#shift('shr', type, [...BIT_TYPES, ...INT_TYPES], d, a, b);
  }

  /**
   * `prmt.b32 d, a, b, selector`: byte i of d is byte `selector` nibble i
   * (0–7) of the pair {b, a} (a holds bytes 0–3).
   */
  prmt(d: R32, a: Operand<'b32'>, b: Operand<'b32'>, selector: number): R32 {
    const call = 'prmt';
    if (!Number.isInteger(selector) || selector < 0 || selector > 0x7777 || (selector & 0x8888) !== 0) {
      throw this.check.error(call, 'invalid byte selector', {
        argument: 'selector',
        expected: 'four nibbles of 0 to 7 (0x0000 to 0x7777)',
        actual: String(selector),
      });
    }
    this.emit(
      `prmt.b32 ${this.check.reg(call, 'd', d, 'b32')}, ${this.check.src(call, 'a', a, 'b32')}, ${this.check.src(call, 'b', b, 'b32')}, 0x${selector.toString(16).padStart(4, '0')}`,
    );
    return d;
  }

  /**
   * `dp4a.atype.btype d, a, b, c`: c plus the dot product of a's and b's four
   * bytes, each read signed (`s32`) or unsigned (`u32`); d is s32 unless
   * both are unsigned.
   */
  dp4a(
    atype: 'u32' | 's32',
    btype: 'u32' | 's32',
    d: R32,
    a: Operand<'b32'>,
    b: Operand<'b32'>,
    c: Operand<'s32'>,
  ): R32 {
    const call = 'dp4a';
    this.check.oneOf(call, 'atype', atype, ['u32', 's32']);
    this.check.oneOf(call, 'btype', btype, ['u32', 's32']);
    this.emit(
      `dp4a.${atype}.${btype} ${this.check.reg(call, 'd', d, 's32')}, ${this.check.src(call, 'a', a, 'b32')}, ${this.check.src(call, 'b', b, 'b32')}, ${this.check.src(call, 'c', c, 's32')}`,
    );
    return d;
  }

  // ------------------------------------------------------ compare and select

  /** `setp.cmp.type d, a, b`: `d = a cmp b`. */
  setp<T extends CmpType>(
    cmp: CmpOp,
    type: T,
    d: Pred,
    a: Operand<T>,
    b: Operand<T>,
    opts: FloatOptions = {},
  ): Pred {
    const call = 'setp';
    this.check.oneOf(call, 'type', type, CMP_TYPES);
    this.check.oneOf(call, 'cmp', cmp, cmpOpsFor(type), ` for .${type}`);
    const ftz = opts.ftz ? this.check.ftzF32(call, type) : '';
    this.emit(
      `setp.${cmp}${ftz}.${type} ${this.check.reg(call, 'd', d, 'pred')}, ${this.check.src(call, 'a', a, type)}, ${this.check.src(call, 'b', b, type)}`,
    );
    return d;
  }

  /** `selp.type d, a, b, c`: `d = c ? a : b`. */
  selp<T extends SelpType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>, c: Pred): D {
    const call = 'selp';
    this.check.oneOf(call, 'type', type, CMP_TYPES);
    this.emit(
      `selp.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.src(call, 'a', a, type)}, ${this.check.src(call, 'b', b, type)}, ${this.check.reg(call, 'c', c, 'pred')}`,
    );
    return d;
  }

  // ------------------------------------------------------------- conversions

  /**
   * `cvt{.rnd}{.ftz}{.sat}.dtype.atype d, a`. PTX's rounding rules are
   * enforced: float-to-int needs an integer rounding (`rzi` truncates like C),
   * int-to-float and narrowing float conversions need a float rounding, and
   * any other conversion takes none (except `f32`-to-`f32` integer rounding).
   */
  cvt<D extends CvtType, A extends CvtType>(
    dtype: D,
    atype: A,
    d: RegOf<D>,
    a: RegOf<A>,
    opts: CvtOptions = {},
  ): RegOf<D> {
    const call = 'cvt';
    this.check.oneOf(call, 'dtype', dtype, CVT_TYPES);
    this.check.oneOf(call, 'atype', atype, CVT_TYPES);
    const rnd = opts.rnd;
    this.check.cvtRoundingMode(call, dtype, atype, rnd);
    this.check.cvtTarget(call, dtype, atype);
    const mods = `${rnd ? `.${rnd}` : ''}${opts.ftz ? '.ftz' : ''}${opts.sat ? '.sat' : ''}`;
    this.emit(
      `cvt${mods}.${dtype}.${atype} ${this.check.reg(call, 'd', d, dtype)}, ${this.check.reg(call, 'a', a, atype)}`,
    );
    return d;
  }

  // ------------------------------------------------------------- internals

  #binary<R>(
    op: string,
    type: ScalarType,
    allowed: readonly ScalarType[],
    d: R,
    a: unknown,
    b: unknown,
    opts: FloatArithOptions = {},
  ): R {
    const call = op === 'mul.lo' ? 'mulLo' : op === 'mul.hi' ? 'mulHi' : op;
    this.check.oneOf(call, 'type', type, allowed);
    const mods = this.check.floatArithModifiers(call, type, opts);
    this.emit(
      `${op}${mods}.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.src(call, 'a', a, type)}, ${this.check.src(call, 'b', b, type)}`,
    );
    return d;
  }

  #shift<R>(op: string, type: ScalarType, allowed: readonly ScalarType[], d: R, a: unknown, b: unknown): R {
    this.check.oneOf(op, 'type', type, allowed);
    this.emit(
      `${op}.${type} ${this.check.reg(op, 'd', d, type)}, ${this.check.src(op, 'a', a, type)}, ${this.check.src(op, 'b', b, 'u32')}`,
    );
    return d;
  }

  #minMax<R>(op: 'min' | 'max', type: ScalarType, d: R, a: unknown, b: unknown, opts: MinMaxOptions = {}): R {
    this.check.oneOf(op, 'type', type, ARITH_TYPES);
    let mods = '';
    if (opts.ftz) mods += this.check.ftzF32(op, type);
    if (opts.nan) mods += this.check.nanPropagation(op, type);
    this.emit(
      `${op}${mods}.${type} ${this.check.reg(op, 'd', d, type)}, ${this.check.src(op, 'a', a, type)}, ${this.check.src(op, 'b', b, type)}`,
    );
    return d;
  }

  #unarySigned<R>(op: 'neg' | 'abs', type: ScalarType, d: R, a: unknown, opts: FloatOptions = {}): R {
    this.check.oneOf(op, 'type', type, SIGNED_TYPES);
    const ftz = opts.ftz ? this.check.ftzF32(op, type) : '';
    this.emit(`${op}${ftz}.${type} ${this.check.reg(op, 'd', d, type)}, ${this.check.src(op, 'a', a, type)}`);
    return d;
  }

  #f32Unary(op: string, d: F32, a: unknown, mode: string, modes: readonly string[], opts: FloatOptions): F32 {
    this.check.oneOf(op, 'mode', mode, modes);
    const ftz = opts.ftz ? '.ftz' : '';
    this.emit(
      `${op}.${mode}${ftz}.f32 ${this.check.reg(op, 'd', d, 'f32')}, ${this.check.src(op, 'a', a, 'f32')}`,
    );
    return d;
  }
}
