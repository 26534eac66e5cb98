import { DEPENDENCY_WAIT_MARK, type EntryState } from './builderCore.js';
import { describeValue, misuse } from './errors.js';
import { KernelBuilder, registerDeclarations, sharedDeclaration } from './kernel.js';
import { Param, type Scope, SharedVar } from './operands.js';
import { checkTarget, DEFAULT_PTX_VERSION, DEFAULT_TARGET, smNumber, versionNumber } from './target.js';
import {
  ENTRY_PARAM_TYPES,
  type EntryParamType,
  paramScalar,
  type RegClass,
  TENSOR_MAP_ALIGN,
  TENSOR_MAP_BYTES,
  TYPE_BYTES,
} from './types.js';

export interface PtxModuleOptions {
  /** PTX ISA version, `MAJOR.MINOR`; 8.0 by default (JIT-compiled by CUDA 12.0+ drivers). */
  readonly version?: string;
  /** `.target` architecture; sm_75 by default (the oldest CUDA 13 compiles for). */
  readonly target?: string;
  /** Only 64-bit addressing is supported by current CUDA. */
  readonly addressSize?: 64;
}

export type Dim3 = number | readonly [number, number?, number?];

/** Performance directives of an entry (launch bounds). */
export interface EntryOptions {
  /** `.maxntid`: the most threads per block the kernel will be launched with. */
  readonly maxThreadsPerBlock?: Dim3;
  /** `.reqntid`: the exact block size the kernel will be launched with. */
  readonly requiredThreadsPerBlock?: Dim3;
  /** `.minnctapersm`: blocks per SM to keep resident (limits registers per thread). */
  readonly minBlocksPerSm?: number;
  /**
   * The kernel is short and reads little (a norm, RoPE, decode attention):
   * emitted with `earlyTrigger`, it lets the next kernel launch as soon as
   * all of its blocks have started (`griddepcontrol.launch_dependents`
   * first), so that one's work before its wait (a GEMV's weight prefetch)
   * runs beside it.
   */
  readonly triggerDependents?: boolean;
}

/** The typed parameter handles an entry body receives, one per declared parameter. */
export type ParamHandles<P extends Record<string, EntryParamType>> = { readonly [K in keyof P]: Param<P[K]> };

/** One parameter of an entry as the launcher marshals it. */
export interface ParamInfo {
  readonly name: string;
  readonly type: EntryParamType;
  /** Size in bytes of the argument value (8 for pointers, 128 for tensor maps). */
  readonly bytes: number;
}

/** A kernel entry of a module: its name and parameters, in declaration order. */
export interface PtxEntry {
  readonly name: string;
  readonly params: readonly ParamInfo[];
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;
const INDENT = '  ';

interface BuiltEntry extends PtxEntry {
  /** The signature, directives, `{` and declarations. */
  readonly head: string;
  /** The instructions and the closing `}`. */
  readonly body: string;
  readonly triggerDependents: boolean;
  /** Whether the body holds its own DEPENDENCY_WAIT_MARK instead of the prologue's wait. */
  readonly waitsInBody: boolean;
}

/** How `emit()` renders a module for the device it is loaded on. */
export interface EmitOptions {
  /**
   * Programmatic dependent launch (sm_90+): every entry begins by waiting,
   * before any memory access, until the kernels it depends on have finished
   * and their writes are visible. Launched with programmatic stream
   * serialization, a kernel is then set up while the previous one drains,
   * with the same results as a plain launch. The target is raised to sm_90
   * and the ISA to 7.8 where lower (PTX for an older target is valid for a
   * newer one).
   */
  readonly dependentLaunch?: boolean;
  /**
   * With `dependentLaunch`: entries built with `triggerDependents` begin by
   * letting their dependents launch (see EntryOptions.triggerDependents).
   */
  readonly earlyTrigger?: boolean;
}

/**
 * The instructions `emit({ dependentLaunch: true })` puts first in every
 * entry that does not place its own wait. `griddepcontrol.launch_dependents`
 * only where an entry asks (triggerDependents) and the emit allows
 * (earlyTrigger): a kernel's exit triggers its dependents anyway, and
 * triggering at the start of every kernel placed a GEMV's blocks among the
 * running kernel's and made a chain of them slower on an H200 (3.9 µs a
 * GEMV against 3.3 plain and 3.05 with the wait alone).
 */
export const DEPENDENT_LAUNCH_PROLOGUE = ['griddepcontrol.wait;'];
const DEPENDENT_LAUNCH_TARGET = 'sm_90';
/** The PTX ISA that introduced `griddepcontrol`. */
const DEPENDENT_LAUNCH_VERSION = '7.8';

/**
 * A PTX module: version, target and address size, holding kernel entries.
 * `entry()` runs the body at once; `emit()` renders the text, which depends
 * only on the calls made, so the same configuration gives the same bytes.
 */
export class PtxModule {
  readonly version: string;
  readonly target: string;
  readonly addressSize: 64;
  readonly #entries: BuiltEntry[] = [];
  readonly #dynamicShared: SharedVar[] = [];
  readonly #symbols = new Set<string>();

