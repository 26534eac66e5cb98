import { popcount32, reverse32 } from './intMath.js';
import { own, widthOf } from './layout.js';
import { intValue } from './lowerArithmetic.js';
import {
  type Context,
  call,
  copy,
  dst,
  has,
  inline,
  type Lowered,
  src,
  typeOf,
  unsupported,
} from './lowering.js';

// Logic, shifts, bit fields, comparisons and selects.

export function lowerLogic(ctx: Context): Lowered {
  const op = ctx.ins.parts[0]!;
  if (ctx.ins.parts.length !== 2) unsupported(ctx);
  const type = typeOf(ctx);
  const width = widthOf(type);
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  const words = width === 64 ? [0, 1] : [0];
  if (op === 'not') {
    // Predicates hold 0 or 1 and 16-bit values their low half: `not` keeps only those bits.
    const mask = width === 1 ? ' & 1' : width === 16 ? ' & 0xffff' : '';
    return inline(words.map((k) => `u[${d + k}] = ~u[${a + k}]${mask};`).join(' '));
  }
  const b = src(ctx, 2, type);
  const symbol = { and: '&', or: '|', xor: '^' }[op as 'and'];
  return inline(words.map((k) => `u[${d + k}] = u[${a + k}] ${symbol} u[${b + k}];`).join(' '));
}

export function lowerShift(ctx: Context): Lowered {
  const left = ctx.ins.parts[0] === 'shl';
  if (ctx.ins.parts.length !== 2) unsupported(ctx);
  const type = typeOf(ctx);
  const width = widthOf(type);
  const signed = type.startsWith('s');
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  const b = src(ctx, 2, 'u32');
  if (width === 64) {
    return call((u) => {
      const s = u[b]!;
      const lo = u[a]!;
      const hi = u[a + 1]!;
      if (s === 0) {
        u[d] = lo;
        u[d + 1] = hi;
      } else if (left) {
        u[d + 1] = s >= 64 ? 0 : s >= 32 ? lo << (s - 32) : (hi << s) | (lo >>> (32 - s));
        u[d] = s >= 32 ? 0 : lo << s;
      } else {
        const fill = signed ? hi >> 31 : 0;
        const shifted = signed ? hi >> (s - 32) : hi >>> (s - 32);
        u[d] = s >= 64 ? fill : s >= 32 ? shifted : (lo >>> s) | (hi << (32 - s));
        u[d + 1] = s >= 32 ? fill : signed ? hi >> s : hi >>> s;
      }
    });
  }
  if (width === 16) {
    const v = intValue(type, a);
    return inline(`u[${d}] = (${v} ${left ? '<<' : '>>'} Math.min(u[${b}], 16)) & 0xffff;`);
  }
  if (width !== 32) unsupported(ctx);
  // JS shifts take the count mod 32; PTX clamps it.
  if (left) return inline(`u[${d}] = u[${b}] >= 32 ? 0 : u[${a}] << u[${b}];`);
  if (signed) return inline(`u[${d}] = u[${a}] >> Math.min(u[${b}], 31);`);
  return inline(`u[${d}] = u[${b}] >= 32 ? 0 : u[${a}] >>> u[${b}];`);
}

/** popc, clz, brev, bfe, bfi (32-bit; popc and clz also 64-bit). */
export function lowerBits(ctx: Context): Lowered {
  const op = ctx.ins.parts[0]!;
  if (ctx.ins.parts.length !== 2) unsupported(ctx);
  const type = typeOf(ctx);
  const width = widthOf(type);
  if (op === 'popc' || op === 'clz') {
    const d = dst(ctx, 0, 'u32');
    const a = src(ctx, 1, type);
    if (width === 64) {
      return op === 'popc'
        ? call((u) => {
            u[d] = popcount32(u[a]!) + popcount32(u[a + 1]!);
          })
        : call((u) => {
            u[d] = u[a + 1] !== 0 ? Math.clz32(u[a + 1]!) : 32 + Math.clz32(u[a]!);
          });
    }
    if (width !== 32) unsupported(ctx);
    return op === 'popc'
      ? call((u) => {
          u[d] = popcount32(u[a]!);
        })
      : inline(`u[${d}] = Math.clz32(u[${a}]);`);
  }
  if (width !== 32) unsupported(ctx);
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  if (op === 'brev') {
    return call((u) => {
      u[d] = reverse32(u[a]!);
    });
  }
  if (op === 'bfe') {
    const pos = src(ctx, 2, 'u32');
    const len = src(ctx, 3, 'u32');
    const signed = type === 's32';
    return call((u) => {
      const p = u[pos]! & 0xff;
      const l = u[len]! & 0xff;
      const x = u[a]!;
      let r = 0;
      if (l > 0) {
        const field = p >= 32 ? (signed && x >> 31 ? 0xffffffff : 0) : signed ? x >> p : x >>> p;
        r = l >= 32 ? field : field & ((1 << l) - 1);
        // The sign of a signed field is its top bit, or the source's where the field runs past it.
        const top = Math.min(p + l - 1, 31);
        if (signed && l < 32 && (x >>> top) & 1) r |= ~((1 << l) - 1);
      }
      u[d] = r;
    });
  }
  if (op === 'bfi') {
    const b = src(ctx, 2, type);
    const pos = src(ctx, 3, 'u32');
    const len = src(ctx, 4, 'u32');
    return call((u) => {
      const p = u[pos]! & 0xff;
      const l = u[len]! & 0xff;
      if (l === 0 || p >= 32) u[d] = u[b]!;
      else {
        const mask = (l >= 32 ? 0xffffffff : (1 << l) - 1) << p;
        u[d] = (u[b]! & ~mask) | ((u[a]! << p) & mask);
      }
    });
  }
  return unsupported(ctx);
}

