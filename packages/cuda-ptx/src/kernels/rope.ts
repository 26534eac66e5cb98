import { FLOAT, inverseTwoPiFixed, rope, UnsupportedOnBackendError } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import { type AnyCudaKernel, cudaKernel, launchArgs } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { BLOCK, checkElementCount, gridFor } from './common.js';
import { loadParams } from './entryParams.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES, storageKey, storageOf, storesOf } from './storage.js';

// Rotary position embedding. The angle position · frequency reaches 2^31
// radians: as an f32, or as an f32 frequency times the position, it is off
// by whole turns. Here a pair's frequency is held in 1.63 fixed point (a u64),
// multiplied by 1/2π to 64 bits into turns per position (a 64-bit binary
// fraction), and its product with the position modulo 2^64 is the angle's
// fraction of a turn, exact to about position · 2^−62 turns; only that
// fraction becomes an f32 angle in [0, 2π]. theta's frequency
// theta^(−2i/headDim) is the product of the host's f64 powers
// theta^(−2·2^b/headDim) over the bits b of i; a table's f32 frequency
// converts exactly. sin and cos come from a Cody–Waite reduction by π/2 and
// Taylor polynomials (no `sin.approx`, whose absolute error is far above the
// conformance tolerance).

export type RopeLayout = 'half' | 'interleaved';

/** Bits of a pair index: theta's frequencies take one power per bit, so headDim / 2 is at most 2^16. */
export const PAIR_BITS = 16;

/** 1 in 1.63 fixed point. */
const ONE_63 = 1n << 63n;
/** floor(2^64 / 2π): radians to turns, as a 64-bit fraction. */
const TURNS_PER_RADIAN_64 = inverseTwoPiFixed(64);
/** 2π as two f32 parts. */
const TWO_PI_HI = Math.fround(2 * Math.PI);
const TWO_PI_LO = Math.fround(2 * Math.PI - TWO_PI_HI);

/** π/2 as three f32 parts, each product j·part exact enough for the quadrants j <= 4 of [0, 2π]. */
const PIO2_1 = Math.fround(Math.PI / 2);
const PIO2_2 = Math.fround(Math.PI / 2 - PIO2_1);
const PIO2_3 = Math.fround(Math.PI / 2 - PIO2_1 - PIO2_2);

/** sin r = r · Σ (−r²)^k / (2k+1)!, cos r = Σ (−r²)^k / (2k)!, to r^15 and r^16 (|r| <= 1.6). */
const SIN_TERMS = Array.from({ length: 8 }, (_, k) => (-1) ** k / factorial(2 * k + 1));
const COS_TERMS = Array.from({ length: 9 }, (_, k) => (-1) ** k / factorial(2 * k));

function factorial(n: number): number {
  let f = 1;
  for (let i = 2; i <= n; i++) f *= i;
  return f;
}

function f32(k: KernelBuilder): F32 {
  return k.reg('f32');
}

/** Σ terms[k] · x^k by Horner's rule with fma. */
function polynomial(k: KernelBuilder, x: F32, terms: readonly number[]): F32 {
  const acc = k.mov('f32', f32(k), terms[terms.length - 1]!);
  for (let i = terms.length - 2; i >= 0; i--) k.fma('f32', acc, acc, x, terms[i]!);
  return acc;
}

/** (a · b) >> 63 for a in 1.63 fixed point (a <= 2^63) and b below 2^64, into d. */
function mul63(k: KernelBuilder, a: R64, b: R64 | bigint, d: R64 = k.reg('u64')): R64 {
  const high = k.mulHi('u64', k.reg('u64'), a, b);
  const low = k.mulLo('u64', k.reg('u64'), a, b);
  k.shl('b64', high, high, 1);
  k.shr('u64', low, low, 63);
  return k.or('b64', d, high, low);
}

/**
 * sin and cos of hi + lo (hi in [0, 2π]; lo the rounding error of hi): j = rint(hi · 2/π), r = hi − j·π/2 (three fma steps with π/2 in
 * three parts) + lo, then the quadrant j mod 4 picks and signs the
 * polynomials of r.
 */
