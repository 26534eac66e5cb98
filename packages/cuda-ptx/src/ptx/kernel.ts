import { misuse } from './errors.js';
import {
  ARITH_TYPES,
  type ArithType,
  type AtomOp,
  type Axis,
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
  LOAD_CACHES,
  type LoadOptions,
  type LoopControl,
  type LoopOptions,
  MEM_TYPES,
  type MinMaxOptions,
  NC_CACHES,
  type SelpType,
  SHFL_MODES,
  type ShflMode,
  type ShflOptions,
  SIGNED_TYPES,
  type SignedType,
  type SpecialRegister,
  STORE_CACHES,
  type StoreOptions,
  type Tuple,
  type VecOf,
  WIDE_SOURCES,
  WIDER,
  type Wider,
  type WideSource,
} from './instructionTypes.js';
import { OperandChecks } from './operandChecks.js';
import {
  type AddressLike,
  type F32,
  type Guard,
  Label,
  type Operand,
  type Param,
  type Pred,
  type R32,
  type R64,
  Register,
  type RegOf,
  type Scope,
  SharedVar,
} from './operands.js';
import {
  type BitType,
  classOf,
  type IntType,
  type MemType,
  type ParamScalar,
  type ParamType,
  paramScalar,
  REG_CLASSES,
  REG_DECL_TYPE,
  REG_PREFIX,
  type RegClass,
  SCALAR_TYPES,
  type ScalarType,
  TYPE_BYTES,
} from './types.js';

/** Everything one entry accumulates while its body is built; the module renders it. */
export interface EntryState {
  readonly scope: Scope;
  readonly target: string;
  readonly version: string;
  readonly counts: Record<RegClass, number>;
  readonly lines: string[];
  readonly shared: SharedVar[];
  readonly labels: Label[];
  /** Symbols declared in the module's scope (entries, dynamic shared memory). */
  readonly moduleSymbols: ReadonlySet<string>;
  /** Symbols declared in this entry (parameters, shared variables). */
  readonly symbols: Set<string>;
  nextLabelId: number;
  finished: boolean;
}

const INDENT = '  ';
const FULL_MASK = 0xffffffff;

/**
 * Builds the body of one kernel entry: registers, shared memory, labels and
 * instructions, in program order. Each instruction method takes its operands
 * in PTX order (destination first) and returns the destination, so results
 * can be used inline. Operand types are checked by TypeScript through the
 * type argument and again at run time, where a mismatch throws an
 * InvalidArgumentError naming the call, the argument and both types.
 */
export class KernelBuilder {
  readonly #s: EntryState;
  readonly #check: OperandChecks;
  #depth = 1;
  #guard: Guard | undefined;

  constructor(state: EntryState) {
    this.#s = state;
    this.#check = new OperandChecks(state);
  }

  /** The entry's name. */
  get name(): string {
    return this.#s.scope.entry;
  }

  /** The module's `.target`, e.g. `sm_75`. */
  get target(): string {
    return this.#s.target;
  }

  // ---------------------------------------------------------------- registers

  /** A fresh virtual register for values of `type`. */
  reg<T extends ScalarType>(type: T): RegOf<T> {
    this.#live('reg');
    this.#check.oneOf('reg', 'type', type, SCALAR_TYPES);
    return this.#alloc(classOf(type)) as RegOf<T>;
  }

  /** `count` fresh registers for values of `type`; a literal count gives a tuple (e.g. for `.v4`). */
  regs<T extends ScalarType, N extends number>(type: T, count: N): Tuple<RegOf<T>, N> {
    this.#check.count('regs', 'count', count, 0);
    return Array.from({ length: count }, () => this.reg(type)) as Tuple<RegOf<T>, N>;
  }

  // ------------------------------------------------------------ shared memory

  /** `.shared .align A .b8 name[bytes];` in this entry. */
  shared(name: string, bytes: number, align = 16): SharedVar {
    return this.#declareShared('shared', name, bytes, align, undefined);
  }

