import type { InvalidArgumentError } from '@rayo/core';
import { describeValue, misuse } from './errors.js';
import { formatImmediate, maskLiteral } from './immediates.js';
import {
  ATOM_TYPES,
  type AtomOp,
  cvtRounding,
  FLOAT_ROUNDINGS,
  type FloatArithOptions,
  INT_ROUNDINGS,
  L2_PREFETCH_SIZES,
  type L2Prefetch,
  type LoopOptions,
  SPECIAL_REGISTERS,
} from './instructionTypes.js';
import { type Address, Label, Param, Register, type Scope, SharedVar } from './operands.js';
import { type Requirement, smNumber, versionNumber } from './target.js';
import {
  acceptedClasses,
  type EntryParamType,
  isInt,
  type MemType,
  REG_DECL_TYPE,
  type ScalarType,
  TYPE_BYTES,
} from './types.js';

/** Shared variable names are PTX identifiers. */
const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** What the checks need to know of the entry being built. */
export interface CheckContext {
  /** Registers, labels and shared variables must belong to this entry. */
  readonly scope: Scope;
  /** `.target` and `.version`, against which instruction requirements are checked. */
  readonly target: string;
  readonly version: string;
}

/**
 * The run-time checks of KernelBuilder's operands and arguments. TypeScript
 * checks them too, but kernels are also written in plain JavaScript or with
 * casts, and a wrong operand must fail at the call rather than in ptxas. Each
 * check throws an InvalidArgumentError naming the builder call, the argument
 * and the expected against the actual value; operand checks return the
 * operand's PTX text.
 */
export class OperandChecks {
  readonly #ctx: CheckContext;

  constructor(ctx: CheckContext) {
    this.#ctx = ctx;
  }

  /** Where the error happened, for the end of a message. */
  get where(): string {
    return `in entry '${this.#ctx.scope.entry}'`;
  }

  /** The call an error names as its `kernel`. */
  callName(call: string): string {
    return `KernelBuilder.${call}`;
  }

  /** The error for a misused builder call: names the call as its `kernel` and the entry in the message. */
  error(
    call: string,
    message: string,
    details?: { argument?: string; expected?: string; actual?: string },
  ): InvalidArgumentError {
    return misuse(this.callName(call), `${message} ${this.where}`, details);
  }

  /** A label made by this entry's label(). */
  label(call: string, label: unknown): asserts label is Label {
    if (!(label instanceof Label) || label.scope !== this.#ctx.scope) {
      throw this.error(call, 'expected a label of this entry', {
        argument: 'label',
        expected: `a label made by label() in entry '${this.#ctx.scope.entry}'`,
        actual: describeValue(label),
      });
    }
  }

