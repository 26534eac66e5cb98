import {
  bitsF32,
  bulkPipeline,
  directLoads,
  halfInputs,
  interpretedDevice,
  type KernelBody,
  packHalves,
  ROW,
  random,
  randomBf16,
  reference,
  sharedLoads,
  type TestDevice,
  testDevice,
  tf32Reference,
  tf32Tile,
  tileModule,
  wgmmaBf16Tile,
} from '@rayo/cuda-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { CudaDriver } from './driver/driver.js';
import { libCuda } from './driver/libcuda.js';
import { backendProvider } from './index.js';
import type { PtxModule } from './ptx/module.js';
import { wgmmaAccumulatorElement } from './ptx/wgmmaLayout.js';

// Runs on an NVIDIA host only: the tensor-core kernels of the interpreter's
// tests on the real device, against the reference and the interpreter.
const unavailable = await backendProvider.probe();
const onGpu = unavailable === undefined ? describe : describe.skip;

/** Expects each f32 of `out` within 2^-22 of the sum of |terms| of the reference. */
function expectClose(out: Uint32Array, ref: { d: number[]; scale: number[] }, tolerance = 2 ** -22): void {
  ref.d.forEach((want, i) => {
    expect(Math.abs(bitsF32(out[i]!) - want), `element ${i}`).toBeLessThanOrEqual(tolerance * ref.scale[i]!);
  });
}

onGpu(`tensor-core instructions on a real device${unavailable ? ` (skipped: ${unavailable})` : ''}`, () => {
  let gpu: TestDevice;
  const interpreter = interpretedDevice();
  afterAll(() => {
    gpu?.dispose();
    interpreter.dispose();
  });
  const device = async () => {
    gpu ??= testDevice(new CudaDriver(await libCuda()), 'gpu');
    return gpu;
  };

  const tile = (
    d: TestDevice,
    body: KernelBody,
    inputs: { a: Uint32Array; b: Uint32Array; c: Uint32Array },
  ) => {
    const [a, b, c, out] = [inputs.a, inputs.b, inputs.c, 128].map((w) => d.buffer(w));
    d.launch(() => tileModule(body), 'tile', { block: 32 }, { a: a!.ptr, b: b!.ptr, c: c!.ptr, d: out!.ptr });
    return d.read(out!, 128);
  };

  for (const type of ['f16', 'bf16'] as const) {
    for (const [how, body] of [
      ['fragments from global memory', directLoads],
      ['cp.async, swizzled tile, ldmatrix', sharedLoads],
    ] as const) {
      it(`mma.sync m16n8k16 ${type}, ${how}`, async () => {
        const inputs = halfInputs(type, 11);
        const words = { ...inputs.words, c: new Uint32Array(inputs.words.c) };
        expectClose(
          tile(await device(), body(type), words),
          reference(16, 8, 16, inputs.A, inputs.B, inputs.C),
        );
      });
    }
  }

  it('mma.sync m16n8k8 tf32 with cvt.rna.tf32.f32 inputs', async () => {
    const next = random(3);
    const draw = (n: number) => Array.from({ length: n }, () => Math.fround(next() * 4 - 2));
    const [A, B, C] = [draw(128), draw(64), draw(128)];
    const w = (xs: number[]) => new Uint32Array(Float32Array.from(xs).buffer);
    const out = tile(await device(), tf32Tile(), { a: w(A), b: w(B), c: w(C) });
    expectClose(out, reference(16, 8, 8, A.map(tf32Reference), B.map(tf32Reference), C));
  });

  it('rounds to tf32 and packs halves bit for bit as the interpreter does', async () => {
    const next = random(5);
    const specials = [1 + 2 ** -11, -(1 + 3 * 2 ** -11), 65520, 65519, 1e-9, 6e-8, 3e-5, -0, 3.4e38, -3.4e38];
    const xs = Float32Array.from({ length: 1024 }, (_, i) =>
      i < specials.length ? specials[i]! : (next() - 0.5) * 2 ** (Math.floor(next() * 60) - 30),
    );
    const ys = Float32Array.from({ length: 1024 }, (_, i) => xs[(i * 7 + 3) % 1024]!);
    const body: KernelBody = (k, p) => {
      const i = k.globalThreadIndex();
      const x = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(p.a, i, 4));
      const y = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(p.b, i, 4));
      const out = [
        k.cvtTf32(k.reg('u32'), x),
        k.cvtPack('f16', k.reg('u32'), x, y),
        k.cvtPack('bf16', k.reg('u32'), x, y),
        k.cvtTf32(k.reg('u32'), y),
      ] as const;
      k.stGlobal('u32', k.elementAddress(p.d, i, 16), out);
    };
    const run = (d: TestDevice) => {
      const [a, b, c, out] = [new Uint32Array(xs.buffer), new Uint32Array(ys.buffer), 4, 4096].map((w) =>
        d.buffer(w),
      );
      d.launch(
        () => tileModule(body),
        'tile',
        { grid: 8, block: 128 },
        { a: a!.ptr, b: b!.ptr, c: c!.ptr, d: out!.ptr },
      );
      return Array.from(d.read(out!, 4096));
    };
    expect(run(await device())).toEqual(run(interpreter));
  });

  for (const leader of ['first', 'last'] as const) {
    it(`streams rows through mbarriers and bulk copies (the ${leader} thread producing)`, async () => {
      const rows = 7;
      const values = Float32Array.from({ length: (rows * ROW) / 4 }, (_, i) => ((i * 37) % 101) - 50);
      const run = (d: TestDevice) => {
        const src = d.buffer(new Uint32Array(values.buffer));
        const out = d.buffer(ROW / 4);
        const module = (): PtxModule => bulkPipeline('sm_90', leader);
        d.launch(module, 'pipeline', { block: ROW / 4 }, { src: src.ptr, out: out.ptr, n: rows });
        return Array.from(d.read(out, ROW / 4));
      };
      expect(run(await device())).toEqual(run(interpreter));
    });
  }

  it('wgmma m64n64k16 bf16 over 128B-swizzled shared tiles, placed by wgmmaAccumulatorElement', async () => {
    const n = 64;
    const next = random(17);
    const aBits = Array.from({ length: 64 * 64 }, () => randomBf16(next));
    const bBits = Array.from({ length: n * 64 }, () => randomBf16(next));
    const d = await device();
    const [a, b, out] = [packHalves(aBits), packHalves(bBits), 64 * n].map((w) => d.buffer(w));
    d.launch(() => wgmmaBf16Tile(n), 'wgmma_tile', { block: 128 }, { a: a!.ptr, b: b!.ptr, d: out!.ptr });
    const raw = d.read(out!, 64 * n);
    const value = (h: number) => bitsF32(h << 16);
    const placed: number[] = new Array(64 * n);
    for (let t = 0; t < 128; t++) {
      for (let i = 0; i < n / 2; i++) {
        const { row, col } = wgmmaAccumulatorElement(n, t, i);
        placed[row * n + col] = raw[t * (n / 2) + i]!;
      }
    }
    // D = A · Bᵀ: B's rows are the columns of the product.
    const bT = Array.from({ length: 64 * n }, (_, i) => value(bBits[(i % n) * 64 + Math.floor(i / n)]!));
    const ref = reference(64, n, 64, aBits.map(value), bT, new Array(64 * n).fill(0));
    expectClose(Uint32Array.from(placed), ref, 2 ** -20);
  });
});