  constructor(options: PtxModuleOptions = {}) {
    this.version = options.version ?? DEFAULT_PTX_VERSION;
    this.target = options.target ?? DEFAULT_TARGET;
    const addressSize = options.addressSize ?? 64;
    if (addressSize !== 64) {
      throw misuse('PtxModule', 'unsupported address size', {
        argument: 'addressSize',
        expected: '64',
        actual: describeValue(addressSize),
      });
    }
    this.addressSize = addressSize;
    checkTarget(this.version, this.target);
  }

  /** The entries built so far, in order. */
  get entries(): readonly PtxEntry[] {
    return this.#entries.map(({ name, params }) => ({ name, params }));
  }

  /**
   * Dynamic shared memory (`.extern .shared .align A .b8 name[];`), sized at
   * launch; module-scoped as PTX requires, usable by every entry.
   */
  dynamicShared(name: string, align = 16): SharedVar {
    const call = 'PtxModule.dynamicShared';
    this.#checkName(call, name);
    // 1024 is what 128-byte swizzled tiles need.
    if (![4, 8, 16, 32, 64, 128, 256, 512, 1024].includes(align)) {
      throw misuse(call, 'invalid alignment', {
        argument: 'align',
        expected: 'a power of two from 4 to 1024',
        actual: describeValue(align),
      });
    }
    const v = new SharedVar(name, undefined, align, undefined, undefined);
    this.#symbols.add(name);
    this.#dynamicShared.push(v);
    return v;
  }

  /**
   * Adds `.visible .entry name(params)` and builds its body. Parameters are
   * declared in the order of `params`' keys; `body` receives the kernel
   * builder and a typed handle per parameter.
   */
  entry<P extends Record<string, EntryParamType>>(
    name: string,
    params: P,
    body: (k: KernelBuilder, p: ParamHandles<P>) => void,
    options: EntryOptions = {},
  ): PtxEntry {
    const call = 'PtxModule.entry';
    this.#checkName(call, name);
    if (typeof params !== 'object' || params === null) {
      throw misuse(call, `entry '${name}' needs a parameter object`, {
        argument: 'params',
        expected: 'an object of name: type',
        actual: describeValue(params),
      });
    }
    const scope: Scope = { entry: name };
    const handles: Record<string, Param> = {};
    const infos: ParamInfo[] = [];
    // The entry's own name is taken inside it too, so no shared variable shadows it.
    const symbols = new Set<string>([name]);
    for (const [key, type] of Object.entries(params)) {
      if (!IDENT.test(key)) {
        throw misuse(call, `invalid parameter name in entry '${name}'`, {
          argument: `params.${key}`,
          expected: 'an identifier [A-Za-z_][A-Za-z0-9_]*',
          actual: `'${key}'`,
        });
      }
      if (!ENTRY_PARAM_TYPES.includes(type)) {
        throw misuse(call, `unsupported parameter type in entry '${name}'`, {
          argument: `params.${key}`,
          expected: `one of ${ENTRY_PARAM_TYPES.join(', ')}`,
          actual: describeValue(type),
        });
      }
      const symbol = `${name}_param_${key}`;
      symbols.add(symbol);
      handles[key] = new Param(key, type, symbol, scope);
      infos.push({
        name: key,
        type,
        bytes: type === 'tensorMap' ? TENSOR_MAP_BYTES : TYPE_BYTES[paramScalar(type)],
      });
    }
    const directives = entryDirectives(call, name, options);
    const counts: Record<RegClass, number> = { pred: 0, b16: 0, b32: 0, f32: 0, b64: 0 };
    const state: EntryState = {
      scope,
      target: this.target,
      version: this.version,
      counts,
      lines: [],
      shared: [],
      labels: [],
      moduleSymbols: this.#symbols,
      symbols,
      nextLabelId: 0,
      finished: false,
      waitsInBody: false,
    };
    const k = new KernelBuilder(state);
    try {
      body(k, handles as ParamHandles<P>);
      const last = state.lines.at(-1)?.trim();
      // A body that ends at a label (or without ret) still needs an instruction to end the thread.
      if (last !== 'ret;' && last !== 'exit;') k.ret();
    } finally {
      state.finished = true;
    }
    for (const label of state.labels) {
      if (label.referenced && !label.placed) {
        throw misuse('KernelBuilder.bra', `branch to a label that is never placed in entry '${name}'`, {
          argument: 'label',
          expected: `${label.name} placed with place()`,
          actual: `${label.name} never placed`,
        });
      }
    }
    const paramLines = infos.map(
      (p, i) =>
        `${INDENT}.param ${p.type === 'tensorMap' ? `.align ${TENSOR_MAP_ALIGN} .b8` : `.${paramScalar(p.type)}`} ${name}_param_${p.name}${p.type === 'tensorMap' ? `[${TENSOR_MAP_BYTES}]` : ''}${i < infos.length - 1 ? ',' : ''}`,
    );
    const decls = [...registerDeclarations(counts), ...state.shared.map(sharedDeclaration)];
    const head = [
      `.visible .entry ${name}(`,
      ...paramLines,
      ')',
      ...directives,
      '{',
      ...decls,
      ...(decls.length > 0 ? [''] : []),
    ].join('\n');
    this.#symbols.add(name);
    const entry: BuiltEntry = {
      name,
      params: infos,
      head,
      body: [...state.lines, '}'].join('\n'),
      triggerDependents: options.triggerDependents === true,
      waitsInBody: state.waitsInBody,
    };
    this.#entries.push(entry);
    return { name, params: infos };
  }

