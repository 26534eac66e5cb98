import {
  flush,
  fmaF32,
  fmaJs,
  PRODUCT,
  QUOTIENT,
  ROOT,
  roundF32,
  SUM,
  saturate,
  sumError,
} from './floatMath.js';
import { add64, get64, getS64, mulWideS32, mulWideU32, set64 } from './intMath.js';
import { own, widthOf } from './layout.js';
import {
  type Context,
  call,
  dst,
  floatRounding,
  has,
  inline,
  type Lowered,
  onlyModifiers,
  src,
  typeOf,
  unsupported,
} from './lowering.js';

// Integer and f32 arithmetic: add to mad, fma and the approximate functions.

/** A 16-bit value, sign-extended. */
export function s16(x: number): number {
  return (x << 16) >> 16;
}

/** JS reading slot `a` as a number of `type`'s signedness (16- and 32-bit integers). */
export function intValue(type: string, a: number): string {
  if (type === 's32') return `(u[${a}] | 0)`;
  if (type === 's16') return `((u[${a}] << 16) >> 16)`;
  return `u[${a}]`;
}

export function lowerBinary(ctx: Context): Lowered {
  const { parts } = ctx.ins;
  const op = parts[0]!;
  const type = typeOf(ctx);
  if (type === 'f32') return lowerF32Binary(ctx, op);
  const mode = parts.length === 3 ? parts[1] : undefined;
  if (op === 'mul' && mode === 'wide') return lowerMulWide(ctx);
  const modeOk = op === 'mul' ? mode === 'lo' || mode === 'hi' : parts.length === 2;
  if (!modeOk) unsupported(ctx);
  const width = widthOf(type);
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  const b = src(ctx, 2, type);
  const signed = type.startsWith('s');
  if (width === 64) return lowerBinary64(op, mode, signed, d, a, b);
  if (width !== 16 && width !== 32) unsupported(ctx);
  // A Uint32Array store wraps to 32 bits; 16-bit results are masked.
  const wrap = (expr: string) => inline(`u[${d}] = ${width === 16 ? `(${expr}) & 0xffff` : expr};`);
  const x = intValue(type, a);
  const y = intValue(type, b);
  switch (op) {
    case 'add':
      return wrap(`u[${a}] + u[${b}]`);
    case 'sub':
      return wrap(`u[${a}] - u[${b}]`);
    case 'min':
      return wrap(`Math.min(${x}, ${y})`);
    case 'max':
      return wrap(`Math.max(${x}, ${y})`);
    case 'mul':
      if (mode === 'lo') return wrap(`Math.imul(u[${a}], u[${b}])`);
      if (width === 16) return wrap(`Math.floor((${x} * ${y}) / 65536)`);
      return call((u) => {
        (signed ? mulWideS32 : mulWideU32)(u[a]!, u[b]!, wideScratch, 0);
        u[d] = wideScratch[1]!;
      });
    case 'div':
      // Division by zero gives all ones (PTX leaves it unspecified).
      return wrap(`u[${b}] === 0 ? 0xffffffff : Math.trunc(${x} / ${y})`);
    default:
      // The remainder by zero is the dividend.
      return wrap(`u[${b}] === 0 ? u[${a}] : ${x} % ${y}`);
  }
}

const wideScratch = new Uint32Array(2);

