import { FLOAT, rope, UnsupportedOnBackendError } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import { type AnyCudaKernel, cudaKernel } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param, R32, R64 } from '../ptx/operands.js';
import { BLOCK, checkElementCount, gridFor } from './common.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES, storageKey, storageOf, storesOf } from './storage.js';

// Rotary position embedding. The reference takes its angles in f64; here an
// angle is position · 2^(i·c) with the power accurate to about an ulp and the
// product kept exactly as two f32s, so the only error that grows with the
// position is the f32 frequency's rounding; sin and cos come from a
// Cody–Waite reduction by π/2 and Taylor polynomials (no `sin.approx`, whose
// absolute error is far above the conformance tolerance). With a frequency
// table (scaled RoPE) the frequency is the table's f32 instead of the power.

export type RopeLayout = 'half' | 'interleaved';

/** Angles must stay below this many radians: the reduction by π/2 counts quadrants in an f32 integer. */
export const MAX_ANGLE = 2 ** 22;

/** π/2 as three f32 parts, each product j·part exact enough for j < 2^22. */
const PIO2_1 = Math.fround(Math.PI / 2);
const PIO2_2 = Math.fround(Math.PI / 2 - PIO2_1);
const PIO2_3 = Math.fround(Math.PI / 2 - PIO2_1 - PIO2_2);

/** Taylor coefficients: 2^f = Σ (f·ln 2)^k / k! to k = 7 (error under 1e-8 for |f| <= 0.5). */
const EXP2_TERMS = Array.from({ length: 8 }, (_, k) => Math.LN2 ** k / factorial(k));
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

/** 2^n for an integer n in [-126, 127], from its exponent bits. */
function powerOfTwo(k: KernelBuilder, n: R32): F32 {
  const bits = k.add('s32', k.reg('u32'), n, 127);
  k.shl('b32', bits, bits, 23);
  return k.mov('b32', f32(k), bits);
}

/**
 * 2^(i·c) for a small integer i (as f32) and c = cHi + cLo: the exponent is
 * split into an integer n and a fraction f (|f| <= ½ plus the recovered
 * product error), 2^f by polynomial, 2^n from exponent bits in two halves.
 * Beyond n = ±252 the result is 0 or past f32's range anyway, so n is
 * clamped there and f dropped.
 */
function exp2Product(k: KernelBuilder, i: F32, cHi: F32, cLo: F32): F32 {
  const e = k.mul('f32', f32(k), i, cHi, { rnd: 'rn' });
  const err = k.fma('f32', f32(k), i, cHi, k.neg('f32', f32(k), e));
  k.fma('f32', err, i, cLo, err);
  const n = k.cvt('f32', 'f32', f32(k), e, { rnd: 'rni' });
  const frac = k.sub('f32', f32(k), e, n, { rnd: 'rn' });
  k.add('f32', frac, frac, err, { rnd: 'rn' });
  const clamped = k.max('f32', f32(k), n, -252);
  k.min('f32', clamped, clamped, 252);
  const outside = k.setp('ne', 'f32', k.reg('pred'), clamped, n);
  k.selp('f32', frac, 0, frac, outside);
  const value = polynomial(k, frac, EXP2_TERMS);
  const whole = k.cvt('s32', 'f32', k.reg('u32'), clamped, { rnd: 'rzi' });
  const low = k.shr('s32', k.reg('u32'), whole, 1);
  const high = k.sub('s32', k.reg('u32'), whole, low);
  k.mul('f32', value, value, powerOfTwo(k, low), { rnd: 'rn' });
  k.mul('f32', value, value, powerOfTwo(k, high), { rnd: 'rn' });
  return value;
}

/**
 * sin and cos of hi + lo (hi >= 0, below MAX_ANGLE; lo the rounding error
 * of hi): j = rint(hi · 2/π), r = hi − j·π/2 (three fma steps with π/2 in
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
 * Where a kernel takes its pairs' frequencies: 2^(i·c) from the exponent
 * c = cHi + cLo (theta's), or element i of an f32 table in global memory
 * (rope's optional `frequencies` input).
 */
export type RopeFrequencies = { readonly cHi: F32; readonly cLo: F32 } | { readonly table: R64 };

