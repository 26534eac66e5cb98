import { bf16ToNumber, bitsToF32, f16ToNumber, f32ToBits } from '../floatBits.js';
import { roundToTf32 } from '../tensorCoreSemantics.js';
import {
  BF16,
  bigToDoubleRoundOdd,
  F16,
  F32_FORMAT,
  type FloatRounding,
  flush,
  type IntRounding,
  numberToBf16,
  numberToF16,
  roundIntegral,
  roundToFormat,
  saturate,
} from './floatMath.js';
import { get64, getS64, set64 } from './intMath.js';
import { intValue, s16 } from './lowerArithmetic.js';
import {
  type Context,
  call,
  dst,
  has,
  inline,
  type Lowered,
  onlyModifiers,
  src,
  typeOf,
  unsupported,
} from './lowering.js';
import { fail } from './threads.js';

// cvt between the integer, f16, bf16, tf32 and f32 types.

const INT_RANGES: Readonly<Record<string, readonly [bigint, bigint]>> = {
  u16: [0n, 0xffffn],
  s16: [-0x8000n, 0x7fffn],
  u32: [0n, 0xffffffffn],
  s32: [-0x80000000n, 0x7fffffffn],
  u64: [0n, 0xffffffffffffffffn],
  s64: [-0x8000000000000000n, 0x7fffffffffffffffn],
};

function isIntType(type: string): boolean {
  return Object.hasOwn(INT_RANGES, type);
}

const CVT_TYPES = ['u16', 's16', 'u32', 's32', 'u64', 's64', 'f16', 'bf16', 'f32'];

/** `cvt{.rnd}{.ftz}{.sat}.dtype.atype d, a` over the integer, f16, bf16 and f32 types. */
export function lowerCvt(ctx: Context): Lowered {
  const { parts } = ctx.ins;
  const dtype = parts[parts.length - 2]!;
  if (dtype === 'tf32' || dtype.endsWith('x2')) return lowerPackedCvt(ctx);
  const atype = typeOf(ctx);
  onlyModifiers(ctx, ['rn', 'rz', 'rm', 'rp', 'rni', 'rzi', 'rmi', 'rpi', 'ftz', 'sat'], 2);
  if (!CVT_TYPES.includes(dtype) || !CVT_TYPES.includes(atype)) unsupported(ctx);
  const rnd = parts.slice(1, -2).find((m) => m.startsWith('r'));
  const ftz = has(ctx, 'ftz');
  const sat = has(ctx, 'sat');
  const d = dst(ctx, 0, dtype);
  const a = src(ctx, 1, atype);
  if (!ftz && !sat) {
    const fast = fastCvt(dtype, atype, rnd, d, a);
    if (fast !== undefined) return inline(fast);
  }
  const read = readNumeric(atype, a, ftz);
  const write = writeNumeric(dtype, d);
  let convert: (v: number | bigint) => number | bigint;
  if (isIntType(dtype)) {
    const [lo, hi] = INT_RANGES[dtype]!;
    if (isIntType(atype)) {
      // Extend by the source's signedness, then truncate (or clamp with .sat).
      convert = (v) => {
        const x = BigInt(v);
        return sat ? (x < lo ? lo : x > hi ? hi : x) : x;
      };
    } else {
      const mode = (rnd ?? fail(`float-to-integer cvt needs a rounding: ${ctx.ins.line}`)) as IntRounding;
      // Float to integer saturates to the destination's range; NaN gives 0.
      const loN = Number(lo);
      const hiN = Number(hi);
      convert = (v) => {
        const x = v as number;
        if (Number.isNaN(x)) return 0n;
        const r = roundIntegral(x, mode);
        return r <= loN ? lo : r >= hiN ? hi : BigInt(r);
      };
    }
  } else {
    const format = dtype === 'f16' ? F16 : dtype === 'bf16' ? BF16 : F32_FORMAT;
    const intRounding = rnd?.length === 3 ? (rnd as IntRounding) : undefined;
    const mode = (intRounding ? 'rn' : (rnd ?? 'rn')) as FloatRounding;
    convert = (v) => {
      let x = typeof v === 'bigint' ? bigToDoubleRoundOdd(v) : v;
      if (intRounding && Number.isFinite(x)) x = roundIntegral(x, intRounding);
      let r = roundToFormat(x, format, mode);
      if (ftz && dtype === 'f32') r = flush(r);
      return sat ? saturate(r) : r;
    };
  }
  return call((u) => write(u, convert(read(u))));
}

