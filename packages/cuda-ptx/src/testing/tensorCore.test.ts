import { describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../driver/pool.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { MmaLaneCoordinates } from '../ptx/matrixInstructions.js';
import { type FragmentCoordinate, MMA_SHAPES, type MmaShape } from '../ptx/mmaFragments.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type R32, type R64 } from '../ptx/operands.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { expectAssemblesCleanly } from './expectAssembles.js';
import { useInterpretedDevice } from './interpretedDevice.js';

const device = useInterpretedDevice();

type Buffers = { a: R64; b: R64; c: R64; d: R64 };
type KernelBody = (k: KernelBuilder, p: Buffers) => void;

/** A one-entry sm_80 module `tile(a, b, c, d)`. */
function tileModule(body: KernelBody, target = 'sm_80'): PtxModule {
  const m = new PtxModule({ target });
  m.entry('tile', { a: 'ptr', b: 'ptr', c: 'ptr', d: 'ptr' }, (k, p) => {
    body(k, {
      a: k.globalPointer(p.a),
      b: k.globalPointer(p.b),
      c: k.globalPointer(p.c),
      d: k.globalPointer(p.d),
    });
  });
  return m;
}

/** Runs `body` as one warp over device copies of `inputs`; returns `outWords` words of d. */
function runWarp(
  body: KernelBody,
  inputs: { a: Uint32Array; b: Uint32Array; c: Uint32Array },
  outWords: number,
): Uint32Array {
  const [a, b, c, d] = [inputs.a, inputs.b, inputs.c, outWords].map((w) => device.buffer(w)) as [
    DeviceBuffer,
    DeviceBuffer,
    DeviceBuffer,
    DeviceBuffer,
  ];
  device.launch(() => tileModule(body), 'tile', { block: 32 }, { a: a.ptr, b: b.ptr, c: c.ptr, d: d.ptr });
  return device.read(d, outWords);
}

// ------------------------------------------------------------ numbers

const f32Bits = (v: number) => new Uint32Array(Float32Array.of(v).buffer)[0]!;
const bitsF32 = (w: number) => new Float32Array(Uint32Array.of(w).buffer)[0]!;

/** A deterministic stream of numbers in [0, 1). */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** f16 bits of a random normal number in ±[2^-4, 2^2), with a full mantissa. */
function randomF16(next: () => number): number {
  const sign = next() < 0.5 ? 0x8000 : 0;
  return sign | ((11 + Math.floor(next() * 6)) << 10) | Math.floor(next() * 1024);
}

function f16Value(bits: number): number {
  const exp = (bits >>> 10) & 31;
  const magnitude = (1 + (bits & 1023) / 1024) * 2 ** (exp - 15);
  return bits & 0x8000 ? -magnitude : magnitude;
}

/** bf16 bits of a random number in ±[2^-4, 2^2). */
function randomBf16(next: () => number): number {
  return f32Bits((next() < 0.5 ? -1 : 1) * 2 ** (-4 + next() * 6)) >>> 16;
}

/** x rounded to 11 significant bits, ties away from zero (what cvt.rna.tf32.f32 does). */
function tf32Reference(x: number): number {
  if (x === 0) return x;
  const e = Math.floor(Math.log2(Math.abs(x)));
  const quantum = 2 ** (e - 10);
  return Math.sign(x) * Math.floor(Math.abs(x) / quantum + 0.5) * quantum;
}

/** Halves packed two to a word, the first in the low half. */
function packHalves(halves: readonly number[]): Uint32Array {
  return Uint32Array.from(
    { length: halves.length / 2 },
    (_, i) => (halves[2 * i]! | (halves[2 * i + 1]! << 16)) >>> 0,
  );
}

/** D = A·B + C in doubles, and each entry's sum of |terms| (the scale of its rounding error). */
function reference(m: number, n: number, k: number, A: number[], B: number[], C: number[]) {
  const d: number[] = [];
  const scale: number[] = [];
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let sum = C[i * n + j]!;
      let magnitude = Math.abs(sum);
      for (let x = 0; x < k; x++) {
        sum += A[i * k + x]! * B[x * n + j]!;
        magnitude += Math.abs(A[i * k + x]! * B[x * n + j]!);
      }
      d.push(sum);
      scale.push(magnitude);
    }
  }
  return { d, scale };
}

