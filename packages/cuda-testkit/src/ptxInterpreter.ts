import {
  MMA_SHAPES,
  type MmaInputType,
  type MmaShape,
  swizzleOffset,
  type TensorMapTiled,
} from '@rayo/cuda-ptx';
import type { FakeLaunch, FakeLibCuda } from './fakeLibCuda.js';
import { decodeFakeTensorMap } from './fakeTensorMap.js';
import { bf16ToNumber, bitsToF32, F16_VALUES, f16ToNumber, f32ToBits } from './floatBits.js';
import { AsyncCopyQueue, ldmatrixWarp, Mbarriers, mmaSyncWarp, roundToTf32 } from './tensorCoreSemantics.js';
import { decodeWgmmaDescriptor, type WgmmaDescriptor, wgmmaWarp } from './wgmmaSemantics.js';

/**
 * Executes the PTX the builder emits against the fake libcuda's device
 * memory, so that kernels can be checked against the reference
 * implementations on a machine without a GPU.
 *
 * Each entry is compiled once per interpreter: every basic block becomes one
 * JavaScript function over pre-resolved register slots (see "compiler"
 * below), so a thread pays one call per block rather than a dispatch per
 * instruction. A thread's registers are one Uint32Array (with a
 * Float32Array over the same bytes, so moves between `%r` and `%f` keep every
 * bit): 16-bit registers hold their value zero-extended, 64-bit registers two
 * words (low first), predicates 0 or 1; immediates and special registers are
 * slots too, filled before a thread starts.
 *
 * Numerics: integer arithmetic wraps as in PTX; f32 arithmetic, fma, sqrt,
 * division and conversions are correctly rounded in every rounding mode;
 * `.approx` functions (ex2, lg2, rsqrt, sin, cos, tanh, and approximate
 * division and reciprocal) are modelled as correctly rounded, so hardware
 * differs by its documented error. `.ftz` flushes subnormal inputs and
 * results. Integer division by zero gives all ones and the remainder the
 * dividend (PTX leaves both unspecified; a hardware thread does not trap).
 *
 * Scheduling: a block's threads run one after another up to each `bar.sync`,
 * which is exactly the ordering a barrier guarantees. Warp-synchronous
 * instructions (shfl.sync, vote.sync, bar.warp.sync) are a meeting point of
 * the 32 lanes of a warp (lanes are consecutive linear thread indices): each
 * lane runs up to the instruction and posts its operands; once every live
 * lane of its membermask has arrived at the same instruction, all of them get
 * their results. Lanes that exited, and lanes past the end of a partial last
 * warp, take no part and do not hold up the others; a shfl that reads such a
 * lane (hardware-undefined) gets 0xffffffff, a NaN as f32 and -1 as an
 * integer, so that a kernel depending on it fails its checks. A lane of the
 * membermask waiting at a barrier or at another warp instruction is a
 * deadlock on hardware and an error here. Atomics are read-modify-writes in
 * this (sequentially consistent) order.
 *
 * Tensor cores (see tensorCoreSemantics.ts): `mma.sync` and `ldmatrix` are
 * warp-synchronous instructions of the whole warp; `cp.async` reads its
 * source when issued and writes shared memory when a `cp.async.wait_group`
 * or `wait_all` of the same thread retires its group. mbarriers live beside
 * shared memory (tensorCoreSemantics.ts); a `cp.async.bulk` lands at once and
 * completes its bytes on its mbarrier; a thread whose `mbarrier.try_wait`
 * finds the phase incomplete stops (as at a barrier) and polls again once
 * the others have run, and threads that poll with nothing changed are a
 * deadlock and an error.
 * `wgmma.mma_async` (wgmmaSemantics.ts) runs per warp, each warp computing
 * its 16 rows of D from K-major tiles at once; its fence, commit and wait
 * are no-ops.
 *
 * Memory: global accesses must fall inside one live allocation and be
 * naturally aligned (vectors to their whole size), shared accesses inside
 * the block's static plus dynamic shared memory, else the launch throws.
 * Shared memory starts zeroed in every block. Anything the builder does not
 * emit, or a form of an instruction it does not know, throws naming the line.
 */

// ------------------------------------------------------------------ signals

/** Block code returns the next pc, or one of these when the thread must stop. */
const EXIT = -1;
const BARRIER = -2;
const WARP = -3;
/** A thread polled an mbarrier whose phase is not complete: others must run before it polls again. */
const SPIN = -4;

/** A thread that runs this many instructions without stopping is taken to be stuck. */
const RUNAWAY_STEPS = 2 ** 28;

/** The value a shfl reads from a lane that takes no part in it. */
const INACTIVE_LANE_VALUE = 0xffffffff;

const TWO32 = 4294967296;

/** One warp-synchronous instruction: computes every arrived lane's result at once. */
interface WarpSite {
  readonly line: string;
  /** `lanes[i]` is lane i if it arrived here, else undefined. */
  complete(lanes: readonly (Thread | undefined)[]): void;
}

const RUNNING = 0;
const AT_BARRIER = 1;
const AT_WARP = 2;
const EXITED = 3;
const AT_SPIN = 4;

class Thread {
  pc = 0;
  status = RUNNING;
  /** Barrier id and expected thread count (0: the whole block) while at a barrier. */
  barrier = 0;
  barrierCount = 0;
  /** What the thread posted at a warp-synchronous instruction. */
  site: WarpSite | undefined = undefined;
  mask = 0;
  op0 = 0;
  op1 = 0;
  op2 = 0;
  readonly f: Float32Array;
  /** The block's shared memory, as words, floats and halves. */
  readonly shared32: Uint32Array;
  readonly sharedF32: Float32Array;
  readonly shared16: Uint16Array;
  readonly shared8: Uint8Array;
  readonly sharedBytes: number;
  /** This thread's cp.async copies not yet waited for. */
  readonly copies = new AsyncCopyQueue();
  readonly mbarriers: Mbarriers;

  constructor(
    readonly u: Uint32Array,
    /** Index in the block (x fastest); lane and warp follow from it. */
    readonly linear: number,
    shared: SharedMemory,
  ) {
    this.f = new Float32Array(u.buffer);
    this.shared32 = shared.words;
    this.sharedF32 = shared.floats;
    this.shared16 = shared.halves;
    this.shared8 = shared.octets;
    this.mbarriers = shared.mbarriers;
    this.sharedBytes = shared.bytes;
  }

  get lane(): number {
    return this.linear & 31;
  }

  get warp(): number {
    return this.linear >>> 5;
  }
}

class SharedMemory {
  readonly words: Uint32Array;
  readonly floats: Float32Array;
  readonly halves: Uint16Array;
  readonly octets: Uint8Array;
  readonly mbarriers = new Mbarriers();

  constructor(readonly bytes: number) {
    const buffer = new ArrayBuffer(Math.ceil(bytes / 16) * 16);
    this.words = new Uint32Array(buffer);
    this.floats = new Float32Array(buffer);
    this.halves = new Uint16Array(buffer);
    this.octets = new Uint8Array(buffer);
  }
}

function fail(message: string): never {
  throw new Error(`ptx interpreter: ${message}`);
}

// ------------------------------------------------------------ float helpers

const MIN_NORMAL_F32 = 2 ** -126;
const MAX_F32 = bitsToF32(0x7f7fffff);

/** Subnormals to zero of the same sign. */
function flush(x: number): number {
  return x !== 0 && Math.abs(x) < MIN_NORMAL_F32 ? (x < 0 ? -0 : 0) : x;
}

/** [0, 1], NaN to 0. */
function saturate(x: number): number {
  return x > 0 ? Math.min(x, 1) : 0;
}

/** The f32 next to finite `x` toward +inf (`up`) or -inf. */
function nextF32(x: number, up: boolean): number {
  if (x === 0) return up ? 2 ** -149 : -(2 ** -149);
  const bits = f32ToBits(x);
  return bitsToF32(x > 0 === up ? bits + 1 : bits - 1);
}

type FloatRounding = 'rn' | 'rz' | 'rm' | 'rp';

/** How an exact result relates to its double approximation, for directed rounding. */
const SUM = 0;
const PRODUCT = 1;
const QUOTIENT = 2;
const ROOT = 3;
type ResultKind = typeof SUM | typeof PRODUCT | typeof QUOTIENT | typeof ROOT;

/**
 * Sign of (exact - v) for v an f32 or the midpoint of two: for a sum,
 * exact = approx + err; a product is exact in a double; a quotient x / y and
 * a root sqrt(x) are compared through v·y and v·v, exact in a double.
 */
function residual(kind: ResultKind, approx: number, err: number, x: number, y: number, v: number): number {
  switch (kind) {
    case SUM:
      return Math.sign(approx - v + err);
    case PRODUCT:
      return Math.sign(approx - v);
    case QUOTIENT:
      return Math.sign(x - v * y) * Math.sign(y);
    default:
      return Math.sign(x - v * v);
  }
}

/** The f32 rounding under `mode` of an exact result known by its double approximation. */
function roundF32(
  approx: number,
  mode: FloatRounding,
  kind: ResultKind,
  err: number,
  x: number,
  y: number,
): number {
  // Zero, infinities and NaN are exact here: f32 operands cannot underflow or overflow a double.
  if (approx === 0 || !Number.isFinite(approx)) return approx;
  const r = Math.fround(approx);
  if (!Number.isFinite(r)) {
    const up = mode === 'rn' || (mode === 'rp' && r > 0) || (mode === 'rm' && r < 0);
    return up ? r : Math.sign(r) * MAX_F32;
  }
  const c = residual(kind, approx, err, x, y, r);
  if (c === 0) return r;
  const other = nextF32(r, c > 0);
  if (mode === 'rn') {
    const m = residual(kind, approx, err, x, y, (r + other) / 2);
    if (m === 0) return (f32ToBits(r) & 1) === 0 ? r : other;
    return m === c ? other : r;
  }
  const lo = c > 0 ? r : other;
  const hi = c > 0 ? other : r;
  if (mode === 'rm') return lo;
  if (mode === 'rp') return hi;
  return Math.abs(lo) < Math.abs(hi) ? lo : hi;
}