function lowerBinary64(
  op: string,
  mode: string | undefined,
  signed: boolean,
  d: number,
  a: number,
  b: number,
): Lowered {
  switch (op) {
    case 'add':
      return inline(addWordsJs(d, `u[${a}]`, `u[${a + 1}]`, `u[${b}]`, `u[${b + 1}]`));
    case 'sub':
      // a - b = a + ~b + 1
      return inline(
        `{ const lo = u[${a}] + (~u[${b}] >>> 0) + 1; u[${d + 1}] = u[${a + 1}] + (~u[${b + 1}] >>> 0) + (lo >= TWO32 ? 1 : 0); u[${d}] = lo; }`,
      );
    case 'min':
    case 'max':
      return inline(
        `{ const from = compare64(u, ${a}, ${b}, ${signed}) === ${op === 'min' ? -1 : 1} ? ${a} : ${b}; u[${d}] = u[from]; u[${d + 1}] = u[from + 1]; }`,
      );
    case 'mul':
      if (mode === 'lo') {
        return call((u) => {
          if (u[a + 1] === 0 && u[b + 1] === 0) mulWideU32(u[a]!, u[b]!, u, d);
          else set64(u, d, get64(u, a) * get64(u, b));
        });
      }
      return call((u) => {
        const x = signed ? getS64(u, a) : get64(u, a);
        const y = signed ? getS64(u, b) : get64(u, b);
        set64(u, d, (x * y) >> 64n);
      });
    default: {
      const get = signed ? getS64 : get64;
      return call((u) => {
        const x = get(u, a);
        const y = get(u, b);
        if (y === 0n) set64(u, d, op === 'div' ? -1n : x);
        else set64(u, d, op === 'div' ? x / y : x % y);
      });
    }
  }
}

const WIDER: Readonly<Record<string, string>> = { u16: 'u32', s16: 's32', u32: 'u64', s32: 's64' };

function lowerMulWide(ctx: Context): Lowered {
  const type = typeOf(ctx);
  const wideType = own(WIDER, type) ?? unsupported(ctx);
  const d = dst(ctx, 0, wideType);
  const a = src(ctx, 1, type);
  const b = src(ctx, 2, type);
  if (type === 'u16' || type === 's16')
    return inline(`u[${d}] = ${intValue(type, a)} * ${intValue(type, b)};`);
  return inline(wideProductJs(type, d, a, b));
}

/** JS for the 64-bit product of two 32-bit integers into the pair at d; exact products below 2^53 stay inline. */
function wideProductJs(type: string, d: number, a: number, b: number): string {
  const signed = type === 's32';
  const x = intValue(type, a);
  const y = intValue(type, b);
  const helper = signed ? 'mulWideS32' : 'mulWideU32';
  const small = signed ? 'Math.abs(p) < 9007199254740992' : 'p < 9007199254740992';
  return `{ const p = ${x} * ${y}; if (${small}) { u[${d}] = p % TWO32; u[${d + 1}] = Math.floor(p / TWO32); } else ${helper}(u[${a}], u[${b}], u, ${d}); }`;
}

/** JS adding two 64-bit values given as word expressions into the pair at d (d may be an operand). */
function addWordsJs(d: number, aLo: string, aHi: string, bLo: string, bHi: string): string {
  return `{ const lo = ${aLo} + ${bLo}; u[${d + 1}] = ${aHi} + ${bHi} + (lo >= TWO32 ? 1 : 0); u[${d}] = lo; }`;
}