function expectClose(out: Uint32Array, ref: { d: number[]; scale: number[] }): void {
  ref.d.forEach((want, i) => {
    const got = bitsF32(out[i]!);
    expect(Math.abs(got - want), `element ${i}: ${got} vs ${want}`).toBeLessThanOrEqual(
      2 ** -22 * ref.scale[i]!,
    );
  });
}

// ----------------------------------------------------- fragment addressing

/** `base + offset` for a 32-bit byte offset. */
function at(k: KernelBuilder, base: R64, offset: R32): R64 {
  return k.add('u64', k.reg('u64'), base, k.cvt('u64', 'u32', k.reg('u64'), offset));
}

/** Stores the lane's D fragment of a 16×8 tile into row-major f32 `d`, loading C the same way from `c`. */
function accumulatorIo(k: KernelBuilder, lane: MmaLaneCoordinates, shape: MmaShape, p: Buffers) {
  const places = MMA_SHAPES[shape].c.map((e) => k.mmaElementOffset(lane, e, 32, 4));
  const c = places.map((o) => k.ldGlobal('f32', k.reg('f32'), at(k, p.c, o)));
  return {
    c: [c[0]!, c[1]!, c[2]!, c[3]!] as const,
    store: (d: readonly F32[]) => {
      places.forEach((o, i) => {
        k.stGlobal('f32', at(k, p.d, o), d[i]!);
      });
    },
  };
}

/**
 * One warp: A (16×16 halves, row-major) loaded straight into fragment
 * registers by the layout table, B (16×8 halves, row-major) element by
 * element and packed, D = A·B + C.
 */
function directLoads(type: 'f16' | 'bf16'): KernelBody {
  return (k, p) => {
    const lane = k.mmaLaneCoordinates();
    const { a: aLayout, b: bLayout } = MMA_SHAPES.m16n8k16;
    // Elements 2i and 2i+1 of A are neighbours in a row: one 32-bit load per register.
    const a = [0, 1, 2, 3].map((i) =>
      k.ldGlobal('b32', k.reg('u32'), at(k, p.a, k.mmaElementOffset(lane, aLayout[2 * i]!, 32, 2))),
    );
    // Those of B are neighbours in a column: two 16-bit loads, packed.
    const b = [0, 1].map((i) => {
      const [lo, hi] = [2 * i, 2 * i + 1].map((e) =>
        k.ldGlobal('b16', k.reg('b16'), at(k, p.b, k.mmaElementOffset(lane, bLayout[e]!, 16, 2))),
      );
      return k.packHalves(k.reg('u32'), lo!, hi!);
    });
    const io = accumulatorIo(k, lane, 'm16n8k16', p);
    const d = k.regs('f32', 4);
    k.mmaSync('m16n8k16', type, d, [a[0]!, a[1]!, a[2]!, a[3]!], [b[0]!, b[1]!], io.c);
    io.store(d);
  };
}

/**
 * One warp: A (16×16) and B (16×8, row-major) copied into shared memory with
 * cp.async (A in 32-byte swizzled rows), then fragments by ldmatrix (B
 * transposed): the path a GEMM takes, checked against the mma layout.
 */