  /** The target the module is emitted for with `options` (see EmitOptions). */
  emittedTarget(options: EmitOptions = {}): { readonly version: string; readonly target: string } {
    if (!options.dependentLaunch) return { version: this.version, target: this.target };
    return {
      version:
        versionNumber(this.version) < versionNumber(DEPENDENT_LAUNCH_VERSION)
          ? DEPENDENT_LAUNCH_VERSION
          : this.version,
      target:
        smNumber(this.target) < smNumber(DEPENDENT_LAUNCH_TARGET) ? DEPENDENT_LAUNCH_TARGET : this.target,
    };
  }

  /** The module as PTX text (see EmitOptions). */
  emit(options: EmitOptions = {}): string {
    const { version, target } = this.emittedTarget(options);
    const parts = [
      ['//', '// Generated by @rayo/cuda-ptx', '//'].join('\n'),
      [`.version ${version}`, `.target ${target}`, `.address_size ${this.addressSize}`].join('\n'),
    ];
    if (this.#dynamicShared.length > 0) {
      parts.push(
        this.#dynamicShared.map((v) => `.extern .shared .align ${v.align} .b8 ${v.name}[];`).join('\n'),
      );
    }
    for (const e of this.#entries) {
      if (!options.dependentLaunch) {
        parts.push(`${e.head}\n${e.body}`);
        continue;
      }
      const prologue = [
        ...(options.earlyTrigger && e.triggerDependents ? ['griddepcontrol.launch_dependents;'] : []),
        ...(e.waitsInBody ? [] : DEPENDENT_LAUNCH_PROLOGUE),
      ];
      const body = e.waitsInBody ? e.body.replace(DEPENDENCY_WAIT_MARK, 'griddepcontrol.wait;') : e.body;
      parts.push(`${e.head}\n${prologue.map((l) => `${INDENT}${l}\n`).join('')}${body}`);
    }
    return `${parts.join('\n\n')}\n`;
  }

  #checkName(call: string, name: unknown): asserts name is string {
    if (typeof name !== 'string' || !IDENT.test(name)) {
      throw misuse(call, 'invalid name', {
        argument: 'name',
        expected: 'an identifier [A-Za-z_][A-Za-z0-9_]*',
        actual: describeValue(name),
      });
    }
    if (this.#symbols.has(name)) {
      throw misuse(call, 'duplicate name in module', {
        argument: 'name',
        expected: 'a name not yet used by an entry or shared variable of the module',
        actual: `'${name}'`,
      });
    }
  }
}

function entryDirectives(call: string, entry: string, options: EntryOptions): string[] {
  const out: string[] = [];
  const dims = (argument: string, value: Dim3): string => {
    const list = typeof value === 'number' ? [value] : [...value];
    const full = [list[0], list[1] ?? 1, list[2] ?? 1];
    if (full.some((n) => typeof n !== 'number' || !Number.isInteger(n) || n < 1) || list.length > 3) {
      throw misuse(call, `invalid block size in entry '${entry}'`, {
        argument,
        expected: 'positive integers x, y, z',
        actual: describeValue(value),
      });
    }
    return full.join(', ');
  };
  if (options.maxThreadsPerBlock !== undefined) {
    out.push(`.maxntid ${dims('options.maxThreadsPerBlock', options.maxThreadsPerBlock)}`);
  }
  if (options.requiredThreadsPerBlock !== undefined) {
    out.push(`.reqntid ${dims('options.requiredThreadsPerBlock', options.requiredThreadsPerBlock)}`);
  }
  if (options.minBlocksPerSm !== undefined) {
    const n = options.minBlocksPerSm;
    if (!Number.isInteger(n) || n < 1) {
      throw misuse(call, `invalid minimum blocks per SM in entry '${entry}'`, {
        argument: 'options.minBlocksPerSm',
        expected: 'a positive integer',
        actual: describeValue(n),
      });
    }
    out.push(`.minnctapersm ${n}`);
  }
  return out;
}
