import type { FloatRounding } from './floatMath.js';
import { type Layout, type Width, widthOf } from './layout.js';
import type { LaunchState } from './memory.js';
import type { Entry } from './ptxModule.js';
import { fail, type Thread } from './threads.js';

// What an instruction lowers to, and the functions every lowering shares.

/*
 * Each instruction is lowered once, either to JavaScript statements over the
 * register file (`u` words, `f` floats, constant slot indices), inlined into
 * the code of its basic block, or to a closure the block calls (the rarer and
 * more involved forms). Each basic block becomes one function, so that a
 * thread runs straight-line code between branches and pays one call per
 * block, not per instruction.
 */

/** An instruction as its block runs it. */
export type Lowered =
  /** Statements inlined into the block. */
  | { readonly kind: 'js'; readonly js: string }
  /** A closure called for its effect. */
  | { readonly kind: 'call'; readonly action: Action }
  /** A closure that stops the thread: it returns EXIT, BARRIER or WARP. */
  | { readonly kind: 'stop'; readonly action: Stop }
  | { readonly kind: 'branch'; readonly target: number };

export type Action = (u: Uint32Array, f: Float32Array, t: Thread) => void;
export type Stop = (u: Uint32Array, f: Float32Array, t: Thread) => number;

export const inline = (js: string): Lowered => ({ kind: 'js', js });
export const call = (action: Action): Lowered => ({ kind: 'call', action });
export const stop = (action: Stop): Lowered => ({ kind: 'stop', action });

export interface Instruction {
  readonly line: string;
  readonly guard: { readonly slot: number; readonly negate: boolean } | undefined;
  readonly parts: readonly string[];
  readonly ops: readonly string[];
}

export interface Context {
  readonly ins: Instruction;
  readonly layout: Layout;
  readonly labels: Map<string, number>;
  readonly entry: Entry;
  readonly state: LaunchState;
  /** Index of the instruction: names its window (`w<pc>`) and its line (`L[pc]`) in block code. */
  readonly pc: number;
}

export function unsupported(ctx: Context): never {
  return fail(`unsupported instruction: ${ctx.ins.line}`);
}

export type Lowering = (ctx: Context) => Lowered;

/** The instruction's type: its last part. */
export function typeOf(ctx: Context): string {
  return ctx.ins.parts[ctx.ins.parts.length - 1]!;
}

export function has(ctx: Context, modifier: string): boolean {
  return ctx.ins.parts.includes(modifier);
}

/** Fails unless every part between the opcode and the type is one of `allowed`. */
export function onlyModifiers(ctx: Context, allowed: readonly string[], typeParts = 1): void {
  const { parts } = ctx.ins;
  if (parts.slice(1, parts.length - typeParts).some((p) => !allowed.includes(p))) unsupported(ctx);
}

export function floatRounding(ctx: Context): FloatRounding | undefined {
  return ctx.ins.parts.find((p): p is FloatRounding => p === 'rn' || p === 'rz' || p === 'rm' || p === 'rp');
}

export function src(ctx: Context, i: number, type: string): number {
  const op = ctx.ins.ops[i] ?? fail(`missing operand ${i}: ${ctx.ins.line}`);
  return ctx.layout.source(op, type, ctx.ins.line);
}

export function dst(ctx: Context, i: number, type: string): number {
  const op = ctx.ins.ops[i] ?? fail(`missing operand ${i}: ${ctx.ins.line}`);
  return ctx.layout.dest(op, widthOf(type), ctx.ins.line);
}

/** JS copying a value of `width` bits from slot a to slot d. */
export function copy(width: Width, d: number, a: number): string {
  return width === 64 ? `u[${d}] = u[${a}]; u[${d + 1}] = u[${a + 1}];` : `u[${d}] = u[${a}];`;
}
