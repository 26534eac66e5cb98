import { inferKernel, linear, matmul, UnsupportedOnBackendError } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  halfValues,
  type MatmulAttrs,
  runWithReference,
  TRANSPOSES,
  uploadOperands,
} from '../../testing/matmulReference.js';
import { backendProvider, createWgpuBackend, type WgpuBackend } from '../index.js';
import { type HalfGemmDevice, type MatmulProblem, planHalfGemm } from './matmul.js';
import { HALF_TILE_LARGE, HALF_TILE_MID, halfGemmShader, pickSubgroupMatrixConfig } from './matmulHalf.js';

const F16_F32 = { componentType: 'f16', resultComponentType: 'f32', M: 16, N: 16, K: 16 };
/** What NVIDIA's Vulkan driver lists, roughly: f16 → f16 and f16 → f32 shapes, and integer ones. */
const NVIDIA_LIKE = [
  { componentType: 'f16', resultComponentType: 'f16', M: 16, N: 16, K: 16 },
  { componentType: 'f16', resultComponentType: 'f32', M: 16, N: 8, K: 16 },
  F16_F32,
  { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 },
];
const H100: HalfGemmDevice = {
  maxWorkgroupBytes: 49152,
  maxInvocations: 1024,
  shaderF16: true,
  subgroupMatrix: { configs: NVIDIA_LIKE, subgroupSize: 32, minSubgroupSize: 32 },
};
const p = (
  m: number,
  k: number,
  n: number,
  more: Partial<MatmulProblem> & { padA?: boolean } = {},
): MatmulProblem & { padA?: boolean } => ({
  batch: 1,
  m,
  n,
  k,
  transA: false,
  transB: false,
  ...more,
});

describe('f16 matrix product plans', () => {
  it('picks the f16 → f32 configuration with the largest fragments', () => {
    expect(pickSubgroupMatrixConfig(NVIDIA_LIKE)).toBe(F16_F32);
    const apple = { componentType: 'f16', resultComponentType: 'f32', M: 8, N: 8, K: 8 };
    expect(pickSubgroupMatrixConfig([apple])).toBe(apple);
    expect(pickSubgroupMatrixConfig([NVIDIA_LIKE[0]!, NVIDIA_LIKE[3]!])).toBeUndefined();
    // Fragments that do not divide the subgroup tiles are not used.
    expect(pickSubgroupMatrixConfig([{ ...F16_F32, M: 48 }])).toBeUndefined();
  });

  it('tiles 4096³ in 128×128 with 8-half loads, one K split; small M streams instead', () => {
    const plan = planHalfGemm(p(4096, 4096, 4096), 'subgroup-matrix', H100);
    expect(plan).toMatchObject({
      variant: { compute: 'subgroup-matrix', tile: HALF_TILE_LARGE, vecA: true, vecB: true },
      vecY: true,
      tilesM: 32,
      tilesN: 32,
      splits: 1,
    });
    expect(plan?.variant.shape).toEqual({ m: 16, n: 16, k: 16, lanes: 32 });
    expect(planHalfGemm(p(512, 512, 512), 'subgroup-matrix', H100)?.variant.tile).toBe(HALF_TILE_MID);
    expect(planHalfGemm(p(4, 4096, 4096), 'subgroup-matrix', H100)).toBeUndefined();
    expect(planHalfGemm(p(32, 4096, 4096, { transB: true }), 'subgroup-matrix', H100)).toBeUndefined();
    expect(planHalfGemm(p(4096, 4096, 4096), 'widen', H100)).toBeUndefined();
    // Few tiles split K; odd rows read halves one by one.
    const narrow = planHalfGemm(p(64, 8192, 64), 'subgroup-matrix', H100);
    expect(narrow!.splits).toBeGreaterThan(1);
    expect(narrow!.kPerSplit % HALF_TILE_MID.bk).toBe(0);
    const odd = planHalfGemm(p(100, 99, 100, { transA: true }), 'subgroup-matrix', H100);
    expect(odd?.variant).toMatchObject({ vecA: false, vecB: false });
    expect(odd?.variant.padA).toBeUndefined();
    // An a rounded into rows padded to 8 halves loads 8 at a time.
    const padded = planHalfGemm(p(100, 99, 100, { transA: true, padA: true }), 'subgroup-matrix', H100);
    expect(padded?.variant).toMatchObject({ vecA: true, vecB: false, padA: true });
  });

  it('takes the tile the f16GemmTile switch names where it fits', () => {
    const square = planHalfGemm(p(4096, 4096, 4096), 'subgroup-matrix', { ...H100, tile: '128x128w2x2' });
    expect(square?.variant.tile).toEqual({ bm: 128, bn: 128, bk: 32, wm: 2, wn: 2 });
    expect(square).toMatchObject({ tilesM: 32, tilesN: 32 });
    const wide = planHalfGemm(p(4096, 4096, 4096), 'subgroup-matrix', { ...H100, tile: '64x128w2x2' });
    expect(wide).toMatchObject({ variant: { tile: { bm: 64, bn: 128 } }, tilesM: 64, tilesN: 32 });
    // 48 KiB of workgroup memory does not hold the large tile in a 32 KiB device: the size rule decides.
    const small = { ...H100, maxWorkgroupBytes: 32768, tile: '128x128w2x4' as const };
    expect(planHalfGemm(p(4096, 4096, 4096), 'subgroup-matrix', small)?.variant.tile).toBe(HALF_TILE_MID);
  });

  it('refuses subgroup matrices a device lacks, by name', () => {
    const none = { ...H100, subgroupMatrix: undefined };
    expect(() => planHalfGemm(p(256, 256, 256), 'subgroup-matrix', none)).toThrow(UnsupportedOnBackendError);
    const varying = { ...H100, subgroupMatrix: { ...H100.subgroupMatrix!, minSubgroupSize: 16 } };
    expect(() => planHalfGemm(p(256, 256, 256), 'subgroup-matrix', varying)).toThrow(/subgroup sizes 16–32/);
    expect(() => planHalfGemm(p(256, 256, 256), 'emulated', { shaderF16: false })).toThrow(/shader-f16/);
  });

  it('loads transposed operands as column-major fragments', () => {
    const wgsl = (transA: boolean, transB: boolean) =>
      halfGemmShader(
        {
          ...planHalfGemm(p(4096, 4096, 4096, { transA, transB }), 'subgroup-matrix', H100)!.variant,
          out: { vec: true, c: true },
        },
        'matmul',
      ).code();
    const plain = wgsl(false, false);
    expect(plain).toContain('enable chromium_experimental_subgroup_matrix;');
    // Fragment offsets depend on subgroup_id: uniform per subgroup, not per workgroup.
    expect(plain).toContain('diagnostic(off, chromium.subgroup_matrix_uniformity);');
    expect(plain).toContain('subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&tile_a, ca + (sgRow');
    expect(plain).toMatch(/subgroup_matrix_left<f16, 16, 16>>\(&tile_a, [^;]*, false, 40u\)/);
    expect(plain).toMatch(/subgroup_matrix_right<f16, 16, 16>>\(&tile_b, [^;]*, false, 136u\)/);
    expect(plain).toContain('subgroupMatrixMultiplyAccumulate(l3, r1, acc3_1)');
    expect(plain).toContain('@workgroup_size(256)');
    const tt = wgsl(true, true);
    expect(tt).toMatch(/subgroup_matrix_left<f16, 16, 16>>\(&tile_a, [^;]*, true, 136u\)/);
    expect(tt).toMatch(/subgroup_matrix_right<f16, 16, 16>>\(&tile_b, [^;]*, true, 40u\)/);
  });
});