function sinCos(k: KernelBuilder, hi: F32, lo: F32): { sin: F32; cos: F32 } {
  const j = k.mul('f32', f32(k), hi, 2 / Math.PI, { rnd: 'rn' });
  k.cvt('f32', 'f32', j, j, { rnd: 'rni' });
  const minusJ = k.neg('f32', f32(k), j);
  const r = k.fma('f32', f32(k), minusJ, PIO2_1, hi);
  k.fma('f32', r, minusJ, PIO2_2, r);
  k.fma('f32', r, minusJ, PIO2_3, r);
  k.add('f32', r, r, lo, { rnd: 'rn' });
  const r2 = k.mul('f32', f32(k), r, r, { rnd: 'rn' });
  const s = k.mul('f32', f32(k), polynomial(k, r2, SIN_TERMS), r, { rnd: 'rn' });
  const c = polynomial(k, r2, COS_TERMS);
  const quadrant = k.cvt('u32', 'f32', k.reg('u32'), j, { rnd: 'rzi' });
  const odd = k.setp('ne', 'b32', k.reg('pred'), k.and('b32', k.reg('u32'), quadrant, 1), 0);
  // sin is negative in quadrants 2 and 3, cos in 1 and 2.
  const sinNegative = k.setp('ne', 'b32', k.reg('pred'), k.and('b32', k.reg('u32'), quadrant, 2), 0);
  const cosNegative = k.setp(
    'ne',
    'b32',
    k.reg('pred'),
    k.and('b32', k.reg('u32'), k.add('u32', k.reg('u32'), quadrant, 1), 2),
    0,
  );
  const sinAbs = k.selp('f32', f32(k), c, s, odd);
  const cosAbs = k.selp('f32', f32(k), s, c, odd);
  return {
    sin: k.selp('f32', f32(k), k.neg('f32', f32(k), sinAbs), sinAbs, sinNegative),
    cos: k.selp('f32', f32(k), k.neg('f32', f32(k), cosAbs), cosAbs, cosNegative),
  };
}

/**
 * Where a kernel takes its pairs' frequencies: theta's powers
 * theta^(−2·2^b/headDim) for b < PAIR_BITS in 1.63 fixed point, or element i
 * of an f32 table in global memory (rope's optional `frequencies` input).
 */
export type RopeFrequencies = { readonly powers: readonly R64[] } | { readonly table: R64 };

/** The entry parameters of a kernel's frequencies: a table's address, or theta's powers. */
export function ropeFrequencyParams(table: boolean): Record<string, ParamType> {
  return table
    ? { frequencies: 'ptr' }
    : Object.fromEntries(Array.from({ length: PAIR_BITS }, (_, b) => [`power${b}`, 'u64' as const]));
}

/** Loads the parameters of `ropeFrequencyParams`. */
export function loadRopeFrequencies(
  k: KernelBuilder,
  params: Record<string, Param<ParamType>>,
  table: boolean,
): RopeFrequencies {
  return table
    ? { table: k.globalPointer(params.frequencies as Param<'ptr'>) }
    : { powers: Array.from({ length: PAIR_BITS }, (_, b) => k.ldParam(params[`power${b}`] as Param<'u64'>)) };
}

/**
 * The arguments of `ropeFrequencyParams` for theta: theta^(−2·2^b/headDim)
 * in f64, as 1.63 fixed point (theta >= 1 keeps each at most 1).
 */
