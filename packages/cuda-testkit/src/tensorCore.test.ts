import { addr, type DeviceBuffer, ptxasTestGate } from '@rayo/cuda-ptx';
import { describe, expect, it } from 'vitest';
import { expectAssemblesCleanly } from './expectAssembles.js';
import { useInterpretedDevice } from './interpretedDevice.js';
import {
  bitsF32,
  directLoads,
  halfInputs,
  type KernelBody,
  random,
  reference,
  sharedLoads,
  tf32Reference,
  tf32Tile,
  tileModule,
} from './tensorCoreKernels.js';

const device = useInterpretedDevice();

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

function expectClose(out: Uint32Array, ref: { d: number[]; scale: number[] }): void {
  ref.d.forEach((want, i) => {
    const got = bitsF32(out[i]!);
    expect(Math.abs(got - want), `element ${i}: ${got} vs ${want}`).toBeLessThanOrEqual(
      2 ** -22 * ref.scale[i]!,
    );
  });
}

// ----------------------------------------------------- fragment addressing

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