  /** An instruction form that needs a newer `.target` or `.version` than the module's. */
  require(call: string, what: string, req: Requirement): void {
    const sm = smNumber(this.#ctx.target);
    if (sm < req.sm || versionNumber(this.#ctx.version) < versionNumber(req.ptx)) {
      throw this.error(call, `${what} needs a newer target or PTX ISA version`, {
        expected: `.target >= sm_${req.sm} and .version >= ${req.ptx}`,
        actual: `.target ${this.#ctx.target}, .version ${this.#ctx.version}`,
      });
    }
  }

  /** A type, mode or option out of a fixed list; `what` narrows the message (` for .f32`). */
  oneOf(call: string, argument: string, value: unknown, allowed: readonly string[], what = ''): void {
    if (typeof value !== 'string' || !allowed.includes(value)) {
      throw this.error(call, `unsupported ${argument}${what}`, {
        argument,
        expected: `one of ${allowed.join(', ')}`,
        actual: describeValue(value),
      });
    }
  }

  /** A whole number in [min, max]: counts, sizes, barrier ids. */
  count(call: string, argument: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): void {
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      throw this.error(call, 'expected an integer in range', {
        argument,
        expected: max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in ${min} .. ${max}`,
        actual: describeValue(value),
      });
    }
  }

  /** Integer divisions take no rounding mode. */
  noMode(call: string, type: string, mode: unknown): never {
    throw this.error(call, `.${type} takes no rounding mode`, {
      argument: 'mode',
      expected: 'none',
      actual: describeValue(mode),
    });
  }

  /** `.ftz` is defined for f32 only; returns the modifier. */
  ftzF32(call: string, type: string): string {
    if (type !== 'f32') {
      throw this.error(call, 'ftz applies to f32 only', {
        argument: 'opts.ftz',
        expected: 'type f32',
        actual: `.${type}`,
      });
    }
    return '.ftz';
  }

  /** A register operand of instruction type `type`; returns its name. */
  reg(call: string, argument: string, value: unknown, type: ScalarType): string {
    const classes = acceptedClasses(type);
    const expected = `${classes.map((c) => `${REG_DECL_TYPE[c]}`).join(' or ')} register for .${type}`;
    if (!(value instanceof Register)) {
      throw this.error(call, 'expected a register', {
        argument,
        expected,
        actual: describeValue(value),
      });
    }
    if (!classes.includes(value.cls)) {
      throw this.error(call, 'register of the wrong type', {
        argument,
        expected,
        actual: value.describe(),
      });
    }
    if (value.scope !== this.#ctx.scope) {
      throw this.error(call, 'register of another entry', {
        argument,
        expected: `a register of entry '${this.#ctx.scope.entry}'`,
        actual: `${value.describe()} of entry '${value.scope.entry}'`,
      });
    }
    return value.name;
  }

  /** A source operand: a register of `type` or an immediate. */
  src(call: string, argument: string, value: unknown, type: ScalarType): string {
    if (typeof value === 'number' || typeof value === 'bigint') {
      return formatImmediate(this.callName(call), argument, type, value, this.where);
    }
    return this.reg(call, argument, value, type);
  }

  mask(call: string, argument: string, value: unknown): string {
    if (typeof value === 'number') {
      formatImmediate(this.callName(call), argument, 'b32', value, this.where);
      return maskLiteral(value);
    }
    return this.reg(call, argument, value, 'b32');
  }

  /** One register or a `.v2`/`.v4` brace list; a store source may also be an immediate. */
  vector(
    call: string,
    argument: string,
    value: unknown,
    type: MemType,
    immediateOk = false,
  ): { text: string; vec: string } {
    if (!Array.isArray(value)) {
      return {
        text: immediateOk ? this.src(call, argument, value, type) : this.reg(call, argument, value, type),
        vec: '',
      };
    }
    const bytes = TYPE_BYTES[type] * value.length;
    if ((value.length !== 2 && value.length !== 4) || bytes > 16) {
      throw this.error(call, 'unsupported vector', {
        argument,
        expected: `2 or 4 registers of at most 16 bytes together (.${type} is ${TYPE_BYTES[type]} bytes)`,
        actual: `${value.length} registers (${bytes} bytes)`,
      });
    }
    const names = value.map((v, i) => this.reg(call, `${argument}[${i}]`, v, type));
    return { text: `{${names.join(', ')}}`, vec: `.v${value.length}` };
  }

  address(call: string, argument: string, value: unknown, space: 'global' | 'shared'): string {
    const a: Address | undefined =
      value instanceof Register || value instanceof SharedVar
        ? { base: value, offset: 0 }
        : typeof value === 'object' && value !== null && 'base' in value
          ? (value as Address)
          : undefined;
    if (!a) {
      throw this.error(call, 'expected an address', {
        argument,
        expected:
          space === 'global'
            ? 'a .b64 register or addr(base, offset)'
            : 'a register, shared variable or addr()',
        actual: describeValue(value),
      });
    }
    if (!Number.isSafeInteger(a.offset)) {
      throw this.error(call, 'address offsets are whole bytes', {
        argument: `${argument}.offset`,
        expected: 'an integer',
        actual: describeValue(a.offset),
      });
    }
    let base: string;
    if (a.base instanceof SharedVar) {
      if (space !== 'shared') {
        throw this.error(call, `a shared variable is not a ${space} address`, {
          argument,
          expected: 'a .b64 global address register',
          actual: a.base.describe(),
        });
      }
      base = this.sharedVar(call, argument, a.base);
    } else {
      base = this.reg(
        call,
        `${argument}.base`,
        a.base,
        space === 'global' ? 'u64' : a.base instanceof Register && a.base.cls === 'b64' ? 'u64' : 'u32',
      );
    }
    const off = a.offset === 0 ? '' : `+${a.offset}`;
    return `[${base}${off}]`;
  }

  sharedVar(call: string, argument: string, v: unknown): string {
    if (!(v instanceof SharedVar) || (v.scope !== undefined && v.scope !== this.#ctx.scope)) {
      throw this.error(call, 'expected a shared variable of this entry or module', {
        argument,
        expected: `shared memory declared in entry '${this.#ctx.scope.entry}' or the module`,
        actual:
          v instanceof SharedVar && v.scope
            ? `${v.describe()} of entry '${v.scope.entry}'`
            : describeValue(v),
      });
    }
    return v.name;
  }

  /** The compare type of a loop counter or guarded index: its width, signed only when asked. */
  counterType(call: string, argument: string, r: unknown, opts: LoopOptions): 'u32' | 's32' | 'u64' | 's64' {
    if (!(r instanceof Register) || (r.cls !== 'b32' && r.cls !== 'b64')) {
      throw this.error(call, 'expected an integer register', {
        argument,
        expected: '.b32 or .b64 register',
        actual: describeValue(r),
      });
    }
    const wide = r.cls === 'b64';
    return opts.signed ? (wide ? 's64' : 's32') : wide ? 'u64' : 'u32';
  }

  /** The state space of an atomic, its operation and a type that operation takes. */
  atomArgs(call: string, space: unknown, op: AtomOp, type: ScalarType): void {
    this.oneOf(call, 'space', space, ['global', 'shared']);
    this.oneOf(call, 'op', op, Object.keys(ATOM_TYPES));
    this.oneOf(call, 'type', type, ATOM_TYPES[op], ` for ${op}`);
  }

  /** A parameter declared by this entry. */
  entryParam(call: string, param: unknown): asserts param is Param<EntryParamType> {
    if (!(param instanceof Param) || param.scope !== this.#ctx.scope) {
      throw this.error(call, 'expected a parameter of this entry', {
        argument: 'param',
        expected: `a parameter of entry '${this.#ctx.scope.entry}'`,
        actual: describeValue(param),
      });
    }
  }

  /** One of the special registers the builder knows (`%tid.x`, `%laneid`, ...). */
  specialRegister(call: string, sreg: unknown): void {
    if (typeof sreg !== 'string' || !SPECIAL_REGISTERS.has(sreg)) {
      throw this.error(call, 'unknown special register', {
        argument: 'sreg',
        expected: [...SPECIAL_REGISTERS].join(', '),
        actual: describeValue(sreg),
      });
    }
  }

  /** Label names are `$L__<hint><N>`: the hint must keep them valid PTX identifiers. */
  labelHint(call: string, hint: string): void {
    if (!/^[A-Za-z0-9_]+$/.test(hint)) {
      throw this.error(call, `label hints are letters, digits and '_'`, {
        argument: 'hint',
        expected: '[A-Za-z0-9_]+',
        actual: describeValue(hint),
      });
    }
  }

  /** A shared variable's name, size and alignment; `symbols` and `moduleSymbols` are the names taken. */
  sharedDeclaration(
    call: string,
    name: unknown,
    bytes: unknown,
    align: number,
    symbols: ReadonlySet<string>,
    moduleSymbols: ReadonlySet<string>,
  ): void {
    if (typeof name !== 'string' || !IDENT.test(name)) {
      throw this.error(call, 'invalid shared variable name', {
        argument: 'name',
        expected: 'an identifier [A-Za-z_][A-Za-z0-9_]*',
        actual: describeValue(name),
      });
    }
    if (symbols.has(name) || moduleSymbols.has(name)) {
      throw this.error(call, 'duplicate name', {
        argument: 'name',
        expected: 'a name not yet used in the entry or module',
        actual: `'${name}'`,
      });
    }
    this.count(call, 'bytes', bytes, 1);
    // 1024 is what 128-byte swizzled tiles need (the pattern repeats every 8 rows of 128 bytes).
    if (![1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024].includes(align)) {
      throw this.error(call, 'invalid alignment', {
        argument: 'align',
        expected: 'a power of two from 1 to 1024',
        actual: describeValue(align),
      });
    }
  }

  /** The `.L2::NB` qualifier of a load; 256-byte prefetch needs sm_80. */
  l2Prefetch(call: string, prefetch: L2Prefetch): string {
    this.oneOf(call, 'opts.prefetch', String(prefetch), L2_PREFETCH_SIZES);
    this.require(call, `ld.global.L2::${prefetch}B`, { sm: prefetch === 256 ? 80 : 75, ptx: '7.4' });
    return `.L2::${prefetch}B`;
  }

  /** PTX has no `red.exch`. */
  redOp(call: string, op: AtomOp): void {
    if (op === 'exch') {
      throw this.error(call, 'red has no exch form', {
        argument: 'op',
        expected: 'add, min, max, inc, dec, and, or or xor',
        actual: "'exch'",
      });
    }
  }

  /** The `{.rnd}{.ftz}{.sat}` modifiers of an add, sub, mul or similar: f32 only. */
  floatArithModifiers(call: string, type: ScalarType, opts: FloatArithOptions): string {
    if (opts.rnd === undefined && !opts.ftz && !opts.sat) return '';
    if (type !== 'f32') {
      throw this.error(call, 'rounding, ftz and sat apply to f32 only', {
        argument: 'opts',
        expected: 'no options for integer types',
        actual: `.${type} with ${JSON.stringify(opts)}`,
      });
    }
    if (opts.rnd !== undefined) this.oneOf(call, 'opts.rnd', opts.rnd, FLOAT_ROUNDINGS);
    return `${opts.rnd ? `.${opts.rnd}` : ''}${opts.ftz ? '.ftz' : ''}${opts.sat ? '.sat' : ''}`;
  }

  /** The `.NaN` modifier of min / max: f32 only, sm_80+. */
  nanPropagation(op: 'min' | 'max', type: ScalarType): string {
    if (type !== 'f32') {
      throw this.error(op, 'NaN propagation applies to f32 only', {
        argument: 'opts.nan',
        expected: 'type f32',
        actual: `.${type}`,
      });
    }
    this.require(op, `${op}.NaN.f32`, { sm: 80, ptx: '7.0' });
    return '.NaN';
  }

  /** PTX requires a rounding exactly where `cvt.dtype.atype` can lose precision (see cvtRounding). */
  cvtRoundingMode(call: string, dtype: ScalarType, atype: ScalarType, rnd: string | undefined): void {
    const needed = cvtRounding(dtype, atype);
    const ok =
      needed === 'int'
        ? rnd !== undefined && INT_ROUNDINGS.includes(rnd)
        : needed === 'float'
          ? rnd !== undefined && FLOAT_ROUNDINGS.includes(rnd)
          : needed === 'optional-int'
            ? rnd === undefined || INT_ROUNDINGS.includes(rnd)
            : rnd === undefined;
    if (ok) return;
    const expected =
      needed === 'int'
        ? 'an integer rounding: rni, rzi, rmi or rpi'
        : needed === 'float'
          ? 'a float rounding: rn, rz, rm or rp'
          : needed === 'optional-int'
            ? 'no rounding, or an integer rounding: rni, rzi, rmi or rpi'
            : 'no rounding';
    throw this.error(call, `wrong rounding for cvt.${dtype}.${atype}`, {
      argument: 'opts.rnd',
      expected,
      actual: rnd === undefined ? 'none' : `'${rnd}'`,
    });
  }

  /** bf16 conversions came with sm_80 (from integers, sm_90). */
  cvtTarget(call: string, dtype: ScalarType, atype: ScalarType): void {
    if (dtype !== 'bf16' && atype !== 'bf16') return;
    const other = dtype === 'bf16' ? atype : dtype;
    const req = isInt(other)
      ? { sm: 90, ptx: '7.8' }
      : atype === 'bf16'
        ? { sm: 80, ptx: '7.1' }
        : { sm: 80, ptx: '7.0' };
    this.require(call, `cvt.${dtype}.${atype}`, req);
  }

  /** `bar.sync` thread counts are whole warps. */
  barrierThreads(call: string, threads: number): void {
    this.count(call, 'threads', threads, 32);
    if (threads % 32 !== 0) {
      throw this.error(call, 'barrier thread counts are whole warps', {
        argument: 'threads',
        expected: 'a multiple of 32',
        actual: String(threads),
      });
    }
  }

  /** Loops count up: a constant step must be positive (a register step is the caller's to keep so). */
  positiveStep(call: string, step: unknown): void {
    if (typeof step === 'number' && step <= 0) {
      throw this.error(call, 'loops count up', {
        argument: 'step',
        expected: 'a positive step',
        actual: String(step),
      });
    }
  }
}