export function thetaPowers(
  kernel: string,
  theta: number,
  headDim: number,
): Readonly<Record<string, bigint>> {
  if (headDim / 2 > 2 ** PAIR_BITS) {
    throw new UnsupportedOnBackendError('rope takes at most 2^16 pairs per head on cuda', {
      operation: kernel,
      argument: 'x',
      expected: `headDim <= ${2 ** (PAIR_BITS + 1)}`,
      actual: String(headDim),
    });
  }
  const key = `${theta}:${headDim}`;
  let powers = THETA_POWERS.get(key);
  if (!powers) {
    powers = Object.fromEntries(
      Array.from({ length: PAIR_BITS }, (_, b) => {
        const power = theta ** ((-2 * 2 ** b) / headDim);
        return [`power${b}`, BigInt(Math.floor(power * 2 ** 63))];
      }),
    );
    THETA_POWERS.set(key, powers);
  }
  return powers;
}

/** thetaPowers by theta and headDim: a model asks for the same few on every call (16 BigInts each). */
const THETA_POWERS = new Map<string, Readonly<Record<string, bigint>>>();

/** Pair i's frequency in 1.63 fixed point. */
function frequencyFixed(k: KernelBuilder, i: R32, frequencies: RopeFrequencies): R64 {
  if ('table' in frequencies) {
    const f = k.ldGlobal('f32', f32(k), k.elementAddress(frequencies.table, i, 4), { nc: true });
    // f <= 1: f · 2^63 is exact, and an integer down to f = 2^−40.
    const scaled = k.mul('f32', f32(k), f, 2 ** 63, { rnd: 'rn' });
    return k.cvt('u64', 'f32', k.reg('u64'), scaled, { rnd: 'rzi' });
  }
  const product = k.mov('u64', k.reg('u64'), ONE_63);
  frequencies.powers.forEach((power, b) => {
    const bit = k.setp('ne', 'b32', k.reg('pred'), k.and('b32', k.reg('u32'), i, 1 << b), 0);
    k.predicated(bit, () => {
      mul63(k, product, power, product);
    });
  });
  return product;
}

/** sin and cos of a pair's angle, position · frequency(i) for a u32 position and pair i. */
export function ropeSinCos(
  k: KernelBuilder,
  position: R32,
  i: R32,
  frequencies: RopeFrequencies,
): { sin: F32; cos: F32 } {
  const turnsPerPosition = mul63(k, frequencyFixed(k, i, frequencies), TURNS_PER_RADIAN_64);
  const at = k.cvt('u64', 'u32', k.reg('u64'), position);
  const turns = k.mulLo('u64', k.reg('u64'), at, turnsPerPosition);
  // The fraction of a turn as an exact f32 of its top 24 bits and an f32 of the next 40.
  const asTurns = (mask: bigint) =>
    k.mul(
      'f32',
      f32(k),
      k.cvt('f32', 'u64', f32(k), k.and('b64', k.reg('u64'), turns, mask), { rnd: 'rn' }),
      2 ** -64,
      { rnd: 'rn' },
    );
  const top = asTurns(0xffffff0000000000n);
  const rest = asTurns(0xffffffffffn);
  const hi = k.mul('f32', f32(k), top, TWO_PI_HI, { rnd: 'rn' });
  const lo = k.fma('f32', f32(k), top, TWO_PI_HI, k.neg('f32', f32(k), hi));
  k.fma('f32', lo, top, TWO_PI_LO, lo);
  k.fma('f32', lo, rest, TWO_PI_HI, lo);
  return sinCos(k, hi, lo);
}

/** The pair (a, b) rotated by the angle: (a·cos − b·sin, a·sin + b·cos). */
export function rotatePair(k: KernelBuilder, a: F32, b: F32, cos: F32, sin: F32): [F32, F32] {
  const first = k.fma(
    'f32',
    f32(k),
    a,
    cos,
    k.neg('f32', f32(k), k.mul('f32', f32(k), b, sin, { rnd: 'rn' })),
  );
  const second = k.fma('f32', f32(k), a, sin, k.mul('f32', f32(k), b, cos, { rnd: 'rn' }));
  return [first, second];
}

/** Bits of a pair index below `half` (0 for one pair): the powers of theta a frequency can take. */
export function pairIndexBits(half: number): number {
  return Math.min(PAIR_BITS, 32 - Math.clz32(Math.max(half, 1) - 1));
}