function sharedLoads(type: 'f16' | 'bf16'): KernelBody {
  return (k, p) => {
    const tileA = k.shared('tileA', 512, 128);
    const tileB = k.shared('tileB', 256, 128);
    const tid = k.tid();
    // Lane l copies chunk l of A (row l >> 1, half l & 1) to its swizzled place, lanes 0-15 row l of B.
    const chunkA = k.shl('b32', k.reg('u32'), tid, 4);
    const placeA = k.add('u32', k.reg('u32'), k.sharedAddress(tileA), k.swizzle('32B', k.reg('u32'), chunkA));
    k.cpAsync('cg', placeA, k.elementAddress(p.a, tid, 16), 16);
    const firstHalf = k.setp('lt', 'u32', k.reg('pred'), tid, 16);
    k.predicated(firstHalf, () => {
      const placeB = k.madLo('u32', k.reg('u32'), tid, 16, k.sharedAddress(tileB));
      k.cpAsync('ca', placeB, k.elementAddress(p.b, tid, 16), 16);
    });
    k.cpAsyncCommitGroup();
    k.cpAsyncWaitGroup(0);
    k.barSync();
    // ldmatrix.x4 rows: lanes 0-15 give rows 0-15 at k 0, lanes 16-31 the same rows at k 8.
    const row = k.and('b32', k.reg('u32'), tid, 15);
    const half = k.shr('u32', k.reg('u32'), tid, 4);
    const logical = k.madLo('u32', k.reg('u32'), row, 32, k.shl('b32', k.reg('u32'), half, 4));
    const rowA = k.add('u32', k.reg('u32'), k.sharedAddress(tileA), k.swizzle('32B', k.reg('u32'), logical));
    const a = k.ldmatrix(4, k.regs('u32', 4), rowA);
    // ldmatrix.x2.trans rows: lanes 0-15 give rows k = 0-15 of B (lanes 16-31 are ignored).
    const rowB = k.madLo('u32', k.reg('u32'), row, 16, k.sharedAddress(tileB));
    const b = k.ldmatrix(2, k.regs('u32', 2), rowB, { trans: true });
    const io = accumulatorIo(k, k.mmaLaneCoordinates(), 'm16n8k16', p);
    const d = k.regs('f32', 4);
    k.mmaSync('m16n8k16', type, d, a, b, io.c);
    io.store(d);
  };
}

/** One warp: f32 A (16×8) and B (8×8) rounded to tf32 in registers, D = A·B + C with m16n8k8. */
function tf32Tile(): KernelBody {
  return (k, p) => {
    const lane = k.mmaLaneCoordinates();
    const { a: aLayout, b: bLayout } = MMA_SHAPES.m16n8k8;
    const load = (base: R64, e: FragmentCoordinate, ld: number) =>
      k.cvtTf32(
        k.reg('u32'),
        k.ldGlobal('f32', k.reg('f32'), at(k, base, k.mmaElementOffset(lane, e, ld * 4, 4))),
      );
    const a = aLayout.map((e) => load(p.a, e, 8));
    const b = bLayout.map((e) => load(p.b, e, 8));
    const io = accumulatorIo(k, lane, 'm16n8k8', p);
    const d = k.regs('f32', 4);
    k.mmaSync('m16n8k8', 'tf32', d, [a[0]!, a[1]!, a[2]!, a[3]!], [b[0]!, b[1]!], io.c);
    io.store(d);
  };
}

/** Random 16×16 A, 16×8 B (halves of `type`) and 16×8 f32 C, as device words and as numbers. */
function halfInputs(type: 'f16' | 'bf16', seed: number) {
  const next = random(seed);
  const draw = type === 'f16' ? randomF16 : randomBf16;
  const value = type === 'f16' ? f16Value : (h: number) => bitsF32(h << 16);
  const aBits = Array.from({ length: 256 }, () => draw(next));
  const bBits = Array.from({ length: 128 }, () => draw(next));
  const C = Array.from({ length: 128 }, () => Math.fround(next() * 8 - 4));
  return {
    words: { a: packHalves(aBits), b: packHalves(bBits), c: Float32Array.from(C).buffer },
    A: aBits.map(value),
    B: bBits.map(value),
    C,
  };
}