/** JS for the common conversions, without bigints or generic rounding; undefined for the rest. */
function fastCvt(
  dtype: string,
  atype: string,
  rnd: string | undefined,
  d: number,
  a: number,
): string | undefined {
  const pair = `${dtype}.${atype}`;
  if ((pair === 'f32.u32' || pair === 'f32.s32') && rnd === 'rn') {
    // The integer is exact in a double; the Float32Array store rounds it once, to nearest even.
    return `f[${d}] = ${intValue(atype, a)};`;
  }
  if ((pair === 's32.f32' || pair === 'u32.f32') && rnd !== undefined && rnd.length === 3) {
    const [lo, hi] = dtype === 's32' ? [-2147483648, 2147483647] : [0, 4294967295];
    const rounded = {
      rni: 'x - Math.floor(x) === 0.5 ? 2 * Math.round(x / 2) : Math.round(x)',
      rzi: 'Math.trunc(x)',
      rmi: 'Math.floor(x)',
      rpi: 'Math.ceil(x)',
    }[rnd as IntRounding];
    return `{ const x = f[${a}]; u[${d}] = x !== x ? 0 : x <= ${lo} ? ${lo} : x >= ${hi} ? ${hi} : ${rounded}; }`;
  }
  if (rnd !== undefined) return undefined;
  switch (pair) {
    case 'u64.u32':
    case 's64.u32':
      return `u[${d}] = u[${a}]; u[${d + 1}] = 0;`;
    case 'u64.s32':
    case 's64.s32':
      return `u[${d + 1}] = u[${a}] >= 0x80000000 ? 0xffffffff : 0; u[${d}] = u[${a}];`;
    case 'u32.u64':
    case 'u32.s64':
    case 's32.u64':
    case 's32.s64':
    case 'u32.s32':
    case 's32.u32':
      return `u[${d}] = u[${a}];`;
    case 'f32.f16':
      return `f[${d}] = F16_VALUES[u[${a}]];`;
    case 'f32.bf16':
      return `u[${d}] = u[${a}] << 16;`;
  }
  return undefined;
}

/** A source as a number (≤ 32-bit integers, floats) or a bigint (64-bit integers). */
function readNumeric(type: string, a: number, ftz: boolean): (u: Uint32Array) => number | bigint {
  switch (type) {
    case 'u16':
    case 'u32':
      return (u) => u[a]!;
    case 's16':
      return (u) => s16(u[a]!);
    case 's32':
      return (u) => u[a]! | 0;
    case 'u64':
      return (u) => get64(u, a);
    case 's64':
      return (u) => getS64(u, a);
    case 'f16':
      return (u) => f16ToNumber(u[a]!);
    case 'bf16':
      return (u) => bf16ToNumber(u[a]!);
    default:
      return ftz ? (u) => flush(bitsToF32(u[a]!)) : (u) => bitsToF32(u[a]!);
  }
}

/** Writes an integer (bigint, truncated to the width) or a float value already rounded to `type`. */
function writeNumeric(type: string, d: number): (u: Uint32Array, v: number | bigint) => void {
  switch (type) {
    case 'u16':
    case 's16':
      return (u, v) => {
        u[d] = Number(BigInt.asUintN(16, v as bigint));
      };
    case 'u32':
    case 's32':
      return (u, v) => {
        u[d] = Number(BigInt.asUintN(32, v as bigint));
      };
    case 'u64':
    case 's64':
      return (u, v) => set64(u, d, v as bigint);
    case 'f16':
      return (u, v) => {
        u[d] = numberToF16(v as number);
      };
    case 'bf16':
      return (u, v) => {
        u[d] = numberToBf16(v as number);
      };
    default:
      return (u, v) => {
        u[d] = f32ToBits(v as number);
      };
  }
}

/** `cvt.rna.tf32.f32 d, a` and `cvt.rn.{f16,bf16}x2.f32 d, hi, lo`. */
function lowerPackedCvt(ctx: Context): Lowered {
  const pattern = ctx.ins.parts.join('.');
  if (pattern === 'cvt.rna.tf32.f32') {
    const d = dst(ctx, 0, 'b32');
    const a = src(ctx, 1, 'f32');
    return call((u) => {
      u[d] = roundToTf32(u[a]!);
    });
  }
  const half = pattern === 'cvt.rn.f16x2.f32' ? 'f16' : pattern === 'cvt.rn.bf16x2.f32' ? 'bf16' : undefined;
  if (!half) return unsupported(ctx);
  const d = dst(ctx, 0, 'b32');
  const hi = src(ctx, 1, 'f32');
  const lo = src(ctx, 2, 'f32');
  const toHalf = (bits: number) =>
    half === 'f16'
      ? numberToF16(roundToFormat(bitsToF32(bits), F16, 'rn'))
      : numberToBf16(roundToFormat(bitsToF32(bits), BF16, 'rn'));
  return call((u) => {
    u[d] = (toHalf(u[lo]!) | (toHalf(u[hi]!) << 16)) >>> 0;
  });
}