/** One rope kernel: what `ropeKey` names and `ropeModule` builds. */
export interface RopeVariant {
  layout: RopeLayout;
  /** Heads of one work item, which share its angle. */
  headsPerThread: number;
  /** Whether a position offset read from device memory is added to the parameter's. */
  devicePosition?: boolean;
  type?: FloatStorage;
  /** Whether the frequencies come from a table rather than theta's powers. */
  table?: boolean;
  /** Bits a pair index can have: the powers of theta the kernel multiplies. */
  indexBits?: number;
}

/** The variant with what it leaves out filled in: the position a parameter, f32 rows, theta's powers. */
function withDefaults(v: RopeVariant): Required<RopeVariant> {
  return {
    layout: v.layout,
    headsPerThread: v.headsPerThread,
    devicePosition: v.devicePosition ?? false,
    type: v.type ?? 'f32',
    table: v.table ?? false,
    indexBits: v.indexBits ?? PAIR_BITS,
  };
}

export function ropeKey(v: RopeVariant): string {
  const { layout, headsPerThread, devicePosition, type, table, indexBits } = withDefaults(v);
  const bits = table || indexBits === PAIR_BITS ? '' : `/bits${indexBits}`;
  return `rope/${layout}/heads${headsPerThread}${devicePosition ? '/at' : ''}${table ? '/table' : ''}${bits}${storageKey([type])}`;
}

/**
 * y = x rotated pair by pair. A work item is (row s, pair i, a run of
 * `headsPerThread` heads): its angle is computed once and applied to each
 * head of the run, whose loads are issued together. Items are ordered with
 * i fastest, so a warp reads consecutive pairs of one head. Theta's
 * frequency multiplies only the powers of the `indexBits` bits a pair index
 * can have (5 for a head of 64): each is a predicated 64-bit product, the
 * kernel's main cost.
 */
