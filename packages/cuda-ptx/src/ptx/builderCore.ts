import { misuse } from './errors.js';
import type { Tuple } from './instructionTypes.js';
import { OperandChecks } from './operandChecks.js';
import {
  type Guard,
  Label,
  type Pred,
  Register,
  type RegOf,
  type Scope,
  type SharedVar,
} from './operands.js';
import { classOf, REG_PREFIX, type RegClass, SCALAR_TYPES, type ScalarType } from './types.js';

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
  /** Whether the body placed the dependent-launch wait itself (KernelBuilder.dependencyWait). */
  waitsInBody: boolean;
}

export const INDENT = '  ';

/**
 * Where KernelBuilder.dependencyWait() placed the wait: a comment in the
 * body, `griddepcontrol.wait;` when emitted with `dependentLaunch`.
 */
export const DEPENDENCY_WAIT_MARK = '// the wait of a dependent launch';

/**
 * What every instruction group of KernelBuilder builds on: the entry's state
 * and operand checks, registers, and the writing of instruction lines (their
 * indentation, the `predicated()` guard, the check that the entry is live).
 */
export abstract class BuilderCore {
  protected readonly state: EntryState;
  protected readonly check: OperandChecks;
  #depth = 1;
  #guard: Guard | undefined;

  constructor(state: EntryState) {
    this.state = state;
    this.check = new OperandChecks(state);
  }

  /** The entry's name. */
  get name(): string {
    return this.state.scope.entry;
  }

  /** The module's `.target`, e.g. `sm_75`. */
  get target(): string {
    return this.state.target;
  }

  // ---------------------------------------------------------------- registers

  /** A fresh virtual register for values of `type`. */
  reg<T extends ScalarType>(type: T): RegOf<T> {
    this.live('reg');
    this.check.oneOf('reg', 'type', type, SCALAR_TYPES);
    return this.alloc(classOf(type)) as RegOf<T>;
  }

  /** `count` fresh registers for values of `type`; a literal count gives a tuple (e.g. for `.v4`). */
  regs<T extends ScalarType, N extends number>(type: T, count: N): Tuple<RegOf<T>, N> {
    this.check.count('regs', 'count', count, 0);
    return Array.from({ length: count }, () => this.reg(type)) as Tuple<RegOf<T>, N>;
  }

  // ---------------------------------------------------------------- predication

  /** Every instruction emitted by `body` is guarded by `@p` (or `@!p` with `negate`). */
  predicated(p: Pred, body: () => void, opts: { negate?: boolean } = {}): void {
    const call = 'predicated';
    this.live(call);
    this.check.reg(call, 'p', p, 'pred');
    if (this.#guard) {
      throw this.check.error(call, 'predicated() cannot be nested', {
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

  // ------------------------------------------------------------- internals

  /** The guard of the enclosing `predicated()`, if any. */
  protected get activeGuard(): Guard | undefined {
    return this.#guard;
  }

  protected live(call: string): void {
    if (this.state.finished) {
      throw misuse(
        this.check.callName(call),
        `entry '${this.name}' is finished; builders live only inside their entry's body`,
      );
    }
  }

  /** Whether instructions go to the body's top level (no enclosing loop, branch or predicate). */
  protected get atTopLevel(): boolean {
    return this.#depth === 1 && this.#guard === undefined;
  }

  protected indent(): string {
    return INDENT.repeat(this.#depth);
  }

  protected emit(text: string): void {
    // Instruction names are fixed per method; use the opcode for the error's call.
    this.live(text.split(/[ .]/, 1)[0] ?? text);
    const g = this.#guard;
    const guard = g ? `@${g.negate ? '!' : ''}${g.pred.name} ` : '';
    this.state.lines.push(`${this.indent()}${guard}${text};`);
  }

  protected nested(body: () => void): void {
    this.#depth += 1;
    try {
      body();
    } finally {
      this.#depth -= 1;
    }
  }

  protected alloc(cls: RegClass): Register {
    const n = this.state.counts[cls]++;
    return new Register(cls, `${REG_PREFIX[cls]}${n}`, this.state.scope);
  }

  protected newLabel(suffix: string): Label {
    const label = new Label(`$L__${suffix}`, this.state.scope);
    if (this.state.labels.some((l) => l.name === label.name)) {
      // Defensive: user labels end in their number and helper labels in a word, so none collide.
      throw this.check.error('label', 'duplicate label', {
        expected: 'a unique label name',
        actual: label.name,
      });
    }
    this.state.labels.push(label);
    return label;
  }

  protected structured(call: string): void {
    this.live(call);
    if (this.#guard) {
      throw this.check.error(call, 'structured control flow cannot be predicated', {
        expected: 'no enclosing predicated()',
        actual: `inside @${this.#guard.negate ? '!' : ''}${this.#guard.pred.name}`,
      });
    }
  }

  protected predBra(call: string, p: Pred, label: Label, negate: boolean): void {
    const pred = this.check.reg(call, 'p', p, 'pred');
    this.check.label(call, label);
    if (this.#guard) {
      throw this.check.error(call, 'a predicated branch cannot be inside predicated()', {
        argument: 'p',
      });
    }
    label.referenced = true;
    this.emit(`@${negate ? '!' : ''}${pred} bra ${label.name}`);
  }
}