  /** `.shared .align A .type name[length];`: a typed shared array. */
  sharedArray(name: string, type: MemType, length: number, align?: number): SharedVar {
    this.#check.oneOf('sharedArray', 'type', type, MEM_TYPES);
    const bytes = TYPE_BYTES[type];
    this.#check.count('sharedArray', 'length', length, 1);
    return this.#declareShared('sharedArray', name, bytes * length, align ?? Math.max(bytes, 4), type);
  }

  // ------------------------------------------------------- parameters & moves

  /** `ld.param`: a parameter's value in a fresh register (or in `d`). */
  ldParam<P extends ParamType>(param: Param<P>, d?: RegOf<ParamScalar<P>>): RegOf<ParamScalar<P>> {
    const call = 'ldParam';
    this.#live(call);
    this.#check.entryParam(call, param);
    const t = paramScalar(param.type);
    const dst = d ?? this.#alloc(classOf(t));
    this.#emit(`ld.param.${t} ${this.#check.reg(call, 'd', dst, t)}, [${param.symbol}]`);
    return dst as RegOf<ParamScalar<P>>;
  }

  /** A pointer parameter as a global-space address: `ld.param.u64` then `cvta.to.global.u64`. */
  globalPointer(param: Param<'ptr' | 'u64'>): R64 {
    const generic = this.ldParam(param) as R64;
    return this.cvtaToGlobal(this.reg('u64'), generic);
  }

