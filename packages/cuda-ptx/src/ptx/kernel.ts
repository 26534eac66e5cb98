import { DEPENDENCY_WAIT_MARK, INDENT } from './builderCore.js';
import {
  type AtomOp,
  type Axis,
  LOAD_CACHES,
  type LoadOptions,
  type LoopControl,
  type LoopOptions,
  MEM_TYPES,
  NC_CACHES,
  SHFL_MODES,
  type ShflMode,
  type ShflOptions,
  type SpecialRegister,
  STORE_CACHES,
  type StoreOptions,
  type VecOf,
} from './instructionTypes.js';
import {
  type AddressLike,
  type F32,
  type Label,
  type Operand,
  type Param,
  type Pred,
  type R32,
  type R64,
  type RegOf,
  SharedVar,
} from './operands.js';
import { PipelineInstructions } from './pipelineInstructions.js';
import {
  classOf,
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

const FULL_MASK = 0xffffffff;

/**
 * Builds the body of one kernel entry: registers, shared memory, labels and
 * instructions, in program order. Each instruction method takes its operands
 * in PTX order (destination first) and returns the destination, so results
 * can be used inline. Operand types are checked by TypeScript through the
 * type argument and again at run time, where a mismatch throws an
 * InvalidArgumentError naming the call, the argument and both types.
 */
export class KernelBuilder extends PipelineInstructions {
  // ------------------------------------------------------------ shared memory

  /** `.shared .align A .b8 name[bytes];` in this entry. */
  shared(name: string, bytes: number, align = 16): SharedVar {
    return this.#declareShared('shared', name, bytes, align, undefined);
  }

  /** `.shared .align A .type name[length];`: a typed shared array. */
  sharedArray(name: string, type: MemType, length: number, align?: number): SharedVar {
    this.check.oneOf('sharedArray', 'type', type, MEM_TYPES);
    const bytes = TYPE_BYTES[type];
    this.check.count('sharedArray', 'length', length, 1);
    return this.#declareShared('sharedArray', name, bytes * length, align ?? Math.max(bytes, 4), type);
  }

  // ------------------------------------------------------- parameters & moves

  /** `ld.param`: a parameter's value in a fresh register (or in `d`). */
  ldParam<P extends ParamType>(param: Param<P>, d?: RegOf<ParamScalar<P>>): RegOf<ParamScalar<P>> {
    const call = 'ldParam';
    this.live(call);
    this.check.entryParam(call, param);
    if ((param as Param).type === 'tensorMap') {
      throw this.check.error(call, 'a tensor map is not loaded into a register', {
        argument: 'param',
        expected: 'a scalar parameter (take a tensor map with tensorMapAddress)',
        actual: param.describe(),
      });
    }
    const t = paramScalar(param.type);
    const dst = d ?? this.alloc(classOf(t));
    this.emit(`ld.param.${t} ${this.check.reg(call, 'd', dst, t)}, [${param.symbol}]`);
    return dst as RegOf<ParamScalar<P>>;
  }

  /**
   * The generic address of a `tensorMap` parameter (`mov.u64` of the
   * parameter, then `cvta.param.u64`): the tensor-map operand of
   * `cpAsyncBulkTensor`, read where the kernel's arguments live.
   */
  tensorMapAddress(param: Param<'tensorMap'>): R64 {
    const call = 'tensorMapAddress';
    this.live(call);
    this.check.entryParam(call, param);
    if (param.type !== 'tensorMap') {
      throw this.check.error(call, 'expected a tensor-map parameter', {
        argument: 'param',
        expected: "a parameter declared 'tensorMap'",
        actual: param.describe(),
      });
    }
    this.check.require(call, 'cvta.param', { sm: 70, ptx: '7.7' });
    const d = this.reg('u64');
    this.emit(`mov.u64 ${d}, ${param.symbol}`);
    this.emit(`cvta.param.u64 ${d}, ${d}`);
    return d;
  }

  /** A pointer parameter as a global-space address: `ld.param.u64` then `cvta.to.global.u64`. */
  globalPointer(param: Param<'ptr' | 'u64'>): R64 {
    const generic = this.ldParam(param) as R64;
    return this.cvtaToGlobal(this.reg('u64'), generic);
  }

  /** `cvta.to.global.u64 d, a`: a generic address as a global-space address. */
  cvtaToGlobal(d: R64, a: R64): R64 {
    const call = 'cvtaToGlobal';
    this.emit(
      `cvta.to.global.u64 ${this.check.reg(call, 'd', d, 'u64')}, ${this.check.reg(call, 'a', a, 'u64')}`,
    );
    return d;
  }

  /** `mov.type d, a`. */
  mov<T extends ScalarType, D extends RegOf<T>>(type: T, d: D, a: Operand<T>): D {
    const call = 'mov';
    this.check.oneOf(call, 'type', type, SCALAR_TYPES);
    this.emit(`mov.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.src(call, 'a', a, type)}`);
    return d;
  }

  /** `mov.u32 d, name`: the 32-bit shared-window address of a shared variable. */
  sharedAddress(v: SharedVar, d?: R32): R32 {
    const call = 'sharedAddress';
    this.live(call);
    this.check.sharedVar(call, 'v', v);
    const dst = d ?? this.reg('u32');
    this.emit(`mov.u32 ${this.check.reg(call, 'd', dst, 'u32')}, ${v.name}`);
    return dst;
  }

  /** `mov.u32 d, %sreg`: a special register in a fresh register (or in `d`). */
  special(sreg: SpecialRegister, d?: R32): R32 {
    const call = 'special';
    this.live(call);
    this.check.specialRegister(call, sreg);
    const dst = d ?? this.reg('u32');
    this.emit(`mov.u32 ${this.check.reg(call, 'd', dst, 'u32')}, ${sreg}`);
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
    this.check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.check.vector(call, 'd', d, type);
    if (opts.cache !== undefined) {
      this.check.oneOf(call, 'opts.cache', opts.cache, opts.nc ? NC_CACHES : LOAD_CACHES);
    }
    const cop = opts.cache ? `.${opts.cache}` : '';
    const nc = opts.nc ? '.nc' : '';
    const prefetch = opts.prefetch === undefined ? '' : this.check.l2Prefetch(call, opts.prefetch);
    this.emit(
      `ld.global${cop}${nc}${prefetch}${vec}.${type} ${text}, ${this.check.address(call, 'a', a, 'global')}`,
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
    this.check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.check.vector(call, 'b', b, type, true);
    if (opts.cache !== undefined) this.check.oneOf(call, 'opts.cache', opts.cache, STORE_CACHES);
    const cop = opts.cache ? `.${opts.cache}` : '';
    this.emit(`st.global${cop}${vec}.${type} ${this.check.address(call, 'a', a, 'global')}, ${text}`);
  }

  /** `ld.shared{.v2|.v4}.type d, [a]`. */
  ldShared<T extends MemType, D extends VecOf<RegOf<T>>>(type: T, d: D, a: AddressLike): D {
    const call = 'ldShared';
    this.check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.check.vector(call, 'd', d, type);
    this.emit(`ld.shared${vec}.${type} ${text}, ${this.check.address(call, 'a', a, 'shared')}`);
    return d;
  }

  /** `st.shared{.v2|.v4}.type [a], b`. */
  stShared<T extends MemType>(type: T, a: AddressLike, b: VecOf<RegOf<T>> | Operand<T>): void {
    const call = 'stShared';
    this.check.oneOf(call, 'type', type, MEM_TYPES);
    const { text, vec } = this.check.vector(call, 'b', b, type, true);
    this.emit(`st.shared${vec}.${type} ${this.check.address(call, 'a', a, 'shared')}, ${text}`);
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
    this.check.atomArgs(call, space, op, type);
    this.emit(
      `atom.${space}.${op}.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.address(call, 'a', a, space)}, ${this.check.src(call, 'b', b, type)}`,
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
    this.check.oneOf(call, 'space', space, ['global', 'shared']);
    this.check.oneOf(call, 'type', type, ['b32', 'b64']);
    this.emit(
      `atom.${space}.cas.${type} ${this.check.reg(call, 'd', d, type)}, ${this.check.address(call, 'a', a, space)}, ${this.check.src(call, 'b', b, type)}, ${this.check.src(call, 'c', c, type)}`,
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
    this.check.atomArgs(call, space, op, type);
    this.check.redOp(call, op);
    this.emit(
      `red.${space}.${op}.${type} ${this.check.address(call, 'a', a, space)}, ${this.check.src(call, 'b', b, type)}`,
    );
  }

  // ---------------------------------------------------------- control flow

  /** A new, not yet placed label; its name is unique in the entry (`$L__hint<N>`). */
  label(hint = 'L'): Label {
    this.live('label');
    this.check.labelHint('label', hint);
    return this.newLabel(`${hint}${this.state.nextLabelId++}`);
  }

  /** Places `label` here (`name:`); each label is placed once. */
  place(label: Label): void {
    const call = 'place';
    this.live(call);
    this.check.label(call, label);
    if (label.placed) {
      throw this.check.error(call, 'label placed twice', {
        argument: 'label',
        expected: 'a label not yet placed',
        actual: label.describe(),
      });
    }
    if (this.activeGuard) {
      throw this.check.error(call, 'a label cannot be placed inside predicated()', {
        argument: 'label',
      });
    }
    label.placed = true;
    this.state.lines.push(`${label.name}:`);
  }

  /** `bra label` (`bra.uni` when every thread of the warp takes it). */
  bra(label: Label, opts: { uni?: boolean } = {}): void {
    this.check.label('bra', label);
    label.referenced = true;
    this.emit(`bra${opts.uni ? '.uni' : ''} ${label.name}`);
  }

  /** `@p bra label`. */
  braIf(p: Pred, label: Label): void {
    this.predBra('braIf', p, label, false);
  }

  /** `@!p bra label`. */
  braIfNot(p: Pred, label: Label): void {
    this.predBra('braIfNot', p, label, true);
  }
  /**
   * Where this entry waits for the kernels it depends on when launched
   * dependently (emitted with `dependentLaunch`), instead of first thing:
   * what comes before may read only what no earlier kernel of the stream
   * writes (a GEMV's weights, say, to prefetch them). Once, at the body's
   * top level; nothing is emitted without `dependentLaunch`.
   */
  dependencyWait(): void {
    const call = 'dependencyWait';
    this.live(call);
    if (this.state.waitsInBody || !this.atTopLevel) {
      throw this.check.error(call, 'the dependency wait is placed once, at the top level of the body', {
        argument: 'dependencyWait',
        expected: 'one call outside loops, branches and predicated()',
        actual: this.state.waitsInBody ? 'a second call' : 'a call inside a nested region',
      });
    }
    this.state.waitsInBody = true;
    this.state.lines.push(`${this.indent()}${DEPENDENCY_WAIT_MARK}`);
  }

  /** `prefetch.global.L2 [a]`: brings a's line into the L2 cache; changes nothing a thread computes. */
  prefetchL2(a: AddressLike): void {
    this.emit(`prefetch.global.L2 ${this.check.address('prefetchL2', 'a', a, 'global')}`);
  }

  /** `bar.sync id{, threads}`: waits for the block's threads (or `threads` of them). */
  barSync(id = 0, threads?: number): void {
    const call = 'barSync';
    this.check.count(call, 'id', id, 0, 15);
    if (threads !== undefined) this.check.barrierThreads(call, threads);
    this.emit(`bar.sync ${id}${threads === undefined ? '' : `, ${threads}`}`);
  }

  /** `bar.warp.sync membermask`. */
  warpSync(membermask: Operand<'b32'> = FULL_MASK): void {
    this.emit(`bar.warp.sync ${this.check.mask('warpSync', 'membermask', membermask)}`);
  }

  /**
   * `fence.sem.scope`: orders this thread's memory accesses at `scope`;
   * `acq_rel` (a release and an acquire, lighter than `sc`, which `membar`
   * is) is what a flag or ticket handed between blocks needs.
   */
  fence(sem: 'acq_rel' | 'sc', scope: 'cta' | 'gpu' | 'sys'): void {
    this.check.oneOf('fence', 'sem', sem, ['acq_rel', 'sc']);
    this.check.oneOf('fence', 'scope', scope, ['cta', 'gpu', 'sys']);
    this.check.require('fence', 'fence', { sm: 70, ptx: '6.0' });
    this.emit(`fence.${sem}.${scope}`);
  }

  /** `membar.level`: orders this thread's memory accesses as seen by the block, the GPU or the system. */
  membar(level: 'cta' | 'gl' | 'sys'): void {
    this.check.oneOf('membar', 'level', level, ['cta', 'gl', 'sys']);
    this.emit(`membar.${level}`);
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
    this.check.oneOf(call, 'mode', mode, SHFL_MODES);
    const c = opts.c ?? (mode === 'up' ? 0 : 31);
    const dst = this.check.reg(call, 'd', d, 'b32');
    const pred = opts.pred === undefined ? '' : `|${this.check.reg(call, 'opts.pred', opts.pred, 'pred')}`;
    this.emit(
      `shfl.sync.${mode}.b32 ${dst}${pred}, ${this.check.reg(call, 'a', a, 'b32')}, ${this.check.src(call, 'b', b, 'u32')}, ${this.check.src(call, 'opts.c', c, 'b32')}, ${this.check.mask(call, 'opts.membermask', opts.membermask ?? FULL_MASK)}`,
    );
    return d;
  }

  /** `vote.sync.ballot.b32 d, p, membermask`: one bit per lane whose `p` is true. */
  voteBallot(d: R32, p: Pred, membermask: Operand<'b32'> = FULL_MASK): R32 {
    const call = 'voteBallot';
    this.emit(
      `vote.sync.ballot.b32 ${this.check.reg(call, 'd', d, 'b32')}, ${this.check.reg(call, 'p', p, 'pred')}, ${this.check.mask(call, 'membermask', membermask)}`,
    );
    return d;
  }

  /** `vote.sync.mode.pred d, p, membermask`: whether `p` holds in any / all lanes. */
  vote(mode: 'any' | 'all', d: Pred, p: Pred, membermask: Operand<'b32'> = FULL_MASK): Pred {
    const call = 'vote';
    this.check.oneOf(call, 'mode', mode, ['any', 'all']);
    this.emit(
      `vote.sync.${mode}.pred ${this.check.reg(call, 'd', d, 'pred')}, ${this.check.reg(call, 'p', p, 'pred')}, ${this.check.mask(call, 'membermask', membermask)}`,
    );
    return d;
  }

  /** `ret`: ends the thread. */
  ret(): void {
    this.emit('ret');
  }

  /** A `// text` line in the output, to make generated code easier to read. */
  comment(text: string): void {
    this.live('comment');
    for (const line of text.split('\n')) this.state.lines.push(`${this.indent()}// ${line}`.trimEnd());
  }

  // ------------------------------------------------------ structured helpers

  /** Runs `body` only where `p` holds (`@!p bra` past it). */
  ifThen(p: Pred, body: () => void): void {
    const call = 'ifThen';
    this.structured(call);
    const id = this.state.nextLabelId++;
    const end = this.newLabel(`if${id}_end`);
    this.predBra(call, p, end, true);
    this.nested(body);
    this.place(end);
  }

  /** Runs `then` where `p` holds and `otherwise` elsewhere. */
  ifElse(p: Pred, then: () => void, otherwise: () => void): void {
    const call = 'ifElse';
    this.structured(call);
    const id = this.state.nextLabelId++;
    const elseLabel = this.newLabel(`if${id}_else`);
    const end = this.newLabel(`if${id}_end`);
    this.predBra(call, p, elseLabel, true);
    this.nested(then);
    this.bra(end);
    this.place(elseLabel);
    this.nested(otherwise);
    this.place(end);
  }

  /**
   * `if (index < bound) body`: the bounds guard of elementwise kernels; threads
   * past the bound branch over the body. Compared unsigned unless `signed`.
   */
  guard<C extends R32 | R64>(index: C, bound: C | number, body: () => void, opts: LoopOptions = {}): void {
    const call = 'guard';
    this.structured(call);
    const type = this.check.counterType(call, 'index', index, opts);
    const id = this.state.nextLabelId++;
    const end = this.newLabel(`guard${id}_end`);
    const p = this.reg('pred');
    this.setp('ge', type, p, index as never, bound as never);
    this.braIf(p, end);
    this.nested(body);
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
    this.structured(call);
    const type = this.check.counterType(call, 'counter', counter, opts);
    this.check.positiveStep(call, step);
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
    this.structured(call);
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
    this.check.count('elementAddress', 'elemBytes', elemBytes, 1);
    return this.madWide('u32', d ?? this.reg('u64'), index, elemBytes, base);
  }

  // ------------------------------------------------------------- internals

  #loop(
    call: string,
    type: 'u32' | 's32' | 'u64' | 's64',
    counter: R32 | R64,
    end: unknown,
    step: unknown,
    body: (loop: LoopControl) => void,
    knownNonEmpty: boolean,
  ): void {
    const id = this.state.nextLabelId++;
    const bodyLabel = this.newLabel(`for${id}_body`);
    const nextLabel = this.newLabel(`for${id}_next`);
    const exitLabel = this.newLabel(`for${id}_end`);
    const p = this.reg('pred');
    if (!knownNonEmpty) {
      this.setp('ge', type, p, counter as never, end as never);
      this.predBra(call, p, exitLabel, false);
    }
    this.place(bodyLabel);
    this.nested(() => body({ exit: exitLabel, next: nextLabel }));
    if (nextLabel.referenced) this.place(nextLabel);
    this.add(type, counter as never, counter as never, step as never);
    this.setp('lt', type, p, counter as never, end as never);
    this.predBra(call, p, bodyLabel, false);
    if (exitLabel.referenced) this.place(exitLabel);
  }

  #declareShared(
    call: string,
    name: string,
    bytes: number,
    align: number,
    elemType: MemType | undefined,
  ): SharedVar {
    this.live(call);
    this.check.sharedDeclaration(call, name, bytes, align, this.state.symbols, this.state.moduleSymbols);
    const v = new SharedVar(name, bytes, align, elemType, this.state.scope);
    this.state.symbols.add(name);
    this.state.shared.push(v);
    return v;
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
