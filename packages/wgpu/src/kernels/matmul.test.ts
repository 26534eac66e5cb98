import { batchedMatmul, matmul } from '@rayo/core';
import { compareOutputs, Rng, VALID_CASES } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type MatmulAttrs,
  runWithReference,
  TRANSPOSES,
  uploadOperands,
} from '../../testing/matmulReference.js';
import { backendProvider, createWgpuBackend, type WgpuBackend } from '../index.js';
import { type MatmulPlan, type MatmulProblem, planMatmul } from './matmul.js';
import { TILE_LARGE, TILE_MID } from './matmulTile.js';

/** What distinguishes plans in the coverage checks below. */
function describePlan(plan: MatmulPlan): string {
  if (plan.path === 'empty') return 'empty';
  const { variant: v, splits, vecY } = plan;
  const vec = `a${v.vecA ? 4 : 1}b${v.vecB ? 4 : 1}y${vecY ? 4 : 1}`;
  const split = splits > 1 ? '/split' : '';
  if (plan.path === 'tile')
    return `tile${plan.variant.tile.bm}/tA${+plan.variant.transA}tB${+v.transB}/${vec}${split}`;
  return `${plan.path}/tB${+v.transB}/${vec}${split}`;
}

describe('matmul plans', () => {
  const big = { maxWorkgroupBytes: 1 << 20 };

  it('chooses the kernel by shape', () => {
    const p = (m: number, k: number, n: number, transB = false): MatmulProblem => ({
      batch: 1,
      m,
      n,
      k,
      transA: false,
      transB,
    });
    expect(planMatmul(p(1, 4096, 4096), big).path).toBe('gemv');
    expect(planMatmul(p(1, 4096, 4096, true), big).path).toBe('gemv');
    expect(planMatmul(p(8, 4096, 4096, true), big).path).toBe('smallm');
    expect(planMatmul(p(32, 4096, 4096, true), big).path).toBe('smallm');
    expect(planMatmul(p(4, 4096, 4096), big).path).toBe('smallm');
    expect(planMatmul(p(8, 4096, 4096), big).path).toBe('tile');
    const gemm = planMatmul(p(4096, 4096, 4096), big);
    expect(gemm.path === 'tile' && gemm.variant.tile).toBe(TILE_LARGE);
    expect(gemm.path === 'tile' && gemm.variant.vecA && gemm.variant.vecB && gemm.vecY).toBe(true);
    expect(gemm.path === 'tile' && gemm.splits).toBe(1);
    const mid = planMatmul(p(512, 512, 512), big);
    expect(mid.path === 'tile' && mid.variant.tile).toBe(TILE_MID);
    // GEMV: b [K, N] in the widest row segments that still give 256
    // workgroups; b [N, K] 8 rows per workgroup; neither splits K at 4096.
    const gemv = (k: number, n: number, transB = false) => {
      const plan = planMatmul(p(1, k, n, transB), { ...big, subgroups: true });
      if (plan.path !== 'gemv') throw new Error(`expected a GEMV plan, got ${plan.path}`);
      return {
        lanes: plan.variant.lanes,
        tilesN: plan.tilesN,
        splits: plan.splits,
        sg: plan.variant.subgroups,
      };
    };
    expect(gemv(4096, 4096)).toEqual({ lanes: 4, tilesN: 256, splits: 1, sg: true });
    expect(gemv(4096, 11008)).toEqual({ lanes: 8, tilesN: 344, splits: 1, sg: true });
    expect(gemv(4096, 16384)).toEqual({ lanes: 16, tilesN: 256, splits: 1, sg: true });
    expect(gemv(4096, 4096, true)).toMatchObject({ tilesN: 512, splits: 1 });
    expect(planMatmul(p(1, 4096, 4096), big)).toMatchObject({ variant: { subgroups: false } });
    // A GEMV over few columns splits K to keep the GPU busy.
    const narrow = planMatmul(p(1, 8192, 64), big);
    expect(narrow.path === 'gemv' && narrow.splits).toBeGreaterThan(1);
    // aᵀ·bᵀ runs as (b·a)ᵀ.
    const tt = planMatmul({ ...p(300, 200, 100), transA: true, transB: true }, big);
    expect(tt.path === 'tile' && tt.variant.swap && [tt.tilesM, tt.tilesN]).toEqual([2, 5]);
    // Misaligned operands fall back to scalar bindings.
    const off = planMatmul({ ...p(64, 64, 64), offsets: { a: 4, b: 0, y: 0 } }, big);
    expect(off.path === 'tile' && !off.variant.vecA && off.variant.vecB).toBe(true);
    expect(planMatmul(p(3, 0, 5)).path).toBe('empty');
  });

  it('the conformance cases exercise every path', () => {
    const seen = new Set<string>();
    for (const c of VALID_CASES) {
      if (c.spec !== matmul && c.spec !== batchedMatmul) continue;
      const batched = c.spec === batchedMatmul;
      const a = c.inputs[0]!.shape;
      const b = c.inputs[1]!.shape;
      const [transA, transB] = [c.attrs?.transA === true, c.attrs?.transB === true];
      const [ra, rb] = batched ? [a.slice(1), b.slice(1)] : [a, b];
      seen.add(
        describePlan(
          planMatmul({
            batch: batched ? a[0]! : 1,
            m: transA ? ra[1]! : ra[0]!,
            k: transA ? ra[0]! : ra[1]!,
            n: transB ? rb[0]! : rb[1]!,
            transA,
            transB,
          }),
        ),
      );
    }
    const all = [...seen].join(' ');
    for (const expected of [
      'gemv/tB0/a1b1',
      'gemv/tB1/a4b4',
      'gemv/tB0/a1b1y1/split',
      'smallm/tB0',
      'smallm/tB1',
      'tile64/tA0tB0',
      'tile64/tA1tB0',
      'tile64/tA0tB1',
      'tile64/tA1tB1',
      'tile64/tA0tB1/a4b4',
    ]) {
      expect(all).toContain(expected);
    }
  });
});