/** sin and cos of a pair's angle, position · frequency(i) for a u32 position and pair i. */
export function ropeSinCos(
  k: KernelBuilder,
  position: R32,
  i: R32,
  frequencies: RopeFrequencies,
): { sin: F32; cos: F32 } {
  const at = k.cvt('f32', 'u32', f32(k), position, { rnd: 'rn' });
  const frequency =
    'table' in frequencies
      ? k.ldGlobal('f32', f32(k), k.elementAddress(frequencies.table, i, 4), { nc: true })
      : exp2Product(k, k.cvt('f32', 'u32', f32(k), i, { rnd: 'rn' }), frequencies.cHi, frequencies.cLo);
  const angle = k.mul('f32', f32(k), at, frequency, { rnd: 'rn' });
  const angleError = k.fma('f32', f32(k), at, frequency, k.neg('f32', f32(k), angle));
  return sinCos(k, angle, angleError);
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

/**
 * Refuses angles past MAX_ANGLE for rows up to `lastPosition`. A device
 * position is checked against nothing here: past the bound its angles are
 * inaccurate.
 */
export function checkRopeAngles(
  kernel: string,
  argument: string,
  lastPosition: number,
  theta: number,
  headDim: number,
  table = false,
): void {
  // The fastest-turning pair has frequency 1 for theta >= 1, theta^(−(headDim−2)/headDim) below;
  // a table's frequencies are at most 1 (the spec's range, checked by the reference).
  const topFrequency = table || theta >= 1 ? 1 : theta ** (-(headDim - 2) / headDim);
  const topAngle = Math.max(1, lastPosition) * topFrequency;
  if (!(topAngle < MAX_ANGLE)) {
    throw new UnsupportedOnBackendError('rope angles this large lose their f32 reduction', {
      operation: kernel,
      argument,
      expected: `last position · max frequency < 2^22 (${MAX_ANGLE})`,
      actual: `${lastPosition} · ${topFrequency}`,
    });
  }
}

export function ropeKey(
  layout: RopeLayout,
  headsPerThread: number,
  devicePosition = false,
  type: FloatStorage = 'f32',
  table = false,
): string {
  return `rope/${layout}/heads${headsPerThread}${devicePosition ? '/at' : ''}${table ? '/table' : ''}${storageKey([type])}`;
}

/**
 * y = x rotated pair by pair. A work item is (row s, pair i, a run of
 * `headsPerThread` heads): its angle is computed once and applied to each
 * head of the run, whose loads are issued together. Items are ordered with
 * i fastest, so a warp reads consecutive pairs of one head.
 */
export function ropeModule(
  layout: RopeLayout,
  headsPerThread: number,
  devicePosition = false,
  type: FloatStorage = 'f32',
  table = false,
): PtxModule {
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
      // The pairs' frequencies: a table's address, or theta's exponent.
      ...(table ? { frequencies: 'ptr' } : { cHi: 'f32', cLo: 'f32' }),
      sign: 'f32',
    },
    (k, p) => {
      const x = k.globalPointer(p.x);
      const y = k.globalPointer(p.y);
      const half = k.ldParam(p.half);
      const heads = k.ldParam(p.heads);
      const headRuns = k.ldParam(p.headRuns);
      const positionOffset = k.ldParam(p.positionOffset);
      if (devicePosition) {
        const at = k.globalPointer((p as unknown as Record<string, Param<'ptr'>>).positionAt!);
        k.add('u32', positionOffset, positionOffset, k.ldGlobal('u32', k.reg('u32'), at));
      }
      // The frequency parameters depend on `table`: one pointer, or theta's exponent in two f32s.
      const pointers = p as unknown as Record<string, Param<'ptr'>>;
      const floats = p as unknown as Record<string, Param<'f32'>>;
      const frequencies: RopeFrequencies = table
        ? { table: k.globalPointer(pointers.frequencies!) }
        : { cHi: k.ldParam(floats.cHi!), cLo: k.ldParam(floats.cLo!) };
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
 * Heads per work item: one while the items alone would not fill the device
 * eight times over (decoding: every pair its own thread), else four, so
 * that the angle is computed once per four pairs.
 */
export function headsPerThread(
  device: Pick<DeviceProperties, 'multiprocessors' | 'maxThreadsPerMultiprocessor'>,
  pairs: number,
  heads: number,
): number {
  const resident = device.multiprocessors * device.maxThreadsPerMultiprocessor;
  return heads >= 4 && pairs >= 8 * resident ? 4 : 1;
}

/**
 * log2 of the frequency base's step, c = −2·log2(theta)/headDim, as an f32
 * pair. Below −300 every frequency but the first is 0 in f32, so c is
 * bounded there (theta = Infinity included).
 */
export function frequencyExponent(theta: number, headDim: number): { cHi: number; cLo: number } {
  const c = Math.max(-300, (-2 * Math.log2(theta)) / headDim);
  const cHi = Math.fround(c);
  return { cHi, cLo: Math.fround(c - cHi) };
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
    checkRopeAngles(
      'rope',
      'attrs.positionOffset',
      attrs.positionOffset + seq - 1,
      attrs.theta,
      headDim,
      table,
    );
    const runs = headsPerThread(encoder.device, seq * heads * half, heads);
    const headRuns = Math.ceil(heads / runs);
    const items = seq * headRuns * half;
    const type = storageOf(x);
    encoder.launch({
      key: ropeKey(attrs.layout, runs, positionAt !== undefined, type, table),
      module: () => ropeModule(attrs.layout, runs, positionAt !== undefined, type, table),
      entry: 'rope',
      grid: gridFor(encoder.device, items),
      block: BLOCK,
      args: {
        x,
        y,
        ...(positionAt ? { positionAt } : {}),
        items,
        half,
        heads,
        headRuns,
        positionOffset: attrs.positionOffset,
        ...(frequencies ? { frequencies } : frequencyExponent(attrs.theta, headDim)),
        sign: attrs.inverse ? -1 : 1,
      },
    });
  },
  { dtypes: FLOAT },
);

export const ROPE_KERNELS: readonly AnyCudaKernel[] = [ropeKernel];