describe('tensor cores in the PTX interpreter', () => {
  for (const type of ['f16', 'bf16'] as const) {
    for (const [how, body] of [
      ['fragments loaded from global memory', directLoads],
      ['cp.async, a swizzled tile and ldmatrix', sharedLoads],
    ] as const) {
      it(`m16n8k16 ${type}: one warp's 16×8×16 tile product, ${how}`, () => {
        for (const seed of [1, 2, 3]) {
          const inputs = halfInputs(type, seed * 7 + type.length);
          const out = runWarp(body(type), { ...inputs.words, c: new Uint32Array(inputs.words.c) }, 128);
          expectClose(out, reference(16, 8, 16, inputs.A, inputs.B, inputs.C));
        }
      });
    }
  }

  it('m16n8k8 tf32: f32 inputs rounded to tf32 (ties away), then one warp tile product', () => {
    const next = random(99);
    const A = Array.from({ length: 128 }, () => Math.fround(next() * 4 - 2));
    const B = Array.from({ length: 64 }, () => Math.fround(next() * 4 - 2));
    const C = Array.from({ length: 128 }, () => Math.fround(next() * 4 - 2));
    const words = (xs: number[]) => new Uint32Array(Float32Array.from(xs).buffer);
    const out = runWarp(tf32Tile(), { a: words(A), b: words(B), c: words(C) }, 128);
    const rounded = reference(16, 8, 8, A.map(tf32Reference), B.map(tf32Reference), C);
    expectClose(out, rounded);
    // The rounding matters: unrounded inputs give a visibly different product.
    const exact = reference(16, 8, 8, A, B, C).d;
    expect(exact.some((v, i) => Math.abs(v - bitsF32(out[i]!)) > 1e-5)).toBe(true);
  });

  it('a kernel that reads its cp.async tile before waiting sees stale shared memory', () => {
    const copyThenRead =
      (wait: boolean): KernelBody =>
      (k, p) => {
        const tile = k.shared('staging', 512, 16);
        const tid = k.tid();
        const place = k.madLo('u32', k.reg('u32'), tid, 16, k.sharedAddress(tile));
        k.cpAsync('cg', place, k.elementAddress(p.a, tid, 16), 16);
        k.cpAsyncCommitGroup();
        // A second group stays in flight across wait_group 1.
        k.cpAsync('ca', addr(place, 4), k.elementAddress(p.b, tid, 16), 4);
        k.cpAsyncCommitGroup();
        if (wait) k.cpAsyncWaitGroup(1);
        k.barSync();
        const v = k.ldShared('u32', k.regs('u32', 2), place);
        k.stGlobal('u32', k.elementAddress(p.d, tid, 8), v);
      };
    const a = Uint32Array.from({ length: 128 }, (_, i) => i + 1);
    const b = Uint32Array.from({ length: 128 }, (_, i) => 1000 + i);
    const waited = runWarp(copyThenRead(true), { a, b, c: new Uint32Array(4) }, 64);
    for (let t = 0; t < 32; t++) expect([waited[2 * t], waited[2 * t + 1]]).toEqual([4 * t + 1, 4 * t + 2]);
    expect(runWarp(copyThenRead(false), { a, b, c: new Uint32Array(4) }, 64).every((w) => w === 0)).toBe(
      true,
    );
  });

  it('cp.async with a source size copies that many bytes and zeroes the rest', () => {
    const out = runWarp(
      (k, p) => {
        const tile = k.shared('staging', 512, 16);
        const tid = k.tid();
        const place = k.madLo('u32', k.reg('u32'), tid, 16, k.sharedAddress(tile));
        const filler = k.mov('u32', k.reg('u32'), 0xdeadbeef);
        k.stShared('u32', place, [filler, filler, filler, filler]);
        // Thread t copies t & 15 bytes of its 16.
        const size = k.and('b32', k.reg('u32'), tid, 15);
        k.cpAsync('cg', place, k.elementAddress(p.a, tid, 16), 16, { srcBytes: size });
        k.cpAsyncWaitAll();
        k.stGlobal('u32', k.elementAddress(p.d, tid, 16), k.ldShared('u32', k.regs('u32', 4), place));
      },
      {
        a: Uint32Array.from({ length: 128 }, () => 0xffffffff),
        b: new Uint32Array(4),
        c: new Uint32Array(4),
      },
      128,
    );
    const bytes = new Uint8Array(out.buffer);
    for (let t = 0; t < 32; t++) {
      const want = Array.from({ length: 16 }, (_, i) => (i < (t & 15) ? 0xff : 0));
      expect(Array.from(bytes.subarray(16 * t, 16 * t + 16)), `thread ${t}`).toEqual(want);
    }
  });

  it('converts to tf32 and packed halves with the rounding PTX specifies', () => {
    const inputs = [
      1 + 2 ** -11,
      -(1 + 3 * 2 ** -11),
      1 + 2 ** -12,
      65520,
      1 / 3,
      -2.5,
      1e-9,
      Number.POSITIVE_INFINITY,
    ];
    const out = runWarp(
      (k, p) => {
        const tid = k.tid();
        const x = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(p.a, tid, 4));
        const y = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(p.b, tid, 4));
        const results = k.elementAddress(p.d, tid, 16);
        const f16 = k.cvtPack('f16', k.reg('u32'), x, y);
        const lo = k.reg('b16');
        const hi = k.reg('b16');
        k.unpackHalves(lo, hi, f16);
        const swapped = k.packHalves(k.reg('u32'), hi, lo);
        const out4 = [
          k.cvtTf32(k.reg('u32'), x),
          f16,
          k.cvtPack('bf16', k.reg('u32'), x, y),
          swapped,
        ] as const;
        k.stGlobal('u32', results, out4);
      },
      {
        a: new Uint32Array(Float32Array.from({ length: 32 }, (_, i) => inputs[i % 8]!).buffer),
        b: new Uint32Array(Float32Array.from({ length: 32 }, () => 0.1).buffer),
        c: new Uint32Array(4),
      },
      128,
    );
    const lane = (i: number) => Array.from(out.subarray(4 * i, 4 * i + 4));
    const f16OfTenth = 0x2e66; // 0.1 to nearest f16
    const bf16OfTenth = 0x3dcd;
    // 1 + 2^-11 is halfway between two tf32 values: ties go away from zero.
    expect(bitsF32(lane(0)[0]!)).toBe(1 + 2 ** -10);
    expect(bitsF32(lane(1)[0]!)).toBe(-(1 + 2 * 2 ** -10));
    expect(bitsF32(lane(2)[0]!)).toBe(1);
    expect(lane(0)[1]).toBe((0x3c00 | (f16OfTenth << 16)) >>> 0); // f16 ties to even: 1 + 2^-11 → 1
    expect(lane(3)[1]! & 0xffff).toBe(0x7c00); // 65520 overflows f16
    expect(lane(5)[2]).toBe((0xc020 | (bf16OfTenth << 16)) >>> 0);
    expect(lane(7)[0]).toBe(0x7f800000);
    for (let i = 0; i < 8; i++) {
      const [, packed, , swapped] = lane(i);
      expect(swapped).toBe(((packed! >>> 16) | (packed! << 16)) >>> 0);
    }
  });

  it('refuses an mma.sync that not every lane of the warp reaches', () => {
    expect(() =>
      runWarp(
        (k) => {
          const d = k.regs('f32', 4);
          const a = k.regs('u32', 4);
          const b = k.regs('u32', 2);
          const p = k.setp('lt', 'u32', k.reg('pred'), k.tid(), 16);
          const end = k.label('end');
          k.braIfNot(p, end);
          k.mmaSync('m16n8k16', 'f16', d, a, b, d);
          k.place(end);
        },
        { a: new Uint32Array(4), b: new Uint32Array(4), c: new Uint32Array(4) },
        4,
      ),
    ).toThrow(/deadlocks|needs all 32 lanes/);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`tensor-core test kernels assemble with ptxas (${gate.reason})`, () => {
  const kernels: readonly (readonly [string, KernelBody])[] = [
    ['direct f16', directLoads('f16')],
    ['shared bf16', sharedLoads('bf16')],
    ['tf32', tf32Tile()],
  ];
  for (const [name, body] of kernels) {
    for (const arch of ['sm_80', 'sm_90']) {
      it(`${name}: -arch=${arch}`, () => {
        expectAssemblesCleanly(tileModule(body, arch).emit(), arch, name);
      });
    }
  }
});