/** The rounding error of s = fl(a + b): a + b = s + err exactly. */
function sumError(a: number, b: number, s: number): number {
  const bb = s - a;
  return a - (s - bb) + (b - bb);
}

/*
 * fma.rn.f32: a·b is exact in a double, so s = fl(a·b + c) has one rounding;
 * rounding s to f32 is then wrong only where s lies exactly halfway between
 * two f32 (r and o below), and the error of the sum says which way the exact
 * value lies. Block code inlines the common path (FMA_JS) and calls fmaTie.
 */
function fmaF32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const r = Math.fround(s);
  const o = r + 2 * (s - r);
  return r !== s && r - r === 0 && Math.fround(o) === o ? fmaTie(p, c, s, r, o) : r;
}

function fmaTie(p: number, c: number, s: number, r: number, o: number): number {
  const err = sumError(p, c, s);
  if (err === 0) return r;
  return err > 0 === o > r ? o : r;
}

/** JS for `f[d] = fma(f[a], f[b], f[c])`, as fmaF32. */
function fmaJs(d: number, a: number, b: number, c: number): string {
  return `{ const c = f[${c}], p = f[${a}] * f[${b}], s = p + c, r = Math.fround(s), o = r + 2 * (s - r); f[${d}] = r !== s && r - r === 0 && Math.fround(o) === o ? fmaTie(p, c, s, r, o) : r; }`;
}

interface FloatFormat {
  readonly precision: number;
  readonly minExp: number;
  readonly maxExp: number;
}
const F16: FloatFormat = { precision: 11, minExp: -14, maxExp: 15 };
const BF16: FloatFormat = { precision: 8, minExp: -126, maxExp: 127 };
const F32_FORMAT: FloatFormat = { precision: 24, minExp: -126, maxExp: 127 };

/** `x` (exact in a double) rounded to `format` under `mode`; ±Infinity past its range. */
function roundToFormat(x: number, format: FloatFormat, mode: FloatRounding): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const ax = Math.abs(x);
  let e = Math.floor(Math.log2(ax));
  if (2 ** e > ax) e--;
  else if (2 ** (e + 1) <= ax) e++;
  const quantum = 2 ** (Math.max(e, format.minExp) - (format.precision - 1));
  const scaled = ax / quantum;
  let n = Math.floor(scaled);
  const frac = scaled - n;
  if (frac !== 0) {
    const away =
      mode === 'rn'
        ? frac > 0.5 || (frac === 0.5 && n % 2 === 1)
        : mode === 'rp'
          ? x > 0
          : mode === 'rm' && x < 0;
    if (away) n++;
  }
  let value = n * quantum;
  const max = (2 - 2 ** (1 - format.precision)) * 2 ** format.maxExp;
  if (value > max) {
    const toInfinity = mode === 'rn' || (mode === 'rp' && x > 0) || (mode === 'rm' && x < 0);
    value = toInfinity ? Number.POSITIVE_INFINITY : max;
  }
  return x < 0 ? -value : value;
}

/** A 64-bit integer as a double rounded to odd: rounding that to 24 bits or fewer is then correct. */
function bigToDoubleRoundOdd(v: bigint): number {
  const negative = v < 0n;
  const a = negative ? -v : v;
  const shift = a.toString(2).length - 53;
  if (shift <= 0) return Number(v);
  let top = a >> BigInt(shift);
  if (top << BigInt(shift) !== a) top |= 1n;
  const value = Number(top) * 2 ** shift;
  return negative ? -value : value;
}

/** Bits of a value representable in f16 (or ±Infinity, NaN). */
function numberToF16(value: number): number {
  if (Number.isNaN(value)) return 0x7fff;
  const sign = value < 0 || Object.is(value, -0) ? 0x8000 : 0;
  const a = Math.abs(value);
  if (a === Number.POSITIVE_INFINITY) return sign | 0x7c00;
  if (a < 2 ** -14) return sign | (a * 2 ** 24);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  return sign | ((e + 15) << 10) | ((a / 2 ** e - 1) * 1024);
}

/** Bits of a value representable in bf16 (or ±Infinity, NaN). */
function numberToBf16(value: number): number {
  return Number.isNaN(value) ? 0x7fff : f32ToBits(value) >>> 16;
}

type IntRounding = 'rni' | 'rzi' | 'rmi' | 'rpi';

function roundIntegral(x: number, mode: IntRounding): number {
  switch (mode) {
    case 'rni':
      // Math.round breaks ties upward; PTX breaks them to even.
      return x - Math.floor(x) === 0.5 ? 2 * Math.round(x / 2) : Math.round(x);
    case 'rzi':
      return Math.trunc(x);
    case 'rmi':
      return Math.floor(x);
    default:
      return Math.ceil(x);
  }
}

// ---------------------------------------------------------- integer helpers

/** The 64-bit product of two u32 as [low, high] words. */
function mulWideU32(a: number, b: number, out: Uint32Array, d: number): void {
  const p = a * b;
  if (p < 2 ** 53) {
    out[d] = p;
    out[d + 1] = Math.floor(p / TWO32);
    return;
  }
  const aLo = a & 0xffff;
  const aHi = a >>> 16;
  const bLo = b & 0xffff;
  const bHi = b >>> 16;
  const mid = aLo * bHi + aHi * bLo;
  const low = aLo * bLo + (mid % 65536) * 65536;
  out[d] = low;
  out[d + 1] = aHi * bHi + Math.floor(mid / 65536) + Math.floor(low / TWO32);
}

/** The 64-bit product of two s32. */
function mulWideS32(a: number, b: number, out: Uint32Array, d: number): void {
  const p = (a | 0) * (b | 0);
  if (Math.abs(p) < 2 ** 53) {
    out[d] = p;
    out[d + 1] = Math.floor(p / TWO32);
    return;
  }
  set64(out, d, BigInt(a | 0) * BigInt(b | 0));
}

function get64(u: Uint32Array, i: number): bigint {
  return (BigInt(u[i + 1]!) << 32n) | BigInt(u[i]!);
}

function getS64(u: Uint32Array, i: number): bigint {
  return BigInt.asIntN(64, get64(u, i));
}

function set64(u: Uint32Array, i: number, v: bigint): void {
  const w = BigInt.asUintN(64, v);
  u[i] = Number(w & 0xffffffffn);
  u[i + 1] = Number(w >> 32n);
}

/** a + b + carry-in into d (pairs of words; d may alias a or b). */
function add64(u: Uint32Array, d: number, aLo: number, aHi: number, bLo: number, bHi: number): void {
  const lo = aLo + bLo;
  u[d + 1] = aHi + bHi + (lo >= TWO32 ? 1 : 0);
  u[d] = lo;
}

/** -1, 0 or 1 as the 64-bit values at a and b compare. */
function compare64(u: Uint32Array, a: number, b: number, signed: boolean): number {
  let ah = u[a + 1]!;
  let bh = u[b + 1]!;
  if (signed) {
    ah |= 0;
    bh |= 0;
  }
  if (ah !== bh) return ah < bh ? -1 : 1;
  const al = u[a]!;
  const bl = u[b]!;
  return al === bl ? 0 : al < bl ? -1 : 1;
}

