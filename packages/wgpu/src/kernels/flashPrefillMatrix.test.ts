import { causalAttention, inferKernel } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { halfValues } from '../../testing/matmulReference.js';
import { backendProvider, createWgpuBackend, type WgpuBackend } from '../index.js';
import { paramLayout } from '../params.js';
import { type FlashPrefillDevice, flashPrefillShader, planFlashPrefill } from './flashPrefillMatrix.js';

const F16_F32 = { componentType: 'f16', resultComponentType: 'f32', M: 16, N: 16, K: 16 };
const H200: FlashPrefillDevice = {
  maxWorkgroupBytes: 49152,
  maxInvocations: 1024,
  shaderF16: true,
  subgroupMatrix: {
    configs: [{ ...F16_F32, resultComponentType: 'f16' }, { ...F16_F32, N: 8 }, F16_F32],
    subgroupSize: 32,
    minSubgroupSize: 32,
  },
};
/** lavapipe: 32 KiB of workgroup memory, no subgroup matrices. */
const LAVAPIPE: FlashPrefillDevice = { maxWorkgroupBytes: 32768, maxInvocations: 256, shaderF16: true };
const PARAMS = paramLayout([['tokens', 'u32']] as const);

describe('prefill attention on subgroup matrices: plans and text', () => {
  it('takes 128 rows and 32 keys at head dim 64, 64 rows at 128; what fits in 32 KiB emulated', () => {
    expect(planFlashPrefill(64, 'subgroup-matrix', H200)?.tile).toEqual({ subgroups: 8, keys: 32 });
    expect(planFlashPrefill(128, 'subgroup-matrix', H200)?.tile).toEqual({ subgroups: 4, keys: 32 });
    expect(planFlashPrefill(64, 'emulated', LAVAPIPE)).toEqual({
      compute: 'emulated',
      headDim: 64,
      tile: { subgroups: 2, keys: 32 },
    });
    expect(planFlashPrefill(128, 'emulated', LAVAPIPE)?.tile).toEqual({ subgroups: 2, keys: 16 });
  });

  it('takes the tile the f16AttentionTile switch names where it fits', () => {
    const four = planFlashPrefill(64, 'subgroup-matrix', { ...H200, tile: '4x64' });
    expect(four?.tile).toEqual({ subgroups: 4, keys: 64 });
    expect(flashPrefillShader(four!, PARAMS).code()).toContain('@workgroup_size(128)');
    const eight = flashPrefillShader(planFlashPrefill(64, 'subgroup-matrix', H200)!, PARAMS).code();
    expect(eight).toContain('@workgroup_size(256)');
    // 128 rows of a head dim of 128 need more than 48 KiB: the largest tile that fits instead.
    expect(planFlashPrefill(128, 'subgroup-matrix', { ...H200, tile: '8x32' })?.tile).toEqual({
      subgroups: 4,
      keys: 32,
    });
    // Keys that do not divide the head dim are not taken either.
    expect(planFlashPrefill(80, 'subgroup-matrix', { ...H200, tile: '4x32' })?.tile.keys).toBe(16);
  });

  it('keeps the f32 kernels without the configuration, one subgroup size of 32, f16, or a head dim of 16s', () => {
    expect(planFlashPrefill(64, 'widen', H200)).toBeUndefined();
    expect(planFlashPrefill(64, 'subgroup-matrix', LAVAPIPE)).toBeUndefined();
    const sm = H200.subgroupMatrix!;
    const only8 = { ...H200, subgroupMatrix: { ...sm, configs: [{ ...F16_F32, N: 8 }] } };
    expect(planFlashPrefill(64, 'subgroup-matrix', only8)).toBeUndefined();
    const varying = { ...H200, subgroupMatrix: { ...sm, minSubgroupSize: 16 } };
    expect(planFlashPrefill(64, 'subgroup-matrix', varying)).toBeUndefined();
    expect(planFlashPrefill(64, 'subgroup-matrix', { ...H200, shaderF16: false })).toBeUndefined();
    expect(planFlashPrefill(72, 'subgroup-matrix', H200)).toBeUndefined();
    expect(planFlashPrefill(80, 'subgroup-matrix', H200)?.tile.keys).toBe(16);
  });

  it('writes the products as subgroup-matrix operations on the staged tiles', () => {
    const wgsl = flashPrefillShader(
      planFlashPrefill(64, 'subgroup-matrix', { ...H200, tile: '4x64' })!,
      PARAMS,
    ).code();
    expect(wgsl).toContain('enable chromium_experimental_subgroup_matrix;');
    expect(wgsl).toContain('diagnostic(off, chromium.subgroup_matrix_uniformity);');
    expect(wgsl).toContain('@workgroup_size(128)');
    // Q fragments held from the start; K read transposed (column-major), V and P row-major.
    expect(wgsl).toContain(
      'q3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&tile_q, sg * 1152u + 48u, false, 72u);',
    );
    expect(wgsl).toContain(
      'kf = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&tile_k, 3456u + 48u, true, 72u);',
    );
    expect(wgsl).toContain('sf = subgroupMatrixMultiplyAccumulate(q3, kf, sf);');
    expect(wgsl).toContain('subgroupMatrixStore(&tile_s, sg * 1088u + 48u, sf, false, 68u);');
    expect(wgsl).toContain(
      'pf = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&tile_q, sg * 1152u + 48u, false, 72u);',
    );
    expect(wgsl).toContain(
      'vf = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&tile_v, 3456u + 48u, false, 72u);',
    );
    expect(wgsl).toContain('sf = subgroupMatrixMultiplyAccumulate(pf, vf, sf);');
    // Results are only stored (as by the f16 products), never loaded back.
    expect(wgsl).not.toContain('subgroupMatrixLoad<subgroup_matrix_result');
    expect(wgsl).not.toMatch(/emu[A-Z_]/);
    const d128 = flashPrefillShader(planFlashPrefill(128, 'subgroup-matrix', H200)!, PARAMS).code();
    expect(d128).toContain(
      'vf = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&tile_v, 2176u + 112u, false, 136u);',
    );
    expect(d128).toContain(
      'kf = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&tile_k, 2176u + 112u, true, 136u);',
    );
  });
});

