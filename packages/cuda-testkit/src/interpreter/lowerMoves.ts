import { widthOf } from './layout.js';
import { type Context, copy, dst, inline, type Lowered, src, stop, typeOf, unsupported } from './lowering.js';
import { splitOperands } from './ptxModule.js';
import { BARRIER, fail } from './threads.js';

// Barriers, moves and parameter loads.

export function lowerBarrier(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  if (parts.join('.') !== 'bar.sync') unsupported(ctx);
  const literal = (op: string | undefined) => {
    if (op === undefined) return 0;
    if (!/^\d+$/.test(op)) fail(`barrier operands must be immediates: ${line}`);
    return Number(op);
  };
  const id = literal(ops[0]);
  const count = literal(ops[1]);
  return stop((_u, _f, t) => {
    t.barrier = id;
    t.barrierCount = count;
    return BARRIER;
  });
}

// ----------------------------------------------------------------- moves

export function lowerMove(ctx: Context): Lowered {
  const { parts, ops } = ctx.ins;
  const form = parts.join('.');
  if (parts[0] === 'cvta' && form !== 'cvta.to.global.u64' && form !== 'cvta.param.u64') unsupported(ctx);
  if (parts.length !== (parts[0] === 'cvta' ? (form === 'cvta.param.u64' ? 3 : 4) : 2)) unsupported(ctx);
  const type = typeOf(ctx);
  if (parts[0] === 'mov' && (ops[0]!.startsWith('{') || ops[1]!.startsWith('{'))) return lowerPackMove(ctx);
  const d = dst(ctx, 0, type);
  if (ops[1] === '%clock') return inline(`u[${d}] = ++S.clock;`);
  return inline(copy(widthOf(type), d, src(ctx, 1, type)));
}

export function lowerParam(ctx: Context): Lowered {
  const { ops, line, parts } = ctx.ins;
  if (parts[0] !== 'ld' || parts.length !== 3) unsupported(ctx);
  const type = typeOf(ctx);
  const m = /^\[(\w+)\]$/.exec(ops[1]!) ?? fail(`parameter address: ${line}`);
  const index = ctx.entry.params.findIndex((p) => p.name === m[1]);
  if (index < 0) fail(`unknown parameter: ${line}`);
  const d = dst(ctx, 0, type);
  const w = 2 * index;
  return inline(
    widthOf(type) === 64
      ? `u[${d}] = S.params[${w}]; u[${d + 1}] = S.params[${w + 1}];`
      : `u[${d}] = S.params[${w}];`,
  );
}

/** `mov.b32 d, {lo, hi}` and `mov.b32 {lo, hi}, a`: two 16-bit registers as one 32-bit value. */
function lowerPackMove(ctx: Context): Lowered {
  const { ops, line } = ctx.ins;
  if (ctx.ins.parts.join('.') !== 'mov.b32') unsupported(ctx);
  const halves = (op: string) => {
    const names = splitOperands(op.replace(/^\{|\}$/g, ''));
    if (names.length !== 2) fail(`expected two 16-bit registers: ${line}`);
    return names;
  };
  if (ops[1]!.startsWith('{')) {
    const [lo, hi] = halves(ops[1]!).map((n) => ctx.layout.source(n, 'b16', line)) as [number, number];
    const d = dst(ctx, 0, 'b32');
    return inline(`u[${d}] = (u[${lo}] | (u[${hi}] << 16)) >>> 0;`);
  }
  const [lo, hi] = halves(ops[0]!).map((n) => ctx.layout.dest(n, 16, line)) as [number, number];
  const a = src(ctx, 1, 'b32');
  return inline(`{ const w = u[${a}]; u[${lo}] = w & 0xffff; u[${hi}] = w >>> 16; }`);
}