  /** `cvta.to.global.u64 d, a`: a generic address as a global-space address. */
  cvtaToGlobal(d: R64, a: R64): R64 {
    const call = 'cvtaToGlobal';
    this.#emit(
      `cvta.to.global.u64 ${this.#check.reg(call, 'd', d, 'u64')}, ${this.#check.reg(call, 'a', a, 'u64')}`,
    );
    return d;
  }

  /** `mov.type d, a`. */
  mov<T extends ScalarType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>): D {
    const call = 'mov';
    this.#check.oneOf(call, 'type', type, SCALAR_TYPES);
    this.#emit(`mov.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.src(call, 'a', a, type)}`);
    return d;
  }

  /** `mov.u32 d, name`: the 32-bit shared-window address of a shared variable. */
  sharedAddress(v: SharedVar, d?: R32): R32 {
    const call = 'sharedAddress';
    this.#live(call);
    this.#check.sharedVar(call, 'v', v);
    const dst = d ?? this.reg('u32');
    this.#emit(`mov.u32 ${this.#check.reg(call, 'd', dst, 'u32')}, ${v.name}`);
    return dst;
  }

  /** `mov.u32 d, %sreg`: a special register in a fresh register (or in `d`). */
  special(sreg: SpecialRegister, d?: R32): R32 {
    const call = 'special';
    this.#live(call);
    this.#check.specialRegister(call, sreg);
    const dst = d ?? this.reg('u32');
    this.#emit(`mov.u32 ${this.#check.reg(call, 'd', dst, 'u32')}, ${sreg}`);
    return dst;
  }

  /** `%tid.axis`: the thread's index in its block. */
  tid(axis: Axis = 'x'): R32 {
    return this.special(`%tid.${axis}`);
  }
  /** `%ntid.axis`: the block size. */
  ntid(axis: Axis = 'x'): R32 {
    return this.special(`%ntid.${axis}`);
  }
  /** `%ctaid.axis`: the block's index in the grid. */
  ctaid(axis: Axis = 'x'): R32 {
    return this.special(`%ctaid.${axis}`);
  }
  /** `%nctaid.axis`: the grid size in blocks. */
  nctaid(axis: Axis = 'x'): R32 {
    return this.special(`%nctaid.${axis}`);
  }
  /** `%laneid`: the thread's lane in its warp. */
  laneid(): R32 {
    return this.special('%laneid');
  }

  // ------------------------------------------------------------------ memory

  /** `ld.global{.cop}{.nc}{.L2::NB}{.v2|.v4}.type d, [a]`. */
  ldGlobal<T extends MemType, D extends VecOf<RegOf<T>>>(
    type: T,
    d: D,
    a: AddressLike,
    opts: LoadOptions = {},
  ): D {
    const call = 'ldGlobal';
    this.#check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.#check.vector(call, 'd', d, type);
    if (opts.cache !== undefined) {
      this.#check.oneOf(call, 'opts.cache', opts.cache, opts.nc ? NC_CACHES : LOAD_CACHES);
    }
    const cop = opts.cache ? `.${opts.cache}` : '';
    const nc = opts.nc ? '.nc' : '';
    const prefetch = opts.prefetch === undefined ? '' : this.#check.l2Prefetch(call, opts.prefetch);
    this.#emit(
      `ld.global${cop}${nc}${prefetch}${vec}.${type} ${text}, ${this.#check.address(call, 'a', a, 'global')}`,
    );
    return d;
  }

  /** `st.global{.cop}{.v2|.v4}.type [a], b`. */
  stGlobal<T extends MemType>(
    type: T,
    a: AddressLike,
    b: VecOf<RegOf<T>> | Operand<T>,
    opts: StoreOptions = {},
  ): void {
    const call = 'stGlobal';
    this.#check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.#check.vector(call, 'b', b, type, true);
    if (opts.cache !== undefined) this.#check.oneOf(call, 'opts.cache', opts.cache, STORE_CACHES);
    const cop = opts.cache ? `.${opts.cache}` : '';
    this.#emit(`st.global${cop}${vec}.${type} ${this.#check.address(call, 'a', a, 'global')}, ${text}`);
  }

  /** `ld.shared{.v2|.v4}.type d, [a]`. */
  ldShared<T extends MemType, D extends VecOf<RegOf<T>>>(type: T, d: D, a: AddressLike): D {
    const call = 'ldShared';
    this.#check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.#check.vector(call, 'd', d, type);
    this.#emit(`ld.shared${vec}.${type} ${text}, ${this.#check.address(call, 'a', a, 'shared')}`);
    return d;
  }

  /** `st.shared{.v2|.v4}.type [a], b`. */
  stShared<T extends MemType>(type: T, a: AddressLike, b: VecOf<RegOf<T>> | Operand<T>): void {
    const call = 'stShared';
    this.#check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.#check.vector(call, 'b', b, type, true);
    this.#emit(`st.shared${vec}.${type} ${this.#check.address(call, 'a', a, 'shared')}, ${text}`);
  }

  /** `atom.space.op.type d, [a], b`: returns the old value in `d`. */
  atom<T extends ScalarType, D extends RegOf<T>>(
    space: 'global' | 'shared',
    op: AtomOp,
    type: T,
    d: D,
    a: AddressLike,
    b: Operand<T>,
  ): D {
    const call = 'atom';
    this.#check.atomArgs(call, space, op, type);
    this.#emit(
      `atom.${space}.${op}.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.address(call, 'a', a, space)}, ${this.#check.src(call, 'b', b, type)}`,
    );
    return d;
  }

  /** `atom.space.cas.type d, [a], b, c`: store `c` where the value equals `b`; `d` gets the old value. */
  atomCas<T extends 'b32' | 'b64', D extends RegOf<T>>(
    space: 'global' | 'shared',
    type: T,
    d: D,
    a: AddressLike,
    b: Operand<T>,
    c: Operand<T>,
  ): D {
    const call = 'atomCas';
    this.#check.oneOf(call, 'space', space, ['global', 'shared']);
    this.#check.oneOf(call, 'type', type, ['b32', 'b64']);
    this.#emit(
      `atom.${space}.cas.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.address(call, 'a', a, space)}, ${this.#check.src(call, 'b', b, type)}, ${this.#check.src(call, 'c', c, type)}`,
    );
    return d;
  }

  /** `red.space.op.type [a], b`: an atomic update whose old value is not needed. */
  red<T extends ScalarType>(
    space: 'global' | 'shared',
    op: AtomOp,
    type: T,
    a: AddressLike,
    b: Operand<T>,
  ): void {
    const call = 'red';
    this.#check.atomArgs(call, space, op, type);
    this.#check.redOp(call, op);
    this.#emit(
      `red.${space}.${op}.${type} ${this.#check.address(call, 'a', a, space)}, ${this.#check.src(call, 'b', b, type)}`,
    );
  }

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
    this.#check.oneOf(call, 'type', type, WIDE_SOURCES);
    const wide = WIDER[type]!;
    this.#emit(
      `mul.wide.${type} ${this.#check.reg(call, 'd', d, wide)}, ${this.#check.src(call, 'a', a, type)}, ${this.#check.src(call, 'b', b, type)}`,
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
    this.#check.oneOf(call, 'type', type, INT_TYPES);
    this.#emit(
      `mad.lo.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.src(call, 'a', a, type)}, ${this.#check.src(call, 'b', b, type)}, ${this.#check.src(call, 'c', c, type)}`,
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
    this.#check.oneOf(call, 'type', type, WIDE_SOURCES);
    const wide = WIDER[type]!;
    this.#emit(
      `mad.wide.${type} ${this.#check.reg(call, 'd', d, wide)}, ${this.#check.src(call, 'a', a, type)}, ${this.#check.src(call, 'b', b, type)}, ${this.#check.src(call, 'c', c, wide)}`,
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
    this.#check.oneOf(call, 'type', type, ['f32']);
    const rnd = opts.rnd ?? 'rn';
    this.#check.oneOf(call, 'opts.rnd', rnd, FLOAT_ROUNDINGS);
    const mods = `.${rnd}${opts.ftz ? '.ftz' : ''}${opts.sat ? '.sat' : ''}`;
    this.#emit(
      `fma${mods}.f32 ${this.#check.reg(call, 'd', d, 'f32')}, ${this.#check.src(call, 'a', a, 'f32')}, ${this.#check.src(call, 'b', b, 'f32')}, ${this.#check.src(call, 'c', c, 'f32')}`,
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
    this.#check.oneOf(call, 'type', type, ARITH_TYPES);
    let mods = '';
    if (type === 'f32') {
      this.#check.oneOf(call, 'mode', mode, [...FLOAT_ROUNDINGS, 'approx', 'full']);
      mods = `.${mode}${opts.ftz ? '.ftz' : ''}`;
    } else if (mode !== undefined) {
      this.#check.noMode(call, type, mode);
    }
    this.#emit(
      `div${mods}.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.src(call, 'a', a, type)}, ${this.#check.src(call, 'b', b, type)}`,
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
    this.#check.require('tanh', 'tanh.approx.f32', { sm: 75, ptx: '7.0' });
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
    this.#check.oneOf(call, 'type', type, [...BIT_TYPES, 'pred']);
    this.#emit(`not.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.src(call, 'a', a, type)}`);
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
    this.#check.oneOf(call, 'type', type, CMP_TYPES);
    this.#check.oneOf(call, 'cmp', cmp, cmpOpsFor(type), ` for .${type}`);
    const ftz = opts.ftz ? this.#check.ftzF32(call, type) : '';
    this.#emit(
      `setp.${cmp}${ftz}.${type} ${this.#check.reg(call, 'd', d, 'pred')}, ${this.#check.src(call, 'a', a, type)}, ${this.#check.src(call, 'b', b, type)}`,
    );
    return d;
  }

  /** `selp.type d, a, b, c`: `d = c ? a : b`. */
  selp<T extends SelpType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>, b: Operand<T>, c: Pred): D {
    const call = 'selp';
    this.#check.oneOf(call, 'type', type, CMP_TYPES);
    this.#emit(
      `selp.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.src(call, 'a', a, type)}, ${this.#check.src(call, 'b', b, type)}, ${this.#check.reg(call, 'c', c, 'pred')}`,
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
    this.#check.oneOf(call, 'dtype', dtype, CVT_TYPES);
    this.#check.oneOf(call, 'atype', atype, CVT_TYPES);
    const rnd = opts.rnd;
    this.#check.cvtRoundingMode(call, dtype, atype, rnd);
    this.#check.cvtTarget(call, dtype, atype);
    const mods = `${rnd ? `.${rnd}` : ''}${opts.ftz ? '.ftz' : ''}${opts.sat ? '.sat' : ''}`;
    this.#emit(
      `cvt${mods}.${dtype}.${atype} ${this.#check.reg(call, 'd', d, dtype)}, ${this.#check.reg(call, 'a', a, atype)}`,
    );
    return d;
  }

  // ---------------------------------------------------------- control flow

  /** A new, not yet placed label; its name is unique in the entry (`$L__hint<N>`). */
  label(hint = 'L'): Label {
    this.#live('label');
    this.#check.labelHint('label', hint);
    return this.#newLabel(`${hint}${this.#s.nextLabelId++}`);
  }

  /** Places `label` here (`name:`); each label is placed once. */
  place(label: Label): void {
    const call = 'place';
    this.#live(call);
    this.#check.label(call, label);
    if (label.placed) {
      throw this.#check.error(call, 'label placed twice', {
        argument: 'label',
        expected: 'a label not yet placed',
        actual: label.describe(),
      });
    }
    if (this.#guard) {
      throw this.#check.error(call, 'a label cannot be placed inside predicated()', {
        argument: 'label',
      });
    }
    label.placed = true;
    this.#s.lines.push(`${label.name}:`);
  }

  /** `bra label` (`bra.uni` when every thread of the warp takes it). */
  bra(label: Label, opts: { uni?: boolean } = {}): void {
    this.#check.label('bra', label);
    label.referenced = true;
    this.#emit(`bra${opts.uni ? '.uni' : ''} ${label.name}`);
  }

  /** `@p bra label`. */
  braIf(p: Pred, label: Label): void {
    this.#predBra('braIf', p, label, false);
  }

  /** `@!p bra label`. */
  braIfNot(p: Pred, label: Label): void {
    this.#predBra('braIfNot', p, label, true);
  }

  /** Every instruction emitted by `body` is guarded by `@p` (or `@!p` with `negate`). */
  predicated(p: Pred, body: () => void, opts: { negate?: boolean } = {}): void {
    const call = 'predicated';
    this.#live(call);
    this.#check.reg(call, 'p', p, 'pred');
    if (this.#guard) {
      throw this.#check.error(call, 'predicated() cannot be nested', {
        argument: 'p',
        expected: 'no enclosing predicated()',
        actual: `inside @${this.#guard.negate ? '!' : ''}${this.#guard.pred.name}`,
      });
    }
    this.#guard = { pred: p, negate: opts.negate ?? false };
    try {
      body();
    } finally {
      this.#guard = undefined;
    }
  }

  /** `bar.sync id{, threads}`: waits for the block's threads (or `threads` of them). */
  barSync(id = 0, threads?: number): void {
    const call = 'barSync';
    this.#check.count(call, 'id', id, 0, 15);
    if (threads !== undefined) this.#check.barrierThreads(call, threads);
    this.#emit(`bar.sync ${id}${threads === undefined ? '' : `, ${threads}`}`);
  }

  /** `bar.warp.sync membermask`. */
  warpSync(membermask: Operand<'b32'> = FULL_MASK): void {
    this.#emit(`bar.warp.sync ${this.#check.mask('warpSync', 'membermask', membermask)}`);
  }

  /** `membar.level`: orders this thread's memory accesses as seen by the block, the GPU or the system. */
  membar(level: 'cta' | 'gl' | 'sys'): void {
    this.#check.oneOf('membar', 'level', level, ['cta', 'gl', 'sys']);
    this.#emit(`membar.${level}`);
  }

  /**
   * `shfl.sync.mode.b32 d{|p}, a, b, c, membermask`: exchange a 32-bit value
   * between the lanes of a warp; `b` is the lane or lane offset.
   */
  shflSync<D extends R32 | F32>(
    mode: ShflMode,
    d: D,
    a: R32 | F32,
    b: Operand<'u32'>,
    opts: ShflOptions = {},
  ): D {
    const call = 'shflSync';
    this.#check.oneOf(call, 'mode', mode, SHFL_MODES);
    const c = opts.c ?? (mode === 'up' ? 0 : 31);
    const dst = this.#check.reg(call, 'd', d, 'b32');
    const pred = opts.pred === undefined ? '' : `|${this.#check.reg(call, 'opts.pred', opts.pred, 'pred')}`;
    this.#emit(
      `shfl.sync.${mode}.b32 ${dst}${pred}, ${this.#check.reg(call, 'a', a, 'b32')}, ${this.#check.src(call, 'b', b, 'u32')}, ${this.#check.src(call, 'opts.c', c, 'b32')}, ${this.#check.mask(call, 'opts.membermask', opts.membermask ?? FULL_MASK)}`,
    );
    return d;
  }

  /** `vote.sync.ballot.b32 d, p, membermask`: one bit per lane whose `p` is true. */
  voteBallot(d: R32, p: Pred, membermask: Operand<'b32'> = FULL_MASK): R32 {
    const call = 'voteBallot';
    this.#emit(
      `vote.sync.ballot.b32 ${this.#check.reg(call, 'd', d, 'b32')}, ${this.#check.reg(call, 'p', p, 'pred')}, ${this.#check.mask(call, 'membermask', membermask)}`,
    );
    return d;
  }

  /** `vote.sync.mode.pred d, p, membermask`: whether `p` holds in any / all lanes. */
  vote(mode: 'any' | 'all', d: Pred, p: Pred, membermask: Operand<'b32'> = FULL_MASK): Pred {
    const call = 'vote';
    this.#check.oneOf(call, 'mode', mode, ['any', 'all']);
    this.#emit(
      `vote.sync.${mode}.pred ${this.#check.reg(call, 'd', d, 'pred')}, ${this.#check.reg(call, 'p', p, 'pred')}, ${this.#check.mask(call, 'membermask', membermask)}`,
    );
    return d;
  }

  /** `ret`: ends the thread. */
  ret(): void {
    this.#emit('ret');
  }

  /** A `// text` line in the output, to make generated code easier to read. */
  comment(text: string): void {
    this.#live('comment');
    for (const line of text.split('\n')) this.#s.lines.push(`${this.#indent()}// ${line}`.trimEnd());
  }

  // ------------------------------------------------------ structured helpers

  /** Runs `body` only where `p` holds (`@!p bra` past it). */
  ifThen(p: Pred, body: () => void): void {
    const call = 'ifThen';
    this.#structured(call);
    const id = this.#s.nextLabelId++;
    const end = this.#newLabel(`if${id}_end`);
    this.#predBra(call, p, end, true);
    this.#nested(body);
    this.place(end);
  }

  /** Runs `then` where `p` holds and `otherwise` elsewhere. */
  ifElse(p: Pred, then: () => void, otherwise: () => void): void {
    const call = 'ifElse';
    this.#structured(call);
    const id = this.#s.nextLabelId++;
    const elseLabel = this.#newLabel(`if${id}_else`);
    const end = this.#newLabel(`if${id}_end`);
    this.#predBra(call, p, elseLabel, true);
    this.#nested(then);
    this.bra(end);
    this.place(elseLabel);
    this.#nested(otherwise);
    this.place(end);
  }

  /**
   * `if (index < bound) body`: the bounds guard of elementwise kernels; threads
   * past the bound branch over the body. Compared unsigned unless `signed`.
   */
  guard<C extends R32 | R64>(index: C, bound: C | number, body: () => void, opts: LoopOptions = {}): void {
    const call = 'guard';
    this.#structured(call);
    const type = this.#check.counterType(call, 'index', index, opts);
    const id = this.#s.nextLabelId++;
    const end = this.#newLabel(`guard${id}_end`);
    const p = this.reg('pred');
    this.setp('ge', type, p, index as never, bound as never);
    this.braIf(p, end);
    this.#nested(body);
    this.place(end);
  }

  /**
   * `for (counter = start; counter < end; counter += step) body`, as a
   * rotated loop (one compare and branch per iteration). `step` must be
   * positive; the comparison is unsigned unless `signed`.
   */
  forRange<C extends R32 | R64>(
    counter: C,
    start: C | number,
    end: C | number,
    step: C | number,
    body: (loop: LoopControl) => void,
    opts: LoopOptions = {},
  ): void {
    const call = 'forRange';
    this.#structured(call);
    const type = this.#check.counterType(call, 'counter', counter, opts);
    this.#check.positiveStep(call, step);
    if (start !== counter) this.mov(type, counter as never, start as never);
    const knownNonEmpty = typeof start === 'number' && typeof end === 'number' && start < end;
    this.#loop(call, type, counter, end, step, body, knownNonEmpty);
  }

  /**
   * The global thread index along `axis`: `%ctaid * %ntid + %tid`, in a
   * fresh u32 register.
   */
  globalThreadIndex(axis: Axis = 'x'): R32 {
    const ctaid = this.ctaid(axis);
    const ntid = this.ntid(axis);
    const tid = this.tid(axis);
    return this.madLo('u32', this.reg('u32'), ctaid, ntid, tid);
  }

  /**
   * A grid-stride loop over `[0, n)` along x: each thread starts at its global
   * index and steps by the whole grid's thread count, so any grid size covers
   * any `n`.
   */
  gridStrideLoop(n: R32 | number, body: (i: R32, loop: LoopControl) => void): void {
    const call = 'gridStrideLoop';
    this.#structured(call);
    const i = this.globalThreadIndex('x');
    const nctaid = this.nctaid('x');
    const ntid = this.ntid('x');
    const stride = this.mulLo('u32', this.reg('u32'), nctaid, ntid);
    this.#loop(call, 'u32', i, n, stride, (loop) => body(i, loop), false);
  }

  /**
   * The global address of element `index` of an array at `base`:
   * `mad.wide.u32 d, index, elemBytes, base`.
   */
  elementAddress(base: R64, index: R32 | number, elemBytes: number, d?: R64): R64 {
    this.#check.count('elementAddress', 'elemBytes', elemBytes, 1);
    return this.madWide('u32', d ?? this.reg('u64'), index, elemBytes, base);
  }

  // ------------------------------------------------------------- internals

  #live(call: string): void {
    if (this.#s.finished) {
      throw misuse(
        this.#check.callName(call),
        `entry '${this.name}' is finished; builders live only inside their entry's body`,
      );
    }
  }

  #indent(): string {
    return INDENT.repeat(this.#depth);
  }

  #emit(text: string): void {
    // Instruction names are fixed per method; use the opcode for the error's call.
    this.#live(text.split(/[ .]/, 1)[0] ?? text);
    const g = this.#guard;
    const guard = g ? `@${g.negate ? '!' : ''}${g.pred.name} ` : '';
    this.#s.lines.push(`${this.#indent()}${guard}${text};`);
  }

  #nested(body: () => void): void {
    this.#depth += 1;
    try {
      body();
    } finally {
      this.#depth -= 1;
    }
  }

  #alloc(cls: RegClass): Register {
    const n = this.#s.counts[cls]++;
    return new Register(cls, `${REG_PREFIX[cls]}${n}`, this.#s.scope);
  }

  #newLabel(suffix: string): Label {
    const label = new Label(`$L__${suffix}`, this.#s.scope);
    if (this.#s.labels.some((l) => l.name === label.name)) {
      // Defensive: user labels end in their number and helper labels in a word, so none collide.
      throw this.#check.error('label', 'duplicate label', {
        expected: 'a unique label name',
        actual: label.name,
      });
    }
    this.#s.labels.push(label);
    return label;
  }

  #structured(call: string): void {
    this.#live(call);
    if (this.#guard) {
      throw this.#check.error(call, 'structured control flow cannot be predicated', {
        expected: 'no enclosing predicated()',
        actual: `inside @${this.#guard.negate ? '!' : ''}${this.#guard.pred.name}`,
      });
    }
  }

  #loop(
    call: string,
    type: 'u32' | 's32' | 'u64' | 's64',
    counter: R32 | R64,
    end: unknown,
    step: unknown,
    body: (loop: LoopControl) => void,
    knownNonEmpty: boolean,
  ): void {
    const id = this.#s.nextLabelId++;
    const bodyLabel = this.#newLabel(`for${id}_body`);
    const nextLabel = this.#newLabel(`for${id}_next`);
    const exitLabel = this.#newLabel(`for${id}_end`);
    const p = this.reg('pred');
    if (!knownNonEmpty) {
      this.setp('ge', type, p, counter as never, end as never);
      this.#predBra(call, p, exitLabel, false);
    }
    this.place(bodyLabel);
    this.#nested(() => body({ exit: exitLabel, next: nextLabel }));
    if (nextLabel.referenced) this.place(nextLabel);
    this.add(type, counter as never, counter as never, step as never);
    this.setp('lt', type, p, counter as never, end as never);
    this.#predBra(call, p, bodyLabel, false);
    if (exitLabel.referenced) this.place(exitLabel);
  }

  #predBra(call: string, p: Pred, label: Label, negate: boolean): void {
    const pred = this.#check.reg(call, 'p', p, 'pred');
    this.#check.label(call, label);
    if (this.#guard) {
      throw this.#check.error(call, 'a predicated branch cannot be inside predicated()', {
        argument: 'p',
      });
    }
    label.referenced = true;
    this.#emit(`@${negate ? '!' : ''}${pred} bra ${label.name}`);
  }

  #declareShared(
    call: string,
    name: string,
    bytes: number,
    align: number,
    elemType: MemType | undefined,
  ): SharedVar {
    this.#live(call);
    this.#check.sharedDeclaration(call, name, bytes, align, this.#s.symbols, this.#s.moduleSymbols);
    const v = new SharedVar(name, bytes, align, elemType, this.#s.scope);
    this.#s.symbols.add(name);
    this.#s.shared.push(v);
    return v;
  }

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
    this.#check.oneOf(call, 'type', type, allowed);
    const mods = this.#check.floatArithModifiers(call, type, opts);
    this.#emit(
      `${op}${mods}.${type} ${this.#check.reg(call, 'd', d, type)}, ${this.#check.src(call, 'a', a, type)}, ${this.#check.src(call, 'b', b, type)}`,
    );
    return d;
  }

  #shift<R>(op: string, type: ScalarType, allowed: readonly ScalarType[], d: R, a: unknown, b: unknown): R {
    this.#check.oneOf(op, 'type', type, allowed);
    this.#emit(
      `${op}.${type} ${this.#check.reg(op, 'd', d, type)}, ${this.#check.src(op, 'a', a, type)}, ${this.#check.src(op, 'b', b, 'u32')}`,
    );
    return d;
  }

  #minMax<R>(op: 'min' | 'max', type: ScalarType, d: R, a: unknown, b: unknown, opts: MinMaxOptions = {}): R {
    this.#check.oneOf(op, 'type', type, ARITH_TYPES);
    let mods = '';
    if (opts.ftz) mods += this.#check.ftzF32(op, type);
    if (opts.nan) mods += this.#check.nanPropagation(op, type);
    this.#emit(
      `${op}${mods}.${type} ${this.#check.reg(op, 'd', d, type)}, ${this.#check.src(op, 'a', a, type)}, ${this.#check.src(op, 'b', b, type)}`,
    );
    return d;
  }

  #unarySigned<R>(op: 'neg' | 'abs', type: ScalarType, d: R, a: unknown, opts: FloatOptions = {}): R {
    this.#check.oneOf(op, 'type', type, SIGNED_TYPES);
    const ftz = opts.ftz ? this.#check.ftzF32(op, type) : '';
    this.#emit(
      `${op}${ftz}.${type} ${this.#check.reg(op, 'd', d, type)}, ${this.#check.src(op, 'a', a, type)}`,
    );
    return d;
  }

  #f32Unary(op: string, d: F32, a: unknown, mode: string, modes: readonly string[], opts: FloatOptions): F32 {
    this.#check.oneOf(op, 'mode', mode, modes);
    const ftz = opts.ftz ? '.ftz' : '';
    this.#emit(
      `${op}.${mode}${ftz}.f32 ${this.#check.reg(op, 'd', d, 'f32')}, ${this.#check.src(op, 'a', a, 'f32')}`,
    );
    return d;
  }
}

/** Declarations of the registers an entry used, one line per bank. */
export function registerDeclarations(counts: Readonly<Record<RegClass, number>>): string[] {
  return REG_CLASSES.filter((c) => counts[c] > 0).map(
    (c) => `${INDENT}.reg ${REG_DECL_TYPE[c]} ${REG_PREFIX[c]}<${counts[c]}>;`,
  );
}

/** The declaration of an entry-scoped shared variable. */
export function sharedDeclaration(v: SharedVar): string {
  const type = v.elemType ?? 'b8';
  const length = v.elemType ? (v.bytes ?? 0) / TYPE_BYTES[v.elemType] : v.bytes;
  return `${INDENT}.shared .align ${v.align} .${type} ${v.name}[${length ?? ''}];`;
}