/** `mad.lo`, `mad.hi`, `mad.wide` (integers) and `fma` / `mad` (f32). */
export function lowerMultiplyAdd(ctx: Context): Lowered {
  const { parts } = ctx.ins;
  const type = typeOf(ctx);
  if (type === 'f32') return lowerFma(ctx);
  const mode = parts[1];
  if (parts[0] !== 'mad' || parts.length !== 3) unsupported(ctx);
  if (mode === 'wide') {
    const wideType = own(WIDER, type) ?? unsupported(ctx);
    const d = dst(ctx, 0, wideType);
    const a = src(ctx, 1, type);
    const b = src(ctx, 2, type);
    const c = src(ctx, 3, wideType);
    if (type === 'u16' || type === 's16') {
      return inline(`u[${d}] = ${intValue(type, a)} * ${intValue(type, b)} + u[${c}];`);
    }
    // The addend is read before the product is written: d may be c.
    return inline(
      `{ const cLo = u[${c}], cHi = u[${c + 1}]; ${wideProductJs(type, d, a, b)} ${addWordsJs(d, `u[${d}]`, `u[${d + 1}]`, 'cLo', 'cHi')} }`,
    );
  }
  if (mode !== 'lo' && mode !== 'hi') unsupported(ctx);
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  const b = src(ctx, 2, type);
  const c = src(ctx, 3, type);
  const width = widthOf(type);
  if (width === 32 && mode === 'lo') return inline(`u[${d}] = Math.imul(u[${a}], u[${b}]) + u[${c}];`);
  // The rarer forms: the product as `mul` computes it, then the addend.
  const product = lowerBinary({ ...ctx, ins: { ...ctx.ins, parts: ['mul', mode, type] } });
  const multiply = product.kind === 'call' ? product.action : undefined;
  if (width === 64) {
    if (!multiply) return unsupported(ctx);
    return call((u, f, t) => {
      const cLo = u[c]!;
      const cHi = u[c + 1]!;
      multiply(u, f, t);
      add64(u, d, u[d]!, u[d + 1]!, cLo, cHi);
    });
  }
  const mask = width === 16 ? 0xffff : 0xffffffff;
  if (product.kind === 'js') {
    return inline(`{ const addend = u[${c}]; ${product.js} u[${d}] = (u[${d}] + addend) & ${mask}; }`);
  }
  if (!multiply) return unsupported(ctx);
  return call((u, f, t) => {
    const addend = u[c]!;
    multiply(u, f, t);
    u[d] = (u[d]! + addend) & mask;
  });
}

function lowerF32Binary(ctx: Context, op: string): Lowered {
  onlyModifiers(ctx, ['rn', 'rz', 'rm', 'rp', 'ftz', 'sat', 'NaN', 'approx', 'full']);
  const rnd = floatRounding(ctx);
  const ftz = has(ctx, 'ftz');
  const sat = has(ctx, 'sat');
  const nan = has(ctx, 'NaN');
  const d = dst(ctx, 0, 'f32');
  const a = src(ctx, 1, 'f32');
  const b = src(ctx, 2, 'f32');
  if (op === 'rem') unsupported(ctx);
  if (op === 'min' || op === 'max') {
    // PTX returns the other operand where one is NaN, unless .NaN asks to propagate it.
    const pick = `Math.${op}(x, y)`;
    const result = nan ? `x !== x ? x : y !== y ? y : ${pick}` : `x !== x ? y : y !== y ? x : ${pick}`;
    const x = ftz ? `flush(f[${a}])` : `f[${a}]`;
    const y = ftz ? `flush(f[${b}])` : `f[${b}]`;
    return inline(`{ const x = ${x}, y = ${y}; f[${d}] = ${result}; }`);
  }
  if (!ftz && !sat && (rnd === undefined || rnd === 'rn')) {
    // A double result of two f32 operands rounds to the correctly rounded f32 (+, -, ×, ÷).
    const symbol = { add: '+', sub: '-', mul: '*', div: '/' }[op as 'add'];
    return inline(`f[${d}] = f[${a}] ${symbol} f[${b}];`);
  }
  const mode = rnd ?? 'rn';
  const compute = (x: number, y: number): number => {
    switch (op) {
      case 'add':
      case 'sub': {
        const yy = op === 'sub' ? -y : y;
        const s = x + yy;
        const err = sumError(x, yy, s);
        const r = roundF32(s, mode, SUM, err, x, yy);
        // An exact zero sum of operands of opposite signs is -0 when rounding down.
        return r === 0 && mode === 'rm' && err === 0 && !(Object.is(x, 0) && Object.is(yy, 0)) ? -0 : r;
      }
      case 'mul':
        return roundF32(x * y, mode, PRODUCT, 0, x, y);
      default:
        return roundF32(x / y, mode, QUOTIENT, 0, x, y);
    }
  };
  return call((_u, f) => {
    const x = ftz ? flush(f[a]!) : f[a]!;
    const y = ftz ? flush(f[b]!) : f[b]!;
    let r = compute(x, y);
    if (ftz) r = flush(r);
    f[d] = sat ? saturate(r) : r;
  });
}