function popcount32(x: number): number {
  let v = x >>> 0;
  v = v - ((v >>> 1) & 0x55555555);
  v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
  return (Math.imul((v + (v >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24) & 0xff;
}

function reverse32(x: number): number {
  let v = x >>> 0;
  v = ((v >>> 1) & 0x55555555) | ((v & 0x55555555) << 1);
  v = ((v >>> 2) & 0x33333333) | ((v & 0x33333333) << 2);
  v = ((v >>> 4) & 0x0f0f0f0f) | ((v & 0x0f0f0f0f) << 4);
  v = ((v >>> 8) & 0x00ff00ff) | ((v & 0x00ff00ff) << 8);
  return ((v >>> 16) | (v << 16)) >>> 0;
}

// ------------------------------------------------------------------ parsing

interface SharedDecl {
  readonly name: string;
  readonly bytes: number;
  readonly align: number;
}

interface Entry {
  readonly name: string;
  readonly params: readonly { readonly name: string; readonly type: string }[];
  readonly counts: Readonly<Record<string, number>>;
  readonly shared: readonly SharedDecl[];
  readonly body: readonly string[];
}

interface Module {
  readonly entries: Map<string, Entry>;
  /** Module-scope `.extern .shared` arrays: dynamic shared memory, sized at launch. */
  readonly dynamicShared: readonly { readonly name: string; readonly align: number }[];
}

const DECL_BYTES: Readonly<Record<string, number>> = {
  b8: 1,
  u8: 1,
  s8: 1,
  b16: 2,
  u16: 2,
  s16: 2,
  f16: 2,
  bf16: 2,
  b32: 4,
  u32: 4,
  s32: 4,
  f32: 4,
  b64: 8,
  u64: 8,
  s64: 8,
};

function parseModule(text: string): Module {
  const entries = new Map<string, Entry>();
  const dynamicShared: { name: string; align: number }[] = [];
  const lines = text.split('\n');
  for (const line of lines) {
    const ext = /^\.extern \.shared \.align (\d+) \.\w+ (\w+)\[\];$/.exec(line.trim());
    if (ext) dynamicShared.push({ name: ext[2]!, align: Number(ext[1]) });
  }
  for (let i = 0; i < lines.length; i++) {
    const head = /^\.visible \.entry (\w+)\(/.exec(lines[i]!);
    if (!head) continue;
    const name = head[1]!;
    const params: { name: string; type: string }[] = [];
    for (i++; lines[i]!.trim() !== ')'; i++) {
      const p = /\.param (?:\.align \d+ )?\.(\w+) (\w+)(\[\d+\])?/.exec(lines[i]!);
      // A by-value byte array is a tensor map, the only one the builder declares.
      if (p) params.push({ name: p[2]!, type: p[3] ? 'tensorMap' : p[1]! });
    }
    while (lines[i]!.trim() !== '{') i++;
    const counts: Record<string, number> = { p: 0, rs: 0, r: 0, f: 0, rd: 0 };
    const shared: SharedDecl[] = [];
    const body: string[] = [];
    for (i++; lines[i]!.trim() !== '}'; i++) {
      const line = lines[i]!.trim();
      const reg = /^\.reg \.\w+ %(\w+)<(\d+)>;$/.exec(line);
      if (reg) {
        if (!(reg[1]! in counts)) fail(`register bank %${reg[1]}`);
        counts[reg[1]!] = Number(reg[2]);
        continue;
      }
      const sh = /^\.shared \.align (\d+) \.(\w+) (\w+)\[(\d+)\];$/.exec(line);
      if (sh) {
        const bytes = DECL_BYTES[sh[2]!] ?? fail(`shared type .${sh[2]}`);
        shared.push({ name: sh[3]!, bytes: bytes * Number(sh[4]), align: Number(sh[1]) });
        continue;
      }
      if (line === '' || line.startsWith('//')) continue;
      body.push(line);
    }
    entries.set(name, { name, params, counts, shared, body });
  }
  return { entries, dynamicShared };
}

/** Splits `a, [b+4], {c, d}` at top-level commas. */
function splitOperands(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of text) {
    if (ch === '[' || ch === '{') depth++;
    if (ch === ']' || ch === '}') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  if (cur.trim() !== '') out.push(cur.trim());
  return out;
}

// ------------------------------------------------------------------- layout

/** Special registers in fixed slots at the start of every register file. */
const SPECIAL_SLOT: Readonly<Record<string, number>> = {
  '%tid.x': 0,
  '%tid.y': 1,
  '%tid.z': 2,
  '%ntid.x': 3,
  '%ntid.y': 4,
  '%ntid.z': 5,
  '%ctaid.x': 6,
  '%ctaid.y': 7,
  '%ctaid.z': 8,
  '%nctaid.x': 9,
  '%nctaid.y': 10,
  '%nctaid.z': 11,
  '%laneid': 12,
  '%warpid': 13,
  '%nwarpid': 14,
  '%smid': 15,
  '%nsmid': 16,
  '%lanemask_eq': 17,
  '%lanemask_le': 18,
  '%lanemask_lt': 19,
  '%lanemask_ge': 20,
  '%lanemask_gt': 21,
};
const SPECIALS = 22;
const SPECIAL_SLOTS: ReadonlyMap<string, number> = new Map(Object.entries(SPECIAL_SLOT));

/** `table[key]` for keys the table itself holds (not inherited ones such as `constructor`). */
function own<V>(table: Readonly<Record<string, V>>, key: string): V | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

type Width = 1 | 16 | 32 | 64;

function widthOf(type: string): Width {
  switch (type) {
    case 'pred':
      return 1;
    case 'u16':
    case 's16':
    case 'b16':
    case 'f16':
    case 'bf16':
      return 16;
    case 'u32':
    case 's32':
    case 'b32':
    case 'f32':
      return 32;
    case 'u64':
    case 's64':
    case 'b64':
      return 64;
    default:
      return fail(`type .${type}`);
  }
}

const BANK_WIDTH: Readonly<Record<string, readonly Width[]>> = {
  p: [1],
  rs: [16],
  r: [32],
  f: [32],
  rd: [64],
};

const REG = /^%(rd|rs|r|f|p)(\d+)$/;

/** Where everything of one entry lives in a thread's register file. */
class Layout {
  readonly base: Readonly<Record<string, number>>;
  readonly #counts: Readonly<Record<string, number>>;
  readonly #init: number[] = [];
  readonly #constants = new Map<string, number>();
  /** Shared variables (static, then dynamic) by name: their offsets in the block's window. */
  readonly sharedOffsets = new Map<string, number>();
  readonly staticSharedBytes: number;
  /** Offset of the dynamic shared memory (after the static variables). */
  readonly dynamicOffset: number;
  /** Tensor-map parameters by symbol: their index among the parameters. */
  readonly tensorMaps = new Map<string, number>();

  constructor(entry: Entry, module: Module) {
    entry.params.forEach((p, i) => {
      if (p.type === 'tensorMap') this.tensorMaps.set(p.name, i);
    });
    const c = entry.counts;
    this.#counts = c;
    let next = SPECIALS;
    const base: Record<string, number> = {};
    for (const [bank, words] of [
      ['r', 1],
      ['f', 1],
      ['rd', 2],
      ['rs', 1],
      ['p', 1],
    ] as const) {
      base[bank] = next;
      next += (c[bank] ?? 0) * words;
    }
    this.base = base;
    this.#init = new Array<number>(next).fill(0);
    let offset = 0;
    for (const v of entry.shared) {
      offset = Math.ceil(offset / v.align) * v.align;
      this.sharedOffsets.set(v.name, offset);
      offset += v.bytes;
    }
    this.staticSharedBytes = offset;
    const align = Math.max(16, ...module.dynamicShared.map((d) => d.align));
    this.dynamicOffset = Math.ceil(offset / align) * align;
    for (const d of module.dynamicShared) this.sharedOffsets.set(d.name, this.dynamicOffset);
  }

  get size(): number {
    return this.#init.length;
  }

  /** Initial register file: zeros and the constants. */
  template(): Uint32Array {
    return Uint32Array.from(this.#init);
  }

  /** The slot of register `op` (a register of a bank holding `width`), or undefined if `op` is no register. */
  register(op: string, width: Width, line: string): number | undefined {
    const m = REG.exec(op);
    if (!m) return undefined;
    const bank = m[1]!;
    if (!BANK_WIDTH[bank]!.includes(width)) fail(`${op} cannot hold a ${width}-bit value: ${line}`);
    const index = Number(m[2]);
    if (index >= (this.#counts[bank] ?? 0)) fail(`${op} is not declared: ${line}`);
    return this.base[bank]! + index * (bank === 'rd' ? 2 : 1);
  }

  /** A destination register's slot. */
  dest(op: string, width: Width, line: string): number {
    return this.register(op, width, line) ?? fail(`expected a register, got ${op}: ${line}`);
  }

  /** A source: a register, special register, shared variable or immediate of `type`. */
  source(op: string, type: string, line: string): number {
    const width = widthOf(type);
    const reg = this.register(op, width, line);
    if (reg !== undefined) return reg;
    const special = SPECIAL_SLOTS.get(op);
    if (special !== undefined) {
      if (width !== 32) fail(`${op} is 32 bits: ${line}`);
      return special;
    }
    const shared = this.sharedOffsets.get(op);
    if (shared !== undefined) return this.#constant(`${width}:${op}`, width, BigInt(shared));
    const map = this.tensorMaps.get(op);
    if (map !== undefined) {
      if (width !== 64) fail(`a tensor map's address is 64 bits: ${line}`);
      return this.#constant(`map:${op}`, width, TENSOR_MAP_HANDLE + BigInt(map));
    }
    if (width === 1) fail(`expected a predicate register, got ${op}: ${line}`);
    return this.#constant(`${type}:${op}`, width, parseImmediate(op, type, line));
  }

  #constant(key: string, width: Width, value: bigint): number {
    let slot = this.#constants.get(key);
    if (slot === undefined) {
      slot = this.#init.length;
      this.#constants.set(key, slot);
      const bits = BigInt.asUintN(width, value);
      this.#init.push(Number(bits & 0xffffffffn));
      if (width === 64) this.#init.push(Number(bits >> 32n));
    }
    return slot;
  }
}

/** An immediate's bits (as an unsigned integer of the type's width). */
function parseImmediate(op: string, type: string, line: string): bigint {
  const hexFloat = /^0[fF]([0-9a-fA-F]{8})$/.exec(op);
  if (hexFloat) {
    if (type !== 'f32' && type !== 'b32') fail(`an f32 literal for .${type}: ${line}`);
    return BigInt(Number.parseInt(hexFloat[1]!, 16));
  }
  if (/^-?(\d+|0[xX][0-9a-fA-F]+)U?$/.test(op)) {
    const negative = op.startsWith('-');
    const magnitude = BigInt(op.replace(/^-/, '').replace(/U$/, ''));
    if (type === 'f32') return BigInt(f32ToBits(Number(negative ? -magnitude : magnitude)));
    return negative ? -magnitude : magnitude;
  }
  if (type === 'f32' && !Number.isNaN(Number(op))) return BigInt(f32ToBits(Number(op)));
  return fail(`not an operand of .${type}: ${op} in ${line}`);
}

// ------------------------------------------------------------------ memory

/** A live allocation as seen by one memory instruction: bounds and typed views. */
class Window {
  generation = -1;
  start = 0;
  end = 0;
  words: Uint32Array = new Uint32Array(0);
  floats: Float32Array = new Float32Array(0);
  halves: Uint16Array = new Uint16Array(0);
}

interface Allocation {
  readonly start: number;
  readonly end: number;
  readonly words: Uint32Array;
  readonly floats: Float32Array;
  readonly halves: Uint16Array;
}

/** What the compiled steps read of the launch in progress. */
class LaunchState {
  /** Bumped per launch, so that windows of an earlier launch (maybe freed since) are looked up again. */
  generation = 0;
  /** Each parameter's value as two words, in declaration order. */
  params: Uint32Array = new Uint32Array(0);
  /** Each tensor-map parameter's map, by parameter index. */
  tensorMaps: (TensorMapTiled | undefined)[] = [];
  clock = 0;
  readonly #allocations = new Map<number, Allocation>();

  constructor(private readonly fake: FakeLibCuda) {}

  begin(): void {
    this.generation++;
    this.#allocations.clear();
  }

  /** Points `w` at the allocation holding [address, address + bytes), or throws. */
  locate(w: Window, address: number, bytes: number, line: string): void {
    const found = this.fake.deviceView(BigInt(address), bytes);
    if (!found) fail(`${line}: ${bytes} bytes at 0x${address.toString(16)} are outside every allocation`);
    const start = address - found.offset;
    let a = this.#allocations.get(start);
    if (!a) {
      const { view } = found;
      if (view.byteOffset % 4 !== 0 || start % 16 !== 0)
        fail(`allocation at 0x${start.toString(16)} is misaligned`);
      const words = Math.floor(view.byteLength / 4);
      a = {
        start,
        end: start + view.byteLength,
        words: new Uint32Array(view.buffer, view.byteOffset, words),
        floats: new Float32Array(view.buffer, view.byteOffset, words),
        halves: new Uint16Array(view.buffer, view.byteOffset, Math.floor(view.byteLength / 2)),
      };
      this.#allocations.set(start, a);
    }
    w.generation = this.generation;
    w.start = a.start;
    w.end = a.end;
    w.words = a.words;
    w.floats = a.floats;
    w.halves = a.halves;
  }
}

function misaligned(line: string, address: number, bytes: number): never {
  return fail(`${line}: address 0x${address.toString(16)} is not aligned to ${bytes} bytes`);
}

function outsideShared(line: string, address: number, bytes: number, size: number): never {
  return fail(`${line}: ${bytes} bytes at shared address ${address} are outside the block's ${size} bytes`);
}

// ----------------------------------------------------------------- compiler

/*
 * Each instruction is lowered once, either to JavaScript statements over the
 * register file (`u` words, `f` floats, constant slot indices), inlined into
 * the code of its basic block, or to a closure the block calls (the rarer and
 * more involved forms). Each basic block becomes one function, so that a
 * thread runs straight-line code between branches and pays one call per
 * block, not per instruction.
 */

/** An instruction as its block runs it. */
type Lowered =
  /** Statements inlined into the block. */
  | { readonly kind: 'js'; readonly js: string }
  /** A closure called for its effect. */
  | { readonly kind: 'call'; readonly action: Action }
  /** A closure that stops the thread: it returns EXIT, BARRIER or WARP. */
  | { readonly kind: 'stop'; readonly action: Stop }
  | { readonly kind: 'branch'; readonly target: number };

type Action = (u: Uint32Array, f: Float32Array, t: Thread) => void;
type Stop = (u: Uint32Array, f: Float32Array, t: Thread) => number;
/** A compiled basic block: runs it, returns the next pc or a stop signal (having set `t.pc`). */
type BlockCode = (u: Uint32Array, f: Float32Array, t: Thread) => number;

const inline = (js: string): Lowered => ({ kind: 'js', js });
const call = (action: Action): Lowered => ({ kind: 'call', action });
const stop = (action: Stop): Lowered => ({ kind: 'stop', action });

interface Instruction {
  readonly line: string;
  readonly guard: { readonly slot: number; readonly negate: boolean } | undefined;
  readonly parts: readonly string[];
  readonly ops: readonly string[];
}

interface Context {
  readonly ins: Instruction;
  readonly layout: Layout;
  readonly labels: Map<string, number>;
  readonly entry: Entry;
  readonly state: LaunchState;
  /** Index of the instruction: names its window (`w<pc>`) and its line (`L[pc]`) in block code. */
  readonly pc: number;
}

interface Compiled {
  /** Block code by the pc it starts at (undefined elsewhere). */
  readonly blocks: readonly (BlockCode | undefined)[];
  /** Instructions in each block, by the pc it starts at. */
  readonly lengths: Int32Array;
  readonly layout: Layout;
  readonly template: Uint32Array;
}

/** Longest run of instructions in one block function (longer blocks are split). */
const MAX_BLOCK = 160;

/** What block code may name besides u, f and t. */
const BLOCK_HELPERS = {
  TWO32,
  compare64,
  flush,
  fmaTie,
  misaligned,
  mulWideS32,
  mulWideU32,
  outsideShared,
  F16_VALUES,
};

function compileEntry(entry: Entry, module: Module, state: LaunchState): Compiled {
  const layout = new Layout(entry, module);
  const labels = new Map<string, number>();
  const lines: string[] = [];
  for (const line of entry.body) {
    const label = /^(\$?[\w$]+):$/.exec(line);
    if (label) labels.set(label[1]!, lines.length);
    else lines.push(line);
  }
  const instructions = lines.map((line) => parseInstruction(line, layout));
  const lowered = instructions.map((ins, pc) => lower({ ins, layout, labels, entry, state, pc }));
  // Blocks start at 0, at branch targets and after anything that leaves the block.
  const leaders = new Set<number>([0, ...labels.values()]);
  lowered.forEach((l, pc) => {
    if (l.kind === 'stop' || l.kind === 'branch') leaders.add(pc + 1);
  });
  const windows = lowered.map(() => new Window());
  const env = { ...BLOCK_HELPERS, S: state, L: lines, W: windows, A: lowered.map(actionOf) };
  const blocks: (BlockCode | undefined)[] = new Array(lines.length);
  const lengths = new Int32Array(lines.length + 1);
  let start = 0;
  for (let pc = 1; pc <= lines.length; pc++) {
    if (pc === lines.length || leaders.has(pc) || pc - start === MAX_BLOCK) {
      blocks[start] = blockCode(instructions, lowered, start, pc, env);
      lengths[start] = pc - start;
      start = pc;
    }
  }
  return { blocks, lengths, layout, template: layout.template() };
}

function actionOf(l: Lowered): Action | Stop | undefined {
  return l.kind === 'call' || l.kind === 'stop' ? l.action : undefined;
}

function parseInstruction(line: string, layout: Layout): Instruction {
  if (!line.endsWith(';')) fail(`unterminated instruction: ${line}`);
  let text = line.slice(0, -1).trim();
  let guard: Instruction['guard'];
  const g = /^@(!?)(%p\d+)\s+/.exec(text);
  if (g) {
    guard = { slot: layout.dest(g[2]!, 1, line), negate: g[1] === '!' };
    text = text.slice(g[0].length);
  }
  const space = text.indexOf(' ');
  const opcode = space === -1 ? text : text.slice(0, space);
  const ops = space === -1 ? [] : splitOperands(text.slice(space + 1));
  return { line, guard, parts: opcode.split('.'), ops };
}

/** The function running instructions [start, end) of an entry. */
function blockCode(
  instructions: readonly Instruction[],
  lowered: readonly Lowered[],
  start: number,
  end: number,
  env: Record<string, unknown>,
): BlockCode {
  const body: string[] = [];
  const windows = new Set<number>();
  let open = true;
  for (let pc = start; pc < end; pc++) {
    const { guard } = instructions[pc]!;
    const l = lowered[pc]!;
    const test = guard ? `u[${guard.slot}] ${guard.negate ? '===' : '!=='} 0` : undefined;
    let code: string;
    switch (l.kind) {
      case 'js':
        if (l.js.includes(`w${pc}.`)) windows.add(pc);
        code = l.js;
        break;
      case 'call':
        code = `A[${pc}](u, f, t);`;
        break;
      case 'stop':
        code = `{ t.pc = ${pc + 1}; return A[${pc}](u, f, t); }`;
        break;
      default:
        code = `return ${l.target};`;
    }
    if (test) body.push(`if (${test}) { ${code} }`);
    else {
      body.push(code);
      if (l.kind === 'stop' || l.kind === 'branch') open = false;
    }
  }
  if (open) body.push(`return ${end};`);
  const prelude = [
    `const { ${Object.keys(env).join(', ')} } = env;`,
    ...[...windows].map((pc) => `const w${pc} = W[${pc}];`),
  ];
  const source = `'use strict';\n${prelude.join('\n')}\nreturn function block${start}(u, f, t) {\n${body.join('\n')}\n};`;
  return new Function('env', source)(env) as BlockCode;
}

function unsupported(ctx: Context): never {
  return fail(`unsupported instruction: ${ctx.ins.line}`);
}

type Lowering = (ctx: Context) => Lowered;

/** The opcodes whose lowering is chosen by the opcode alone, grouped by the function that lowers them. */
const LOWERING_GROUPS: readonly (readonly [readonly string[], Lowering])[] = [
  [['atom', 'red'], lowerAtomic],
  [['mov', 'cvta'], lowerMove],
  [['add', 'sub', 'mul', 'div', 'rem', 'min', 'max'], lowerBinary],
  [['mad', 'fma'], lowerMultiplyAdd],
  [['neg', 'abs', 'sqrt', 'rcp', 'rsqrt', 'ex2', 'lg2', 'sin', 'cos', 'tanh'], lowerUnary],
  [['and', 'or', 'xor', 'not'], lowerLogic],
  [['shl', 'shr'], lowerShift],
  [['popc', 'clz', 'brev', 'bfe', 'bfi'], lowerBits],
  [['setp'], lowerSetp],
  [['selp'], lowerSelp],
  [['cvt'], lowerCvt],
  [['shfl'], lowerShfl],
  [['vote'], lowerVote],
  [['mma'], lowerMma],
  [['ldmatrix'], lowerLdmatrix],
  [['mbarrier'], lowerMbarrier],
  [['wgmma'], lowerWgmma],
];

const LOWERING_OF: ReadonlyMap<string, Lowering> = new Map(
  LOWERING_GROUPS.flatMap(([opcodes, lowering]) => opcodes.map((opcode) => [opcode, lowering] as const)),
);

function lower(ctx: Context): Lowered {
  const { parts } = ctx.ins;
  switch (parts[0]) {
    case 'ret':
    case 'exit':
      return stop(() => EXIT);
    case 'bra':
      return {
        kind: 'branch',
        target: ctx.labels.get(ctx.ins.ops[0]!) ?? fail(`unknown label: ${ctx.ins.line}`),
      };
    case 'bar':
      return parts[1] === 'warp' ? lowerWarpSync(ctx) : lowerBarrier(ctx);
    case 'membar':
    case 'fence':
      // Threads run one at a time: every access is already visible to the others.
      return inline('');
    case 'ld':
    case 'st':
      return parts[1] === 'param' ? lowerParam(ctx) : lowerMemory(ctx);
    case 'cp':
      return ctx.ins.parts[2] !== 'bulk'
        ? lowerCpAsync(ctx)
        : ctx.ins.parts[3] === 'tensor'
          ? lowerTensorCopy(ctx)
          : lowerBulkCopy(ctx);
    case 'setmaxnreg':
      // Register budgets change nothing a thread computes.
      if (!/^setmaxnreg\.(inc|dec)\.sync\.aligned\.u32$/.test(ctx.ins.parts.join('.'))) unsupported(ctx);
      return inline('');
    default: {
      const lowering = LOWERING_OF.get(parts[0]!) ?? unsupported;
      return lowering(ctx);
    }
  }
}

/** The instruction's type: its last part. */
function typeOf(ctx: Context): string {
  return ctx.ins.parts[ctx.ins.parts.length - 1]!;
}

function has(ctx: Context, modifier: string): boolean {
  return ctx.ins.parts.includes(modifier);
}

/** Fails unless every part between the opcode and the type is one of `allowed`. */
function onlyModifiers(ctx: Context, allowed: readonly string[], typeParts = 1): void {
  const { parts } = ctx.ins;
  if (parts.slice(1, parts.length - typeParts).some((p) => !allowed.includes(p))) unsupported(ctx);
}

function floatRounding(ctx: Context): FloatRounding | undefined {
  return ctx.ins.parts.find((p): p is FloatRounding => p === 'rn' || p === 'rz' || p === 'rm' || p === 'rp');
}

function src(ctx: Context, i: number, type: string): number {
  const op = ctx.ins.ops[i] ?? fail(`missing operand ${i}: ${ctx.ins.line}`);
  return ctx.layout.source(op, type, ctx.ins.line);
}

function dst(ctx: Context, i: number, type: string): number {
  const op = ctx.ins.ops[i] ?? fail(`missing operand ${i}: ${ctx.ins.line}`);
  return ctx.layout.dest(op, widthOf(type), ctx.ins.line);
}

/** JS copying a value of `width` bits from slot a to slot d. */
function copy(width: Width, d: number, a: number): string {
  return width === 64 ? `u[${d}] = u[${a}]; u[${d + 1}] = u[${a + 1}];` : `u[${d}] = u[${a}];`;
}

// ------------------------------------------------------------ control flow

function lowerBarrier(ctx: Context): Lowered {
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

function lowerMove(ctx: Context): Lowered {
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

function lowerParam(ctx: Context): Lowered {
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

// ---------------------------------------------------------------- memory

/** `[base]`, `[base+off]` or `[base+-off]`. */
function parseAddress(ctx: Context, op: string, space: string): { base: number; offset: number } {
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

function lowerMemory(ctx: Context): Lowered {
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

/** `atom.space.op.type d, [a], b{, c}` and `red.space.op.type [a], b`. */
function lowerAtomic(ctx: Context): Lowered {
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

// ------------------------------------------------------------ arithmetic

/** A 16-bit value, sign-extended. */
function s16(x: number): number {
  return (x << 16) >> 16;
}

/** JS reading slot `a` as a number of `type`'s signedness (16- and 32-bit integers). */
function intValue(type: string, a: number): string {
  if (type === 's32') return `(u[${a}] | 0)`;
  if (type === 's16') return `((u[${a}] << 16) >> 16)`;
  return `u[${a}]`;
}

function lowerBinary(ctx: Context): Lowered {
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
function lowerMultiplyAdd(ctx: Context): Lowered {
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

function lowerUnary(ctx: Context): Lowered {
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

// --------------------------------------------------------------- bitwise

function lowerLogic(ctx: Context): Lowered {
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

function lowerShift(ctx: Context): Lowered {
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
function lowerBits(ctx: Context): Lowered {
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

function lowerSetp(ctx: Context): Lowered {
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

function lowerSelp(ctx: Context): Lowered {
  const type = typeOf(ctx);
  if (ctx.ins.parts.length !== 2) unsupported(ctx);
  const d = dst(ctx, 0, type);
  const a = src(ctx, 1, type);
  const b = src(ctx, 2, type);
  const p = src(ctx, 3, 'pred');
  return inline(`if (u[${p}] !== 0) { ${copy(widthOf(type), d, a)} } else { ${copy(widthOf(type), d, b)} }`);
}

// ----------------------------------------------------------- conversions

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
function lowerCvt(ctx: Context): Lowered {
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

// ------------------------------------------------------- warp-synchronous

function lowerWarpSync(ctx: Context): Lowered {
  if (ctx.ins.parts.join('.') !== 'bar.warp.sync') unsupported(ctx);
  const mask = src(ctx, 0, 'b32');
  const site: WarpSite = { line: ctx.ins.line, complete: () => {} };
  return stop((u, _f, t) => {
    t.site = site;
    t.mask = u[mask]!;
    return WARP;
  });
}

/** `shfl.sync.mode.b32 d{|p}, a, b, c, membermask`, with PTX's lane arithmetic. */
function lowerShfl(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const mode = parts[2]!;
  if (parts.length !== 4 || parts[1] !== 'sync' || parts[3] !== 'b32') unsupported(ctx);
  if (!['up', 'down', 'bfly', 'idx'].includes(mode)) unsupported(ctx);
  const [dOp, pOp] = ops[0]!.split('|') as [string, string | undefined];
  const d = ctx.layout.dest(dOp, 32, line);
  const p = pOp === undefined ? -1 : ctx.layout.dest(pOp, 1, line);
  const a = src(ctx, 1, 'b32');
  const b = src(ctx, 2, 'u32');
  const c = src(ctx, 3, 'b32');
  const mask = src(ctx, 4, 'b32');
  const values = new Uint32Array(32);
  const inRange = new Uint8Array(32);
  const site: WarpSite = {
    line,
    complete: (lanes) => {
      // Every lane reads its source before any destination is written (d may be a).
      for (let lane = 0; lane < 32; lane++) {
        const t = lanes[lane];
        if (!t) continue;
        const bval = t.op1 & 31;
        const clamp = t.op2 & 31;
        const segmask = (t.op2 >>> 8) & 31;
        const maxLane = (lane & segmask) | (clamp & ~segmask);
        const minLane = lane & segmask;
        let j: number;
        let ok: boolean;
        switch (mode) {
          case 'up':
            j = lane - bval;
            ok = j >= maxLane;
            break;
          case 'down':
            j = lane + bval;
            ok = j <= maxLane;
            break;
          case 'bfly':
            j = lane ^ bval;
            ok = j <= maxLane;
            break;
          default:
            j = minLane | (bval & ~segmask);
            ok = j <= maxLane;
        }
        if (!ok) j = lane;
        const source = lanes[j];
        values[lane] = source ? source.op0 : INACTIVE_LANE_VALUE;
        inRange[lane] = ok ? 1 : 0;
      }
      for (let lane = 0; lane < 32; lane++) {
        const t = lanes[lane];
        if (!t) continue;
        t.u[d] = values[lane]!;
        if (p >= 0) t.u[p] = inRange[lane]!;
      }
    },
  };
  return stop((u, _f, t) => {
    t.site = site;
    t.mask = u[mask]!;
    t.op0 = u[a]!;
    t.op1 = u[b]!;
    t.op2 = u[c]!;
    return WARP;
  });
}

/** `vote.sync.ballot.b32 d, p, membermask` and `vote.sync.{any,all,uni}.pred d, p, membermask`. */
function lowerVote(ctx: Context): Lowered {
  const { parts } = ctx.ins;
  const mode = parts[2]!;
  const type = parts[3]!;
  const ok =
    parts.length === 4 &&
    parts[1] === 'sync' &&
    (mode === 'ballot' ? type === 'b32' : ['any', 'all', 'uni'].includes(mode) && type === 'pred');
  if (!ok) unsupported(ctx);
  const d = dst(ctx, 0, type);
  const p = src(ctx, 1, 'pred');
  const mask = src(ctx, 2, 'b32');
  const site: WarpSite = {
    line: ctx.ins.line,
    complete: (lanes) => {
      let ballot = 0;
      let arrived = 0;
      for (const t of lanes) {
        if (!t) continue;
        arrived++;
        if (t.op0) ballot |= 1 << t.lane;
      }
      const ones = popcount32(ballot);
      const result =
        mode === 'ballot'
          ? ballot >>> 0
          : mode === 'any'
            ? Number(ones > 0)
            : mode === 'all'
              ? Number(ones === arrived)
              : Number(ones === 0 || ones === arrived);
      for (const t of lanes) if (t) t.u[d] = result;
    },
  };
  return stop((u, _f, t) => {
    t.site = site;
    t.mask = u[mask]!;
    t.op0 = u[p]!;
    return WARP;
  });
}

// ------------------------------------------------------------ tensor cores

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

/** The register slots of a brace list `{%r1, %r2, ...}` of `count` registers. */
function registerList(ctx: Context, op: string, count: number, type: string, dest: boolean): number[] {
  const names = splitOperands(op.replace(/^\{|\}$/g, ''));
  if (!op.startsWith('{') || names.length !== count)
    fail(`expected ${count} registers in ${op}: ${ctx.ins.line}`);
  return names.map((n) =>
    dest ? ctx.layout.dest(n, widthOf(type), ctx.ins.line) : ctx.layout.source(n, type, ctx.ins.line),
  );
}

/** A warp-synchronous instruction that needs all 32 lanes (`.aligned` tensor-core instructions). */
function wholeWarp(line: string, complete: (lanes: readonly Thread[]) => void): Lowered {
  const site: WarpSite = {
    line,
    complete: (lanes) => {
      const missing = lanes.indexOf(undefined);
      if (missing >= 0) fail(`lane ${missing} of the warp did not execute ${line} (it needs all 32 lanes)`);
      complete(lanes as readonly Thread[]);
    },
  };
  return stop((_u, _f, t) => {
    t.site = site;
    t.mask = 0xffffffff;
    return WARP;
  });
}

/** `mma.sync.aligned.shape.row.col.f32.type.type.f32 d, a, b, c`. */
function lowerMma(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const shape = parts[3] as MmaShape;
  const type = parts[7] as MmaInputType;
  const info = Object.hasOwn(MMA_SHAPES, shape) ? MMA_SHAPES[shape] : undefined;
  const form = `mma.sync.aligned.${shape}.row.col.f32.${type}.${type}.f32`;
  if (!info?.inputs.includes(type) || parts.join('.') !== form) unsupported(ctx);
  const per = info.elementsPerRegister;
  const d = registerList(ctx, ops[0]!, info.c.length, 'f32', true);
  const a = registerList(ctx, ops[1]!, info.a.length / per, 'b32', false);
  const b = registerList(ctx, ops[2]!, info.b.length / per, 'b32', false);
  const c = registerList(ctx, ops[3]!, info.c.length, 'f32', false);
  const gather = (lanes: readonly Thread[], slots: readonly number[]) => {
    const words = new Uint32Array(32 * slots.length);
    lanes.forEach((t, lane) => {
      slots.forEach((slot, i) => {
        words[lane * slots.length + i] = t.u[slot]!;
      });
    });
    return words;
  };
  return wholeWarp(line, (lanes) => {
    const out = mmaSyncWarp(shape, type, gather(lanes, a), gather(lanes, b), gather(lanes, c));
    lanes.forEach((t, lane) => {
      d.forEach((slot, i) => {
        t.u[slot] = out[lane * d.length + i]!;
      });
    });
  });
}

/** `ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 d, [a]`. */
function lowerLdmatrix(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const trans = parts[5] === 'trans';
  const count = Number(/^x([124])$/.exec(parts[4] ?? '')?.[1] ?? Number.NaN);
  const form = `ldmatrix.sync.aligned.m8n8.x${count}${trans ? '.trans' : ''}.shared.b16`;
  if (Number.isNaN(count) || parts.join('.') !== form) unsupported(ctx);
  const d = registerList(ctx, ops[0]!, count, 'b32', true);
  const { base, offset } = parseAddress(ctx, ops[1]!, 'shared');
  return wholeWarp(line, (lanes) => {
    const out = ldmatrixWarp(count, trans, (matrix, row) => {
      const t = lanes[8 * matrix + row]!;
      const at = t.u[base]! + offset;
      if ((at & 15) !== 0) misaligned(line, at, 16);
      if (at + 16 > t.sharedBytes) outsideShared(line, at, 16, t.sharedBytes);
      return t.shared16.subarray(at >>> 1, (at >>> 1) + 8);
    });
    lanes.forEach((t, lane) => {
      d.forEach((slot, i) => {
        t.u[slot] = out[lane * count + i]!;
      });
    });
  });
}

/** `cp.async.{ca,cg}.shared.global [dst], [src], size{, srcSize}` and its commit and waits. */
function lowerCpAsync(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const pattern = parts.join('.');
  if (pattern === 'cp.async.commit_group') return call((_u, _f, t) => t.copies.commit());
  if (pattern === 'cp.async.wait_all') return call((_u, _f, t) => t.copies.waitAll());
  if (pattern === 'cp.async.wait_group') {
    const n = /^\d+$/.test(ops[0] ?? '') ? Number(ops[0]) : fail(`wait_group takes an immediate: ${line}`);
    return call((_u, _f, t) => t.copies.waitGroup(n));
  }
  const cache = parts[2];
  if (
    parts.length !== 5 ||
    (cache !== 'ca' && cache !== 'cg') ||
    parts[3] !== 'shared' ||
    parts[4] !== 'global'
  )
    unsupported(ctx);
  const size = Number(ops[2]);
  if (![4, 8, 16].includes(size) || (cache === 'cg' && size !== 16)) fail(`cp.async size: ${line}`);
  const to = parseAddress(ctx, ops[0]!, 'shared');
  const from = parseAddress(ctx, ops[1]!, 'global');
  const srcSize = ops[3] === undefined ? -1 : src(ctx, 3, 'u32');
  const w = new Window();
  const state = ctx.state;
  return call((u, _f, t) => {
    const at = u[to.base]! + to.offset;
    if ((at & (size - 1)) !== 0) misaligned(line, at, size);
    if (at + size > t.sharedBytes) outsideShared(line, at, size, t.sharedBytes);
    const copied = srcSize < 0 ? size : u[srcSize]!;
    if (copied > size) fail(`${line}: src-size ${copied} is larger than the copy's ${size} bytes`);
    // The bytes past src-size are zeros.
    const data = new Uint8Array(size);
    if (copied > 0) {
      const low = u[from.base]! + from.offset;
      const address = u[from.base + 1]! * TWO32 + low;
      if (w.generation !== state.generation || address < w.start || address + copied > w.end) {
        state.locate(w, address, copied, line);
      }
      if ((low & (size - 1)) !== 0) misaligned(line, address, size);
      const bytes = new Uint8Array(w.words.buffer, w.words.byteOffset + (address - w.start), copied);
      data.set(bytes);
    }
    t.copies.start(() => t.shared8.set(data, at));
  });
}

/** A shared address operand's byte offset in the block's window, checked for 8-byte mbarrier objects. */
function mbarrierAddress(ctx: Context, op: string): (u: Uint32Array, t: Thread) => number {
  const { base, offset } = parseAddress(ctx, op, 'shared');
  const { line } = ctx.ins;
  return (u, t) => {
    const at = u[base]! + offset;
    if ((at & 7) !== 0) misaligned(line, at, 8);
    if (at + 8 > t.sharedBytes) outsideShared(line, at, 8, t.sharedBytes);
    return at;
  };
}

/** `mbarrier.init`, `mbarrier.arrive{.expect_tx}` and `mbarrier.try_wait.parity`, on `.shared::cta`. */
function lowerMbarrier(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const form = parts.slice(1).join('.');
  const failAt = (message: string) => fail(`${message}: ${line}`);
  switch (form) {
    case 'init.shared::cta.b64': {
      const bar = mbarrierAddress(ctx, ops[0]!);
      const count = src(ctx, 1, 'u32');
      return call((u, _f, t) => t.mbarriers.init(bar(u, t), u[count]!, failAt));
    }
    case 'arrive.shared::cta.b64':
    case 'arrive.expect_tx.shared::cta.b64': {
      const state = ops[0] === '_' ? -1 : dst(ctx, 0, 'b64');
      const bar = mbarrierAddress(ctx, ops[1]!);
      const tx = parts[2] === 'expect_tx' ? src(ctx, 2, 'u32') : -1;
      return call((u, _f, t) => {
        const phase = t.mbarriers.arrive(bar(u, t), tx < 0 ? 0 : u[tx]!, failAt);
        // The state is opaque to kernels; the phase it was taken in will do.
        if (state >= 0) set64(u, state, BigInt(phase));
      });
    }
    case 'try_wait.parity.shared::cta.b64': {
      const p = dst(ctx, 0, 'pred');
      const bar = mbarrierAddress(ctx, ops[1]!);
      const parity = src(ctx, 2, 'u32');
      const next = ctx.pc + 1;
      return stop((u, _f, t) => {
        const done = t.mbarriers.phaseCompleted(bar(u, t), u[parity]! & 1, failAt);
        u[p] = done ? 1 : 0;
        return done ? next : SPIN;
      });
    }
    default:
      return unsupported(ctx);
  }
}

/**
 * `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [bar]`:
 * lands at once and completes its bytes on the mbarrier (a consumer still
 * waits for the phase, which is when hardware would have landed it).
 */
function lowerBulkCopy(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  if (parts.join('.') !== 'cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes')
    unsupported(ctx);
  const to = parseAddress(ctx, ops[0]!, 'shared');
  const from = parseAddress(ctx, ops[1]!, 'global');
  const size = src(ctx, 2, 'u32');
  const bar = mbarrierAddress(ctx, ops[3]!);
  const w = new Window();
  const state = ctx.state;
  const failAt = (message: string) => fail(`${message}: ${line}`);
  return call((u, _f, t) => {
    const bytes = u[size]!;
    const at = u[to.base]! + to.offset;
    const low = u[from.base]! + from.offset;
    const address = u[from.base + 1]! * TWO32 + low;
    if (bytes % 16 !== 0) failAt(`bulk copy of ${bytes} bytes (a multiple of 16 is needed)`);
    if ((at & 15) !== 0) misaligned(line, at, 16);
    if ((low & 15) !== 0) misaligned(line, address, 16);
    if (at + bytes > t.sharedBytes) outsideShared(line, at, bytes, t.sharedBytes);
    if (bytes > 0) {
      if (w.generation !== state.generation || address < w.start || address + bytes > w.end) {
        state.locate(w, address, bytes, line);
      }
      t.shared8.set(new Uint8Array(w.words.buffer, w.words.byteOffset + (address - w.start), bytes), at);
    }
    t.mbarriers.completeTx(bar(u, t), bytes, failAt);
  });
}

/** Where the interpreter's register files hold a tensor map's address: a handle, its parameter index added. */
const TENSOR_MAP_HANDLE = 0x7e6d_0000_0000n;

/**
 * `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {c…}], [bar]`:
 * copies the map's box at the coordinates into shared memory at once, rows
 * of the box's inner extent packed one after another and swizzled by their
 * address (swizzle.ts), elements outside the tensor as zeros, and completes
 * the whole box's bytes on the mbarrier.
 */
function lowerTensorCopy(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const rank = Number(/^([1-5])d$/.exec(parts[4] ?? '')?.[1] ?? Number.NaN);
  const form = `cp.async.bulk.tensor.${rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`;
  if (parts.join('.') !== form) unsupported(ctx);
  const to = parseAddress(ctx, ops[0]!, 'shared');
  const m = /^\[([^,\]]+),\s*\{([^}]*)\}\]$/.exec(ops[1]!) ?? fail(`tensor operand: ${line}`);
  const mapSlot = ctx.layout.source(m[1]!.trim(), 'b64', line);
  const coords = splitOperands(m[2]!).map((c) => ctx.layout.source(c, 's32', line));
  if (coords.length !== rank) fail(`${rank}d copy with ${coords.length} coordinates: ${line}`);
  const bar = mbarrierAddress(ctx, ops[2]!);
  const state = ctx.state;
  const w = new Window();
  const failAt = (message: string) => fail(`${message}: ${line}`);
  return call((u, _f, t) => {
    const handle = BigInt(u[mapSlot]!) + (BigInt(u[mapSlot + 1]!) << 32n) - TENSOR_MAP_HANDLE;
    const map =
      (handle >= 0n && handle < 256n ? state.tensorMaps[Number(handle)] : undefined) ??
      failAt('the tensor-map operand is not the address of a tensor-map parameter');
    if (map.dims.length !== rank) failAt(`a rank-${map.dims.length} map in a ${rank}d copy`);
    const elem = map.dtype === 'f32' ? 4 : 2;
    const rowBytes = map.box[0]! * elem;
    const span = { none: 0, '32B': 32, '64B': 64, '128B': 128 }[map.swizzle];
    if (span > 0 && rowBytes !== span)
      failAt(`the interpreter models swizzled boxes of rows of exactly ${span} bytes`);
    const at = u[to.base]! + to.offset;
    if ((at & (span === 128 ? 1023 : 127)) !== 0) misaligned(line, at, span === 128 ? 1024 : 128);
    const c = coords.map((slot) => u[slot]! | 0);
    const rows = map.box.slice(1).reduce((x, y) => x * y, 1);
    const total = rows * rowBytes;
    if (at + total > t.sharedBytes) outsideShared(line, at, total, t.sharedBytes);
    const row = new Uint8Array(rowBytes);
    for (let r = 0; r < rows; r++) {
      // The row's outer coordinates, and whether all of them are inside.
      let rest = r;
      let offset = map.address;
      let inside = true;
      for (let d = 1; d < rank; d++) {
        const g = c[d]! + (rest % map.box[d]!);
        rest = Math.floor(rest / map.box[d]!);
        if (g < 0 || g >= map.dims[d]!) inside = false;
        offset += BigInt(g) * BigInt(map.strides[d - 1]!);
      }
      row.fill(0);
      const first = Math.max(0, -c[0]!);
      const last = Math.min(map.box[0]!, map.dims[0]! - c[0]!);
      if (inside && last > first) {
        const address = Number(offset) + (c[0]! + first) * elem;
        const bytes = (last - first) * elem;
        if (w.generation !== state.generation || address < w.start || address + bytes > w.end) {
          state.locate(w, address, bytes, line);
        }
        row.set(
          new Uint8Array(w.words.buffer, w.words.byteOffset + (address - w.start), bytes),
          first * elem,
        );
      }
      for (let chunk = 0; chunk < rowBytes; chunk += 16) {
        const place =
          span > 0 ? swizzleOffset(map.swizzle, at + r * rowBytes + chunk) : at + r * rowBytes + chunk;
        t.shared8.set(row.subarray(chunk, chunk + 16), place);
      }
    }
    t.mbarriers.completeTx(bar(u, t), total, failAt);
  });
}

/**
 * `wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, a, b-desc, scale-d, ±1, ±1{, trans-a}, trans-b`
 * (operands K-major, or MN-major where transposed), and its fence, commit
 * and wait, which have nothing to order here.
 */
function lowerWgmma(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const pattern = parts.join('.');
  if (['wgmma.fence.sync.aligned', 'wgmma.commit_group.sync.aligned'].includes(pattern)) return inline('');
  if (pattern === 'wgmma.wait_group.sync.aligned') {
    if (!/^\d+$/.test(ops[0] ?? '')) fail(`wait_group takes an immediate: ${line}`);
    return inline('');
  }
  const type = parts[6];
  const tf32 = type === 'tf32';
  const n = Number(new RegExp(`^m64n(\\d+)k${tf32 ? 8 : 16}$`).exec(parts[4] ?? '')?.[1] ?? Number.NaN);
  const form = `wgmma.mma_async.sync.aligned.m64n${n}k${tf32 ? 8 : 16}.f32.${type}.${type}`;
  if (
    !(n >= 8 && n <= 256 && n % 8 === 0) ||
    (type !== 'bf16' && type !== 'f16' && type !== 'tf32') ||
    pattern !== form
  ) {
    unsupported(ctx);
  }
  const fromRegisters = ops[1]!.startsWith('{');
  if (tf32 && fromRegisters) fail(`the interpreter models tf32 wgmma with A in shared memory only: ${line}`);
  const [scaleOp, scaleA, scaleB, ...trans] = ops.slice(3);
  if (trans.length !== (tf32 ? 0 : fromRegisters ? 1 : 2) || trans.some((t) => t !== '0' && t !== '1')) {
    fail(`wgmma transpose immediates are 0 or 1: ${line}`);
  }
  const [transposeA, transposeB] = fromRegisters
    ? [false, trans[0] === '1']
    : [trans[0] === '1', trans[1] === '1'];
  const scale = (op: string | undefined) =>
    op === '1' ? 1 : op === '-1' ? -1 : fail(`imm-scale must be 1 or -1: ${line}`);
  const [negateA, negateB] = [scale(scaleA) < 0, scale(scaleB) < 0];
  const d = registerList(ctx, ops[0]!, n / 2, 'f32', true);
  const a = fromRegisters ? registerList(ctx, ops[1]!, 4, 'b32', false) : [src(ctx, 1, 'b64')];
  const b = src(ctx, 2, 'b64');
  const accumulate = /^[01]$/.test(scaleOp ?? '') ? Number(scaleOp) : -1;
  const accumulateSlot = accumulate < 0 ? src(ctx, 3, 'pred') : -1;
  return wholeWarp(line, (lanes) => {
    const first = lanes[0]!;
    // Descriptors and scale-d are the warpgroup's: every lane must give the same.
    const uniform = (slot: number) => {
      if (lanes.some((t) => t.u[slot] !== first.u[slot])) fail(`lanes disagree on an operand of ${line}`);
      return first.u[slot]!;
    };
    const descriptor = (slot: number): WgmmaDescriptor => {
      const d = decodeWgmmaDescriptor(uniform(slot), uniform(slot + 1));
      if (d.baseOffset !== 0) fail(`the interpreter models descriptors of base offset 0 only: ${line}`);
      return d;
    };
    const gather = (slots: readonly number[]) =>
      Uint32Array.from(
        { length: 32 * slots.length },
        (_, i) => lanes[Math.floor(i / slots.length)]!.u[slots[i % slots.length]!]!,
      );
    const out = wgmmaWarp({
      type: type as 'bf16' | 'f16' | 'tf32',
      n,
      warp: first.warp & 3,
      a: fromRegisters ? gather(a) : descriptor(a[0]!),
      b: descriptor(b),
      d: gather(d),
      accumulate: accumulate < 0 ? uniform(accumulateSlot) !== 0 : accumulate === 1,
      negateA,
      negateB,
      transposeA,
      transposeB,
      half: (address) => {
        if (address + 2 > first.sharedBytes) outsideShared(line, address, 2, first.sharedBytes);
        return first.shared16[address >>> 1]!;
      },
      word: (address) => {
        if (address + 4 > first.sharedBytes) outsideShared(line, address, 4, first.sharedBytes);
        return (
          first.shared8[address]! |
          (first.shared8[address + 1]! << 8) |
          (first.shared8[address + 2]! << 16) |
          (first.shared8[address + 3]! << 24)
        );
      },
    });
    lanes.forEach((t, lane) => {
      d.forEach((slot, i) => {
        t.u[slot] = out[lane * d.length + i]!;
      });
    });
  });
}

// -------------------------------------------------------------- interpreter

export class PtxInterpreter {
  readonly #modules = new Map<string, Module>();
  readonly #compiled = new Map<string, Map<string, Compiled>>();
  readonly #state: LaunchState;
  /** Instructions executed, summed over threads. */
  executed = 0;

  constructor(private readonly fake: FakeLibCuda) {
    this.#state = new LaunchState(fake);
  }

  /** Makes the fake run every launch without a JS stand-in through this interpreter. */
  attach(): this {
    this.fake.executor = (image, launch) => this.run(image, launch);
    return this;
  }

  run(image: string, launch: FakeLaunch): void {
    let module = this.#modules.get(image);
    if (!module) {
      module = parseModule(image);
      this.#modules.set(image, module);
      this.#compiled.set(image, new Map());
    }
    const entry = module.entries.get(launch.entry) ?? fail(`no entry ${launch.entry}`);
    const byEntry = this.#compiled.get(image)!;
    let compiled = byEntry.get(launch.entry);
    if (!compiled) {
      compiled = compileEntry(entry, module, this.#state);
      byEntry.set(launch.entry, compiled);
    }
    if (launch.sharedBytes > 0 && module.dynamicShared.length === 0) {
      fail(`${launch.entry}: launched with dynamic shared memory but the module declares none`);
    }
    const state = this.#state;
    state.begin();
    state.params = paramWords(entry, launch);
    state.tensorMaps = entry.params.map((p) => {
      if (p.type !== 'tensorMap') return undefined;
      const name = p.name.slice(`${entry.name}_param_`.length);
      const bytes = launch.args[name];
      const map = bytes instanceof Uint8Array ? decodeFakeTensorMap(bytes) : undefined;
      return map ?? fail(`${entry.name}: parameter ${name} holds no tensor map the fake encoded`);
    });

    const [gx, gy, gz] = launch.grid;
    const [bx, by, bz] = launch.block;
    const threadsPerBlock = bx * by * bz;
    const template = compiled.template.slice();
    template[SPECIAL_SLOT['%ntid.x']!] = bx;
    template[SPECIAL_SLOT['%ntid.y']!] = by;
    template[SPECIAL_SLOT['%ntid.z']!] = bz;
    template[SPECIAL_SLOT['%nctaid.x']!] = gx;
    template[SPECIAL_SLOT['%nctaid.y']!] = gy;
    template[SPECIAL_SLOT['%nctaid.z']!] = gz;
    template[SPECIAL_SLOT['%nwarpid']!] = Math.ceil(threadsPerBlock / 32);
    template[SPECIAL_SLOT['%nsmid']!] = 1;
    const layout = compiled.layout;
    const sharedBytes =
      launch.sharedBytes > 0 ? layout.dynamicOffset + launch.sharedBytes : layout.staticSharedBytes;
    const shared = new SharedMemory(sharedBytes);
    const threads: Thread[] = [];
    for (let i = 0; i < threadsPerBlock; i++) {
      threads.push(new Thread(new Uint32Array(template.length), i, shared));
    }
    const block = new Block(threads, compiled, launch.entry, this);
    for (let cz = 0; cz < gz; cz++) {
      for (let cy = 0; cy < gy; cy++) {
        for (let cx = 0; cx < gx; cx++) {
          template[SPECIAL_SLOT['%ctaid.x']!] = cx;
          template[SPECIAL_SLOT['%ctaid.y']!] = cy;
          template[SPECIAL_SLOT['%ctaid.z']!] = cz;
          // Shared memory starts zeroed in every block (hardware leaves it undefined).
          shared.words.fill(0);
          shared.mbarriers.reset();
          for (const t of threads) {
            const u = t.u;
            u.set(template);
            const i = t.linear;
            const lane = i & 31;
            u[SPECIAL_SLOT['%tid.x']!] = i % bx;
            u[SPECIAL_SLOT['%tid.y']!] = Math.floor(i / bx) % by;
            u[SPECIAL_SLOT['%tid.z']!] = Math.floor(i / (bx * by));
            u[SPECIAL_SLOT['%laneid']!] = lane;
            u[SPECIAL_SLOT['%warpid']!] = i >>> 5;
            u[SPECIAL_SLOT['%lanemask_eq']!] = 1 << lane;
            u[SPECIAL_SLOT['%lanemask_lt']!] = (1 << lane) - 1;
            u[SPECIAL_SLOT['%lanemask_le']!] = lane === 31 ? 0xffffffff : (1 << (lane + 1)) - 1;
            u[SPECIAL_SLOT['%lanemask_ge']!] = ~((1 << lane) - 1);
            u[SPECIAL_SLOT['%lanemask_gt']!] = lane === 31 ? 0 : ~((1 << (lane + 1)) - 1);
            t.pc = 0;
            t.status = RUNNING;
            t.site = undefined;
            t.copies.reset();
          }
          block.run();
        }
      }
    }
  }

  /** Runs `t` from its pc until it stops; returns its new status. */
  execute(compiled: Compiled, t: Thread): number {
    const { blocks, lengths } = compiled;
    const u = t.u;
    const f = t.f;
    let pc = t.pc;
    let n = 0;
    for (;;) {
      const next = blocks[pc]!(u, f, t);
      n += lengths[pc]!;
      if (next >= 0) {
        pc = next;
        if (n >= RUNAWAY_STEPS) fail(`a thread ran ${n} instructions without stopping (stuck in a loop?)`);
        continue;
      }
      this.executed += n;
      return next === BARRIER ? AT_BARRIER : next === WARP ? AT_WARP : next === SPIN ? AT_SPIN : EXITED;
    }
  }
}

/** Each parameter's value as two little-endian words. */
function paramWords(entry: Entry, launch: FakeLaunch): Uint32Array {
  const words = new Uint32Array(entry.params.length * 2);
  const prefix = `${entry.name}_param_`;
  entry.params.forEach((p, i) => {
    const name = p.name.startsWith(prefix) ? p.name.slice(prefix.length) : p.name;
    const v = launch.args[name];
    if (v === undefined) fail(`no value for parameter ${name}`);
    if (v instanceof Uint8Array) return;
    if (typeof v === 'bigint') {
      const w = BigInt.asUintN(64, v);
      words[2 * i] = Number(w & 0xffffffffn);
      words[2 * i + 1] = Number(w >> 32n);
    } else if (p.type === 'f32') words[2 * i] = f32ToBits(v);
    else words[2 * i] = v;
  });
  return words;
}

/** One block's threads, scheduled warp by warp between barriers. */
class Block {
  readonly #lanes: (Thread | undefined)[] = new Array(32).fill(undefined);
  /** The mbarrier epoch when spinning threads last polled; -1 before they have. */
  #spinEpoch = -1;

  constructor(
    readonly threads: readonly Thread[],
    readonly compiled: Compiled,
    readonly entry: string,
    readonly interpreter: PtxInterpreter,
  ) {}

  /** The block's mbarriers, shared by all its threads. */
  get mbarriers(): Mbarriers {
    return this.threads[0]!.mbarriers;
  }

  run(): void {
    const threads = this.threads;
    this.#spinEpoch = -1;
    for (;;) {
      for (let w = 0; w < threads.length; w += 32) this.#runWarp(w, Math.min(w + 32, threads.length));
      if (!this.#releaseBarriers()) return;
    }
  }

  /**
   * Runs the lanes of the warp [w0, w1) until each has exited or reached a
   * barrier, meeting at every warp-synchronous instruction on the way.
   */
  #runWarp(w0: number, w1: number): void {
    const threads = this.threads;
    const lanes = this.#lanes;
    for (;;) {
      // Run every lane to its next stop; the first lane at a warp instruction names the meeting.
      let site: WarpSite | undefined;
      let mask = 0;
      let uniform = true;
      let arrived = 0;
      let live = 0;
      for (let i = w0; i < w1; i++) {
        const t = threads[i]!;
        if (t.status === RUNNING) t.status = this.interpreter.execute(this.compiled, t);
        lanes[i - w0] = undefined;
        if (t.status === EXITED) continue;
        const bit = 1 << (i - w0);
        live |= bit;
        if (t.status !== AT_WARP) continue;
        if (site === undefined) {
          site = t.site;
          mask = t.mask;
        }
        if (t.site === site) {
          arrived |= bit;
          lanes[i - w0] = t;
          if (t.mask !== mask) uniform = false;
        }
      }
      if (site === undefined) return;
      for (let i = w1 - w0; i < 32; i++) lanes[i] = undefined;
      // Usually every lane posts the same membermask, which then must cover exactly the live lanes that arrived.
      if (!uniform || (arrived & ~mask) !== 0 || (mask & live & ~arrived) !== 0)
        this.#checkMeeting(site, w0, live, arrived);
      site.complete(lanes);
      for (let lane = 0; lane < 32; lane++) {
        const t = lanes[lane];
        if (!t) continue;
        t.status = RUNNING;
        t.site = undefined;
      }
    }
  }

  /** Fails unless every lane at `site` is in its own membermask and every live lane of it arrived too. */
  #checkMeeting(site: WarpSite, w0: number, live: number, arrived: number): void {
    for (let lane = 0; lane < 32; lane++) {
      const t = this.#lanes[lane];
      if (!t) continue;
      if (((t.mask >>> lane) & 1) === 0) {
        fail(`${this.entry}: lane ${lane} is not in its own membermask: ${site.line}`);
      }
      const missing = t.mask & live & ~arrived;
      if (missing !== 0) {
        const other = this.threads[w0 + 31 - Math.clz32(missing & -missing)]!;
        const where = other.status === AT_WARP ? `at ${other.site!.line}` : 'at a barrier';
        fail(
          `${this.entry}: warp ${t.warp} deadlocks: lane ${lane} waits at ${site.line} for lane ${other.lane}, which waits ${where}`,
        );
      }
    }
  }

  /** Releases the threads of every complete barrier; false when all threads exited. */
  #releaseBarriers(): boolean {
    const threads = this.threads;
    let waiting = 0;
    let exited = 0;
    let spinning = 0;
    let wholeBlock = true;
    for (const t of threads) {
      if (t.status === EXITED) exited++;
      else if (t.status === AT_SPIN) spinning++;
      else if (t.status === AT_BARRIER) {
        waiting++;
        if (t.barrier !== 0 || t.barrierCount !== 0) wholeBlock = false;
      }
    }
    if (waiting === 0 && spinning === 0) return false;
    const released = waiting > 0 && this.#releaseBarrierGroups(wholeBlock, waiting);
    if (spinning > 0) return this.#resumeSpinning(released);
    if (!released) {
      fail(
        exited > 0
          ? `${this.entry}: ${exited} threads exited while others wait at a barrier`
          : `${this.entry}: threads wait at barriers that can never complete`,
      );
    }
    return true;
  }

  /**
   * Lets the threads polling an mbarrier (`try_wait` that found its phase
   * incomplete) poll again, unless nothing changed since they last did: no
   * barrier released anyone and no mbarrier moved, so none ever will.
   */
  #resumeSpinning(released: boolean): boolean {
    const epoch = this.mbarriers.epoch;
    if (!released && epoch === this.#spinEpoch) {
      fail(`${this.entry}: threads wait for mbarrier phases that can never complete`);
    }
    this.#spinEpoch = epoch;
    for (const t of this.threads) if (t.status === AT_SPIN) t.status = RUNNING;
    return true;
  }

  /** Releases every barrier whose thread count has arrived; whether any was. */
  #releaseBarrierGroups(wholeBlock: boolean, waiting: number): boolean {
    const threads = this.threads;
    // The common case: the whole block at `bar.sync 0`.
    if (wholeBlock && waiting === threads.length) {
      for (const t of threads) t.status = RUNNING;
      return true;
    }
    const counts = new Map<number, number>();
    for (const t of threads) {
      if (t.status === AT_BARRIER) counts.set(t.barrier, (counts.get(t.barrier) ?? 0) + 1);
    }
    let released = false;
    for (const [id, arrived] of counts) {
      let expected = 0;
      for (const t of threads) if (t.status === AT_BARRIER && t.barrier === id) expected = t.barrierCount;
      if (expected === 0) expected = threads.length;
      // A barrier with a thread count releases whole groups of that many, in thread order.
      let release = Math.floor(arrived / expected) * expected;
      if (release === 0) continue;
      released = true;
      for (const t of threads) {
        if (release === 0) break;
        if (t.status === AT_BARRIER && t.barrier === id) {
          t.status = RUNNING;
          release--;
        }
      }
    }
    return released;
  }
}
