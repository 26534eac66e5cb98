import { bitsToF32 } from '../floatBits.js';
import { flush } from './floatMath.js';
import { get64, set64 } from './intMath.js';
import { own, widthOf } from './layout.js';
import {
  type Context,
  call,
  dst,
  inline,
  type Lowered,
  onlyModifiers,
  src,
  typeOf,
  unsupported,
} from './lowering.js';
import { misaligned, outsideShared, Window } from './memory.js';
import { splitOperands } from './ptxModule.js';
import { fail, TWO32 } from './threads.js';

// Loads, stores and atomics on global and shared memory.

/** `[base]`, `[base+off]` or `[base+-off]`. */
export function parseAddress(ctx: Context, op: string, space: string): { base: number; offset: number } {
  const m = /^\[([^\]+]+)(?:\+(-?\d+))?\]$/.exec(op) ?? fail(`address ${op}: ${ctx.ins.line}`);
  const baseOp = m[1]!;
  const offset = Number(m[2] ?? 0);
  if (space === 'global') return { base: ctx.layout.source(baseOp, 'u64', ctx.ins.line), offset };
  // A shared address may sit in a 64-bit register; its low word is the address.
  const wide = /^%rd\d+$/.test(baseOp);
  return { base: ctx.layout.source(baseOp, wide ? 'u64' : 'u32', ctx.ins.line), offset };
}

/**
 * JS that checks an access of `bytes` at [base + offset] and sets `i`, the
 * index of its first element in `words` or `halves` of the memory it names
 * (`w<pc>.words` for global, `t.shared32` for shared memory).
 */
function addressing(ctx: Context, space: string, base: number, offset: number, bytes: number, half: boolean) {
  const { pc } = ctx;
  const scale = half ? 1 : 2;
  if (space === 'shared') {
    return {
      js: [
        `const at = u[${base}] + ${offset};`,
        `if ((at & ${bytes - 1}) !== 0) misaligned(L[${pc}], at, ${bytes});`,
        `if (at + ${bytes} > t.sharedBytes) outsideShared(L[${pc}], at, ${bytes}, t.sharedBytes);`,
        `const i = at >>> ${scale};`,
      ].join(' '),
      memory: half ? 't.shared16' : 't.shared32',
    };
  }
  const w = `w${pc}`;
  return {
    js: [
      `const lo = u[${base}] + ${offset};`,
      `const at = u[${base + 1}] * TWO32 + lo;`,
      `if (${w}.generation !== S.generation || at < ${w}.start || at + ${bytes} > ${w}.end) S.locate(${w}, at, ${bytes}, L[${pc}]);`,
      `if ((lo & ${bytes - 1}) !== 0) misaligned(L[${pc}], at, ${bytes});`,
      `const i = (at - ${w}.start) >>> ${scale};`,
    ].join(' '),
    memory: half ? `${w}.halves` : `${w}.words`,
  };
}

const VECTOR = /^v([24])$/;

export function lowerMemory(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const load = parts[0] === 'ld';
  const space = parts[1]!;
  if (space !== 'global' && space !== 'shared') unsupported(ctx);
  const type = typeOf(ctx);
  const width = widthOf(type);
  if (width === 1) unsupported(ctx);
  // An L2 prefetch size is a cache hint: it changes nothing a kernel computes.
  const caches = load
    ? ['nc', 'ca', 'cg', 'cs', 'lu', 'cv', 'volatile', 'L2::64B', 'L2::128B', 'L2::256B']
    : ['wb', 'cg', 'cs', 'wt', 'volatile'];
  onlyModifiers(ctx, ['global', 'shared', 'v2', 'v4', ...caches]);
  const vector = parts.find((p) => VECTOR.test(p));
  const count = vector ? Number(vector.slice(1)) : 1;
  const [dataOp, addrOp] = load ? [ops[0]!, ops[1]!] : [ops[1]!, ops[0]!];
  const names = count === 1 ? [dataOp] : splitOperands(dataOp.replace(/^\{|\}$/g, ''));
  if (names.length !== count) fail(`expected ${count} registers: ${line}`);
  const regs = names.map((n) => (load ? ctx.layout.dest(n, width, line) : ctx.layout.source(n, type, line)));
  const { base, offset } = parseAddress(ctx, addrOp, space);
  // A 64-bit element is two words, low first.
  const slots = width === 64 ? regs.flatMap((r) => [r, r + 1]) : regs;
  const { js, memory } = addressing(ctx, space, base, offset, (width / 8) * count, width === 16);
  const moves = slots.map((s, k) => {
    const element = `${memory}[i${k === 0 ? '' : ` + ${k}`}]`;
    return load ? `u[${s}] = ${element};` : `${element} = u[${s}];`;
  });
  return inline(`{ ${js} ${moves.join(' ')} }`);
}

/**
 * `prefetch.global.L2 [a]`: a cache hint that changes nothing a thread
 * computes, but whose address must lie in a live allocation (a kernel that
 * prefetches past its tensors is wrong even where the hardware forgives it).
 */