// The emulated variant runs the subgroup-matrix kernel's staging, fragment
// addressing and edges in plain f32 arithmetic on any adapter with shader-f16.
const unavailable = await backendProvider.probe();

describe.skipIf(unavailable !== undefined)('f16 matrix products on the device (emulated fragments)', () => {
  let backend: WgpuBackend;
  beforeAll(async () => {
    backend = await createWgpuBackend({ f16Gemm: 'emulated' });
  });
  afterAll(() => {
    backend?.dispose();
  });

  const rng = new Rng(0xf16);
  const random = (n: number) => Array.from({ length: n }, () => rng.uniform(-1, 1));

  async function check(
    batch: number | undefined,
    [m, k, n]: readonly [number, number, number],
    attrs: MatmulAttrs,
    withC = false,
  ): Promise<void> {
    if (!backend.gpu.features.has('shader-f16')) return;
    // The reference sees the rounded halves.
    const { operands, values } = await uploadOperands(backend, batch, [m, k, n], attrs, withC, random, 'f16');
    const { y, expected } = runWithReference(backend, batch, operands, values, attrs);
    expect(y.dtype).toBe('f16');
    const bound = Math.max(1e-3, 4 * 2 ** -11 * Math.sqrt(k));
    const mismatch = compareOutputs('f32', await halfValues(y), expected, {
      rtol: bound,
      atol: bound * Math.sqrt(k),
    });
    for (const t of [...operands, y]) t?.dispose();
    expect(mismatch, `${batch ?? ''}×[${m}, ${k}, ${n}] ${JSON.stringify(attrs)}`).toBeUndefined();
  }

  // Few shapes: llvmpipe compiles each variant of the emulation for tens of seconds.
  it('8-half loads in every transpose with c; scalar loads and ragged edges', async () => {
    for (const [transA, transB] of TRANSPOSES) {
      await check(undefined, [72, 48, 80], { transA, transB, alpha: 1.5, beta: -0.5 }, true);
    }
    await check(undefined, [67, 45, 70], { transA: true, transB: true, alpha: -1 }, true);
  }, 1_200_000);

  it('batched, K splits, and K shorter than a step', async () => {
    await check(3, [37, 29, 65], {});
    await check(undefined, [40, 2048, 48], { transB: true }, true);
  }, 1_200_000);

  it("precision 'half': f32 activations rounded to f16 once, times f16 weights, on the same tiles", async () => {
    if (!backend.gpu.features.has('shader-f16')) return;
    // The first test's tiles (transB, c): llvmpipe compiles a new variant for minutes.
    const [m, k, n] = [72, 48, 80];
    const a = backend.upload(random(m * k), [m, k], 'f32');
    const b = backend.upload(random(n * k), [n, k], 'f16');
    const c = backend.upload(random(m * n), [m, n], 'f32');
    const values = [
      (await a.read()) as Float32Array,
      await halfValues(b),
      (await c.read()) as Float32Array,
    ] as const;
    const attrs = { transB: true, alpha: 1.5, beta: -0.5, precision: 'half' as const };
    const { y, expected } = runWithReference(backend, undefined, [a, b, c], values, attrs);
    expect(y.dtype).toBe('f32');
    const got = (await y.read()) as Float32Array;
    // The reference rounds a to f16 as the kernel does: only the sums' order differs.
    const bound = 1e-4 * Math.sqrt(k);
    expect(compareOutputs('f32', got, expected, { rtol: 1e-4, atol: bound })).toBeUndefined();
    // The exact product of the unrounded a is farther away than that.
    const metas = [a, b, c].map((t) => ({ shape: t.shape, dtype: t.dtype }));
    const f32 = { ...attrs, precision: 'f32' as const };
    const io = inferKernel(matmul, metas, f32);
    const exact = matmul.reference([...values], io.attrs, {
      inputs: metas,
      outputs: io.outputs,
    })[0] as Float32Array;
    expect(Math.max(...got.map((v, i) => Math.abs(v - exact[i]!)))).toBeGreaterThan(bound);
    for (const t of [a, b, c, y]) t.dispose();
  }, 1_200_000);

  it("precision 'half' with rows of odd length: a rounded into rows padded to 8 halves", async () => {
    if (!backend.gpu.features.has('shader-f16')) return;
    // The LM head's dX (K = the vocabulary) and dW (M = the vocabulary, a transposed), in small.
    for (const [[m, k, n], attrs] of [
      [[37, 45, 72], {}],
      [[67, 40, 48], { transA: true }],
    ] as const) {
      const a = backend.upload(random(m * k), attrs.transA ? [k, m] : [m, k], 'f32');
      const b = backend.upload(random(k * n), [k, n], 'f16');
      const values = [(await a.read()) as Float32Array, await halfValues(b), undefined] as const;
      const { y, expected } = runWithReference(backend, undefined, [a, b, undefined], values, {
        ...attrs,
        precision: 'half',
      });
      // The reference rounds a to f16 as the kernel does: only the sums' order differs.
      const bound = 1e-4 * Math.sqrt(k);
      const mismatch = compareOutputs('f32', (await y.read()) as Float32Array, expected, {
        rtol: 1e-4,
        atol: bound,
      });
      for (const t of [a, b, y]) t.dispose();
      expect(mismatch, `[${m}, ${k}, ${n}] ${JSON.stringify(attrs)}`).toBeUndefined();
    }
  }, 1_200_000);

  it('linear with bias and activation on the same tiles', async () => {
    if (!backend.gpu.features.has('shader-f16')) return;
    const [m, k, n] = [40, 56, 72];
    const x = backend.upload(random(m * k), [m, k], 'f16');
    const w = backend.upload(random(n * k), [n, k], 'f16');
    const bias = backend.upload(random(n), [n], 'f16');
    const [xv, wv, bv] = await Promise.all([halfValues(x), halfValues(w), halfValues(bias)]);
    const metas = [x, w, bias].map((t) => ({ shape: t.shape, dtype: t.dtype }));
    const attrs = { activation: 'gelu' as const };
    const io = inferKernel(linear, metas, attrs);
    const expected = linear.reference([xv, wv, bv], io.attrs, { inputs: metas, outputs: io.outputs });
    const outs = backend.run(linear, [x, w, bias], attrs);
    for (let i = 0; i < outs.length; i++) {
      const mismatch = compareOutputs('f32', await halfValues(outs[i]!), expected[i] as Float32Array, {
        rtol: 4e-3,
        atol: 4e-3,
      });
      expect(mismatch, `linear output ${i}`).toBeUndefined();
    }
    for (const t of [x, w, bias, ...outs]) t.dispose();
  }, 1_200_000);
});