export function ropeModule(v: RopeVariant): PtxModule {
  const { layout, headsPerThread, devicePosition, type, table, indexBits } = withDefaults(v);
  const bytes = STORAGE_BYTES[type];
  const m = new PtxModule();
  m.entry(
    'rope',
    {
      x: 'ptr',
      y: 'ptr',
      // The position offset read from device memory when the kernel runs, added to the parameter.
      ...(devicePosition ? { positionAt: 'ptr' } : {}),
      items: 'u32',
      half: 'u32',
      heads: 'u32',
      headRuns: 'u32',
      positionOffset: 'u32',
      // The pairs' frequencies: a table's address, or theta's powers.
      ...ropeFrequencyParams(table),
      sign: 'f32',
    },
    (k, p) => {
      const { x, y, half, heads } = loadParams(k, p, 'x', 'y', 'half', 'heads');
      const { headRuns, positionOffset } = loadParams(k, p, 'headRuns', 'positionOffset');
      if (devicePosition) {
        const at = k.globalPointer((p as unknown as Record<string, Param<'ptr'>>).positionAt!);
        k.add('u32', positionOffset, positionOffset, k.ldGlobal('u32', k.reg('u32'), at));
      }
      const loaded = loadRopeFrequencies(k, p as unknown as Record<string, Param<ParamType>>, table);
      const frequencies = 'powers' in loaded ? { powers: loaded.powers.slice(0, indexBits) } : loaded;
      const sign = k.ldParam(p.sign);
      const headDim = k.add('u32', k.reg('u32'), half, half);
      k.gridStrideLoop(k.ldParam(p.items), (item) => {
        const rest = k.div('u32', k.reg('u32'), item, half);
        const i = k.sub('u32', k.reg('u32'), item, k.mulLo('u32', k.reg('u32'), rest, half));
        const row = k.div('u32', k.reg('u32'), rest, headRuns);
        const run = k.sub('u32', k.reg('u32'), rest, k.mulLo('u32', k.reg('u32'), row, headRuns));

        const { sin, cos } = ropeSinCos(k, k.add('u32', k.reg('u32'), positionOffset, row), i, frequencies);
        k.mul('f32', sin, sin, sign, { rnd: 'rn' });

        // Element offsets of the pair in a head: (i, i + half) or (2i, 2i + 1).
        const first = layout === 'half' ? i : k.add('u32', k.reg('u32'), i, i);
        const second = k.add('u32', k.reg('u32'), first, layout === 'half' ? half : 1);
        const head0 = k.mulLo('u32', k.reg('u32'), run, headsPerThread);
        const rowHead = k.madLo('u32', k.reg('u32'), row, heads, head0);
        const pairs = Array.from({ length: headsPerThread }, (_, h) => {
          const base = k.mulLo('u32', k.reg('u32'), k.add('u32', k.reg('u32'), rowHead, h), headDim);
          const at = [
            k.add('u32', k.reg('u32'), base, first),
            k.add('u32', k.reg('u32'), base, second),
          ] as const;
          const ok =
            h === 0
              ? undefined
              : k.setp('lt', 'u32', k.reg('pred'), k.add('u32', k.reg('u32'), head0, h), heads);
          const values = [f32(k), f32(k)] as const;
          for (const e of [0, 1]) {
            loadAsF32(k, type, [values[e]!], k.elementAddress(x, at[e]!, bytes), ok ? { ok } : {});
          }
          return { at, ok, values };
        });
        for (const { at, ok, values } of pairs) {
          const [first, second] = rotatePair(k, values[0], values[1], cos, sin);
          const stores = [storesOf(k, type, [first]), storesOf(k, type, [second])];
          const store = () => {
            stores[0]!(k.elementAddress(y, at[0], bytes));
            stores[1]!(k.elementAddress(y, at[1], bytes));
          };
          if (ok) k.predicated(ok, store);
          else store();
        }
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/**
 * Heads per work item: one while the pairs alone would not fill the device
 * (decoding: every pair its own thread), else four, or eight once even runs
 * of eight fill it (a prompt's chunk), so that the angle, the kernel's main
 * cost, is computed once per run.
 */
export function headsPerThread(
  device: Pick<DeviceProperties, 'multiprocessors' | 'maxThreadsPerMultiprocessor'>,
  pairs: number,
  heads: number,
): number {
  const resident = device.multiprocessors * device.maxThreadsPerMultiprocessor;
  if (heads >= 8 && pairs >= 8 * resident) return 8;
  return heads >= 4 && pairs >= resident ? 4 : 1;
}

const ropeKernel = cudaKernel(
  rope,
  (encoder, { inputs, outputs, attrs }) => {
    const x = inputs[0]!;
    const positionAt = inputs[1];
    const frequencies = inputs[2];
    const table = frequencies !== undefined;
    const y = outputs[0]!;
    if (x.size === 0) return;
    checkElementCount('rope', 'x', x.size);
    const [seq, heads, headDim] = x.shape as [number, number, number];
    const half = headDim / 2;
    const runs = headsPerThread(encoder.device, seq * heads * half, heads);
    const headRuns = Math.ceil(heads / runs);
    const items = seq * headRuns * half;
    const type = storageOf(x);
    const variant: RopeVariant = {
      layout: attrs.layout,
      headsPerThread: runs,
      devicePosition: positionAt !== undefined,
      type,
      table,
      indexBits: pairIndexBits(half),
    };
    encoder.launch({
      key: ropeKey(variant),
      module: () => ropeModule(variant),
      entry: 'rope',
      grid: gridFor(encoder.device, items),
      block: BLOCK,
      args: launchArgs(
        {
          x,
          y,
          items,
          half,
          heads,
          headRuns,
          positionOffset: attrs.positionOffset,
          sign: attrs.inverse ? -1 : 1,
        },
        positionAt ? { positionAt } : {},
        frequencies ? { frequencies } : thetaPowers('rope', attrs.theta, headDim),
      ),
    });
  },
  { dtypes: FLOAT },
);

export const ROPE_KERNELS: readonly AnyCudaKernel[] = [ropeKernel];