export function lowerPrefetch(ctx: Context): Lowered {
  if (ctx.ins.parts.join('.') !== 'prefetch.global.L2' || ctx.ins.ops.length !== 1) unsupported(ctx);
  const { base, offset } = parseAddress(ctx, ctx.ins.ops[0]!, 'global');
  const w = new Window();
  const state = ctx.state;
  const { line } = ctx.ins;
  return call((u) => {
    const address = u[base + 1]! * TWO32 + u[base]! + offset;
    if (w.generation !== state.generation || address < w.start || address + 1 > w.end) {
      state.locate(w, address, 1, line);
    }
  });
}

/** `atom.space.op.type d, [a], b{, c}` and `red.space.op.type [a], b`. */
export function lowerAtomic(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const hasOld = parts[0] === 'atom';
  const space = parts[1]!;
  const op = parts[2]!;
  const type = typeOf(ctx);
  if ((space !== 'global' && space !== 'shared') || parts.length !== 4) unsupported(ctx);
  const width = widthOf(type);
  if (width !== 32 && width !== 64) unsupported(ctx);
  const bytes = width / 8;
  const first = hasOld ? 1 : 0;
  const { base, offset } = parseAddress(ctx, ops[first]!, space);
  const b = src(ctx, first + 1, type);
  const c = op === 'cas' ? src(ctx, first + 2, type) : -1;
  const d = hasOld ? dst(ctx, 0, type) : -1;
  const update = width === 64 ? atomic64(op, type, ctx) : atomic32(op, type, ctx);
  if (space === 'shared') {
    return call((u, _f, t) => {
      const address = u[base]! + offset;
      if ((address & (bytes - 1)) !== 0) misaligned(line, address, bytes);
      if (address + bytes > t.sharedBytes) outsideShared(line, address, bytes, t.sharedBytes);
      update(u, t.shared32, t.sharedF32, address >>> 2, b, c, d);
    });
  }
  const w = new Window();
  const state = ctx.state;
  return call((u) => {
    const low = u[base]! + offset;
    const address = u[base + 1]! * TWO32 + low;
    if (w.generation !== state.generation || address < w.start || address + bytes > w.end) {
      state.locate(w, address, bytes, line);
    }
    if ((low & (bytes - 1)) !== 0) misaligned(line, address, bytes);
    update(u, w.words, w.floats, (address - w.start) >>> 2, b, c, d);
  });
}

/** Updates memory word `i` from operand slots b (and c); writes the old value to slot d when d >= 0. */
type AtomicUpdate = (
  u: Uint32Array,
  words: Uint32Array,
  floats: Float32Array,
  i: number,
  b: number,
  c: number,
  d: number,
) => void;

function atomic32(op: string, type: string, ctx: Context): AtomicUpdate {
  if (type === 'f32') {
    if (op === 'exch') return atomic32('exch', 'b32', ctx);
    if (op !== 'add') unsupported(ctx);
    // atom.add.f32 rounds to nearest and flushes subnormal inputs and results.
    return (u, words, floats, i, b, _c, d) => {
      const old = words[i]!;
      floats[i] = flush(Math.fround(flush(floats[i]!) + flush(bitsToF32(u[b]!))));
      if (d >= 0) u[d] = old;
    };
  }
  const signed = type === 's32';
  const table: Record<string, (old: number, b: number, c: number) => number> = {
    add: (o, v) => o + v,
    min: signed ? (o, v) => Math.min(o | 0, v | 0) : (o, v) => Math.min(o, v),
    max: signed ? (o, v) => Math.max(o | 0, v | 0) : (o, v) => Math.max(o, v),
    inc: (o, v) => (o >= v ? 0 : o + 1),
    dec: (o, v) => (o === 0 || o > v ? v : o - 1),
    and: (o, v) => o & v,
    or: (o, v) => o | v,
    xor: (o, v) => o ^ v,
    exch: (_o, v) => v,
    cas: (o, v, c) => (o === v ? c : o),
  };
  const f = own(table, op) ?? unsupported(ctx);
  return (u, words, _floats, i, b, c, d) => {
    const old = words[i]!;
    words[i] = f(old, u[b]!, c >= 0 ? u[c]! : 0);
    if (d >= 0) u[d] = old;
  };
}

function atomic64(op: string, type: string, ctx: Context): AtomicUpdate {
  const signed = type === 's64';
  const norm = (v: bigint) => (signed ? BigInt.asIntN(64, v) : v);
  const table: Record<string, (old: bigint, b: bigint, c: bigint) => bigint> = {
    add: (o, v) => o + v,
    min: (o, v) => (norm(o) < norm(v) ? o : v),
    max: (o, v) => (norm(o) > norm(v) ? o : v),
    and: (o, v) => o & v,
    or: (o, v) => o | v,
    xor: (o, v) => o ^ v,
    exch: (_o, v) => v,
    cas: (o, v, c) => (o === v ? c : o),
  };
  const f = own(table, op) ?? unsupported(ctx);
  return (u, words, _floats, i, b, c, d) => {
    const old = get64(words, i);
    set64(words, i, f(old, get64(u, b), c >= 0 ? get64(u, c) : 0n));
    if (d >= 0) set64(u, d, old);
  };
}