// The emulated variant runs the subgroup-matrix kernel's staging, fragment
// addressing, masking and rescaling in plain arithmetic on any adapter with shader-f16.
const unavailable = await backendProvider.probe();

describe.skipIf(unavailable !== undefined)('prefill attention on the device (emulated fragments)', () => {
  let backend: WgpuBackend;
  beforeAll(async () => {
    // f16Attention left at its default: attention follows the f16 products onto the (emulated) fragments.
    backend = await createWgpuBackend({ f16Gemm: 'emulated' });
  });
  afterAll(() => {
    backend?.dispose();
  });

  const rng = new Rng(0xf1a5);
  const random = (n: number) => Array.from({ length: n }, () => rng.uniform(-1, 1));

  interface Case {
    readonly heads: number;
    readonly kvHeads: number;
    readonly headDim: number;
    readonly tokens: number;
    readonly position: number;
    readonly maxSeq: number;
    readonly scale?: number;
    readonly q: 'f32' | 'f16';
  }

  async function check(c: Case): Promise<void> {
    if (!backend.gpu.features.has('shader-f16')) return;
    const { heads, kvHeads, headDim, tokens, position, maxSeq, q: qType } = c;
    const cacheValues = () => {
      const values = random(kvHeads * maxSeq * headDim);
      // Rows past the chunk are never attended to: NaN there would poison any result that read them.
      for (let h = 0; h < kvHeads; h++)
        values.fill(NaN, (h * maxSeq + position + tokens) * headDim, (h + 1) * maxSeq * headDim);
      return values;
    };
    const qShape = [tokens, heads, headDim];
    const cacheShape = [kvHeads, maxSeq, headDim];
    using q = backend.upload(random(tokens * heads * headDim), qShape, qType);
    using k = backend.upload(cacheValues(), cacheShape, 'f16');
    using v = backend.upload(cacheValues(), cacheShape, 'f16');
    const attrs = { position, ...(c.scale === undefined ? {} : { scale: c.scale }) };
    using out = backend.run(causalAttention, [q, k, v], attrs)[0]!;
    // The reference sees the stored halves.
    const values = await Promise.all([q, k, v].map((t) => (t.dtype === 'f16' ? halfValues(t) : t.read())));
    const metas = [q, k, v].map((t) => ({ shape: t.shape, dtype: t.dtype }));
    const io = inferKernel(causalAttention, metas, attrs);
    const expected = causalAttention.reference(values as Float32Array[], io.attrs, {
      inputs: metas,
      outputs: io.outputs,
    })[0] as Float32Array;
    const got = out.dtype === 'f16' ? await halfValues(out) : ((await out.read()) as Float32Array);
    // q and the weights P rounded to f16 (the spec allows it over half caches).
    const mismatch = compareOutputs('f32', got, expected, { rtol: 1e-2, atol: 4e-3 * (c.scale ?? 1) });
    expect(mismatch, JSON.stringify(c)).toBeUndefined();
  }

  // Few cases: lavapipe compiles each variant of the emulation for seconds.
  it('head dim 64, grouped by 4: a first chunk of odd length, then a chunk over cached keys with rescaling', async () => {
    await check({ heads: 8, kvHeads: 2, headDim: 64, tokens: 37, position: 0, maxSeq: 41, q: 'f32' });
    // A large scale makes the running maximum jump between tiles (large rescales).
    await check({
      heads: 8,
      kvHeads: 2,
      headDim: 64,
      tokens: 23,
      position: 45,
      maxSeq: 70,
      scale: 4,
      q: 'f32',
    });
  });

  // (Half q and out go through the cast shaders, checked elsewhere; they would compile here too.)
  it('head dim 128, one query head per kv head, a chunk across tile boundaries', async () => {
    await check({ heads: 3, kvHeads: 3, headDim: 128, tokens: 21, position: 30, maxSeq: 60, q: 'f32' });
    const keys = backend.pipelines.compiledShaders().map((s) => s.key);
    expect(keys.filter((key) => key.includes('causalAttention/flash-emulated/d'))).toHaveLength(2);
  });
});