// ------------------------------------------------------ compare and select

/** Comparisons as JS over x and y; the float ones get NaN right (ordered and unordered forms). */
const FLOAT_COMPARISONS: Readonly<Record<string, string>> = {
  eq: 'x === y',
  ne: 'x < y || x > y',
  lt: 'x < y',
  le: 'x <= y',
  gt: 'x > y',
  ge: 'x >= y',
  equ: '!(x < y || x > y)',
  neu: 'x !== y',
  ltu: '!(x >= y)',
  leu: '!(x > y)',
  gtu: '!(x <= y)',
  geu: '!(x < y)',
  num: 'x === x && y === y',
  nan: 'x !== x || y !== y',
};

const INT_COMPARISONS: Readonly<Record<string, string>> = {
  eq: 'x === y',
  ne: 'x !== y',
  lt: 'x < y',
  le: 'x <= y',
  gt: 'x > y',
  ge: 'x >= y',
  lo: 'x < y',
  ls: 'x <= y',
  hi: 'x > y',
  hs: 'x >= y',
};

export function lowerSetp(ctx: Context): Lowered {
  const { parts, ops } = ctx.ins;
  const cmp = parts[1]!;
  const type = typeOf(ctx);
  const ftz = has(ctx, 'ftz');
  if (parts.length !== (ftz ? 4 : 3) || ops[0]!.includes('|')) unsupported(ctx);
  const d = dst(ctx, 0, 'pred');
  const a = src(ctx, 1, type);
  const b = src(ctx, 2, type);
  const width = widthOf(type);
  const test = own(type === 'f32' ? FLOAT_COMPARISONS : INT_COMPARISONS, cmp) ?? unsupported(ctx);
  let x: string;
  let y: string;
  if (type === 'f32') {
    x = ftz ? `flush(f[${a}])` : `f[${a}]`;
    y = ftz ? `flush(f[${b}])` : `f[${b}]`;
  } else if (width === 64) {
    x = `compare64(u, ${a}, ${b}, ${type.startsWith('s')})`;
    y = '0';
  } else {
    x = intValue(type, a);
    y = intValue(type, b);
  }
  return inline(`{ const x = ${x}, y = ${y}; u[${d}] = ${test} ? 1 : 0; }`);
}

export function lowerSelp(ctx: Context): Lowered {
  const type = typeOf(ctx);
  if (ctx.ins.parts.length !== 2) unsupported(ctx);
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  const b = src(ctx, 2, type);
  const p = src(ctx, 3, 'pred');
  return inline(`if (u[${p}] !== 0) { ${copy(widthOf(type), d, a)} } else { ${copy(widthOf(type), d, b)} }`);
}

/** `prmt.b32 d, a, b, c` (the default mode): byte i of d from byte c[4i+2:4i] of {b, a}, its sign spread where c[4i+3] is set. */
export function lowerPrmt(ctx: Context): Lowered {
  if (ctx.ins.parts.join('.') !== 'prmt.b32') unsupported(ctx);
  const d = dst(ctx, 0, 'b32');
  const a = src(ctx, 1, 'b32');
  const b = src(ctx, 2, 'b32');
  const c = src(ctx, 3, 'b32');
  return call((u) => {
    const pool = [u[a]!, u[b]!];
    let r = 0;
    for (let i = 0; i < 4; i++) {
      const nibble = (u[c]! >>> (4 * i)) & 0xf;
      const at = nibble & 7;
      const byte = (pool[at >> 2]! >>> (8 * (at & 3))) & 0xff;
      r |= (nibble & 8 ? (byte & 0x80 ? 0xff : 0) : byte) << (8 * i);
    }
    u[d] = r;
  });
}

/** `dp4a.atype.btype d, a, b, c`: c plus the four byte products, each byte signed or not as its type says; wraps at 32 bits. */
export function lowerDp4a(ctx: Context): Lowered {
  const [, atype, btype] = ctx.ins.parts;
  if (ctx.ins.parts.length !== 3 || !['u32', 's32'].includes(atype!) || !['u32', 's32'].includes(btype!))
    unsupported(ctx);
  const d = dst(ctx, 0, 's32');
  const a = src(ctx, 1, atype!);
  const b = src(ctx, 2, btype!);
  const c = src(ctx, 3, 's32');
  const byteOf = (signed: boolean) => (word: number, i: number) => {
    const byte = (word >>> (8 * i)) & 0xff;
    return signed && byte & 0x80 ? byte - 256 : byte;
  };
  const aByte = byteOf(atype === 's32');
  const bByte = byteOf(btype === 's32');
  return call((u) => {
    let sum = u[c]! | 0;
    for (let i = 0; i < 4; i++) sum += aByte(u[a]!, i) * bByte(u[b]!, i);
    u[d] = sum | 0;
  });
}