// Shapes beyond the conformance cases: the 128×128 tile, vec4 loads in every
// transpose combination, split K on each kernel, K = 0, grids past 65535.
const unavailable = await backendProvider.probe();

describe.skipIf(unavailable !== undefined)('matmul on the device', () => {
  let backend: WgpuBackend;
  /** The same device without the `subgroups` feature: the workgroup-memory reductions. */
  let withoutSubgroups: WgpuBackend;
  beforeAll(async () => {
    backend = await createWgpuBackend();
    withoutSubgroups = await createWgpuBackend({ withoutFeatures: ['subgroups'] });
  });
  afterAll(() => {
    backend?.dispose();
    withoutSubgroups?.dispose();
  });

  const rng = new Rng(0x3a7);
  const random = (n: number) => Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
  const tolerance = (k: number) => ({ rtol: 1e-4, atol: 2e-5 * Math.sqrt(Math.max(k, 1)) });

  async function check(
    batch: number | undefined,
    [m, k, n]: readonly [number, number, number],
    attrs: MatmulAttrs,
    withC = false,
    on = backend,
  ): Promise<void> {
    const backend = on;
    const { operands, values } = await uploadOperands(backend, batch, [m, k, n], attrs, withC, random, 'f32');
    const { y, expected } = runWithReference(backend, batch, operands, values, attrs);
    const mismatch = compareOutputs('f32', await y.read(), expected, tolerance(k));
    for (const t of [...operands, y]) t?.dispose();
    expect(mismatch, `${batch ?? ''}×[${m}, ${k}, ${n}] ${JSON.stringify(attrs)}`).toBeUndefined();
  }

  it('128×128 tiles, vec4 and scalar, every transpose', async () => {
    // 2×2 tiles of 128 per entry × 32 entries select the large tile.
    for (const [transA, transB] of TRANSPOSES) await check(32, [132, 24, 136], { transA, transB });
    await check(32, [131, 27, 133], { alpha: -0.5 });
    await check(32, [131, 27, 133], { transA: true, transB: true, alpha: -0.5 });
  }, 600_000);

  it('64×64 tiles with vec4 loads, c and split K', async () => {
    for (const [transA, transB] of TRANSPOSES) {
      await check(undefined, [68, 36, 72], { transA, transB, alpha: 1.5, beta: -0.5 }, true);
    }
    await check(undefined, [40, 2048, 44], {}, true);
    await check(undefined, [40, 2048, 44], { transB: true }, true);
    await check(undefined, [37, 1100, 29], { transA: true, beta: 2 }, true);
    await check(undefined, [37, 1100, 29], { transA: true, transB: true, beta: 2 }, true);
  }, 600_000);

  it('GEMV: both layouts of b, vec4 and scalar, every row segment, split K, with and without subgroups', async () => {
    expect(withoutSubgroups.gpu.features.has('subgroups')).toBe(false);
    for (const on of [backend, withoutSubgroups]) {
      for (const transB of [false, true]) {
        await check(undefined, [1, 1024, 256], { transA: true, transB }, true, on);
        await check(undefined, [1, 2048, 20], { transB }, false, on);
        await check(undefined, [1, 301, 37], { transB, alpha: -2, beta: 0.5 }, true, on);
        await check(3, [1, 40, 24], { transB }, false, on);
      }
      // b [K, N]: 256-, 128- and 64-byte row segments, vec4 and scalar.
      for (const n of [16384, 8192, 4096, 16382, 8190]) await check(undefined, [1, 12, n], {}, false, on);
      // b [N, K]: rows of b past N in the last workgroup.
      await check(undefined, [1, 1028, 4099], { transB: true }, true, on);
    }
  }, 600_000);

  it('small M: vec4, gathers, split K, several row blocks', async () => {
    for (const transB of [false, true]) {
      for (const transA of [false, true])
        await check(undefined, [4, 512, 64], { transA, transB, alpha: 0.5 });
      await check(3, [2, 40, 24], { transB });
    }
    await check(undefined, [32, 64, 33], { transB: true }, true);
    await check(undefined, [20, 1500, 12], { transA: true, transB: true });
  }, 600_000);

  it('K = 0 leaves beta·c', async () => {
    await check(undefined, [3, 0, 5], { beta: 0.5 }, true);
    await check(undefined, [3, 0, 5], {});
    await check(2, [4, 0, 8], {});
  });

  it('spreads more than 65535 workgroups over the grid', async () => {
    await check(70_000, [1, 4, 4], { transB: true });
  }, 120_000);
});