function lowerFma(ctx: Context): Lowered {
  onlyModifiers(ctx, ['rn', 'rz', 'rm', 'rp', 'ftz', 'sat']);
  const rnd = floatRounding(ctx);
  const ftz = has(ctx, 'ftz');
  const sat = has(ctx, 'sat');
  const d = dst(ctx, 0, 'f32');
  const a = src(ctx, 1, 'f32');
  const b = src(ctx, 2, 'f32');
  const c = src(ctx, 3, 'f32');
  if (!ftz && !sat && (rnd === undefined || rnd === 'rn')) {
    return inline(fmaJs(d, a, b, c));
  }
  const mode = rnd ?? 'rn';
  return call((_u, f) => {
    const x = ftz ? flush(f[a]!) : f[a]!;
    const y = ftz ? flush(f[b]!) : f[b]!;
    const z = ftz ? flush(f[c]!) : f[c]!;
    const p = x * y;
    const s = p + z;
    let r = mode === 'rn' ? fmaF32(x, y, z) : roundF32(s, mode, SUM, sumError(p, z, s), p, z);
    if (ftz) r = flush(r);
    f[d] = sat ? saturate(r) : r;
  });
}

/** The approximate functions, modelled as correctly rounded. */
const F32_FUNCTIONS: Readonly<Record<string, string>> = {
  sqrt: 'Math.sqrt(x)',
  rcp: '1 / x',
  rsqrt: '1 / Math.sqrt(x)',
  ex2: '2 ** x',
  lg2: 'Math.log2(x)',
  sin: 'Math.sin(x)',
  cos: 'Math.cos(x)',
  tanh: 'Math.tanh(x)',
};

export function lowerUnary(ctx: Context): Lowered {
  const op = ctx.ins.parts[0]!;
  const type = typeOf(ctx);
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  if (type !== 'f32') {
    if ((op !== 'neg' && op !== 'abs') || ctx.ins.parts.length !== 2) unsupported(ctx);
    if (type === 's64') {
      return call((u) => {
        const v = getS64(u, a);
        set64(u, d, op === 'neg' || v < 0n ? -v : v);
      });
    }
    if (type !== 's32' && type !== 's16') unsupported(ctx);
    const x = intValue(type, a);
    const result = op === 'neg' ? `-${x}` : `Math.abs(${x})`;
    return inline(`u[${d}] = ${type === 's16' ? `(${result}) & 0xffff` : result};`);
  }
  onlyModifiers(ctx, ['rn', 'rz', 'rm', 'rp', 'approx', 'full', 'ftz']);
  const ftz = has(ctx, 'ftz');
  if (op === 'neg' || op === 'abs') {
    // Sign-bit operations: NaN payloads and infinities pass through.
    const bits = op === 'neg' ? `u[${a}] ^ 0x80000000` : `u[${a}] & 0x7fffffff`;
    return inline(`u[${d}] = ${bits};${ftz ? ` f[${d}] = flush(f[${d}]);` : ''}`);
  }
  const rnd = floatRounding(ctx);
  if (rnd !== undefined && rnd !== 'rn') {
    if (op !== 'sqrt' && op !== 'rcp') unsupported(ctx);
    const fn =
      op === 'sqrt'
        ? (x: number) => roundF32(Math.sqrt(x), rnd, ROOT, 0, x, 0)
        : (x: number) => roundF32(1 / x, rnd, QUOTIENT, 0, 1, x);
    return call((_u, f) => {
      const r = fn(ftz ? flush(f[a]!) : f[a]!);
      f[d] = ftz ? flush(r) : r;
    });
  }
  const expr = own(F32_FUNCTIONS, op) ?? unsupported(ctx);
  const x = ftz ? `flush(f[${a}])` : `f[${a}]`;
  const result = `{ const x = ${x}; f[${d}] = ${expr}; }`;
  return inline(ftz ? `${result} f[${d}] = flush(f[${d}]);` : result);
}
