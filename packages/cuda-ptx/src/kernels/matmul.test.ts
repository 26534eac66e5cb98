import { batchedMatmul, InvalidArgumentError, matmul, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import {
  type AssemblyJob,
  createEmulatedGpu,
  expectAllAssembleCleanly,
  seededUniform,
} from '@rayo/cuda-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import {
  type AxpyVariant,
  axpyGeometry,
  axpyKey,
  axpyModule,
  axpySharedBytes,
  dotKey,
  dotModule,
  MAX_ROWS,
  type RowTypes,
  type RowVariant,
  streamWidth,
} from './gemv.js';
import { axpyColumns, LARGE_MIN_SPLIT_K, type MatmulProblem, MIN_SPLIT_K, planMatmul } from './matmul.js';
import { splitSumKey, splitSumModule } from './matmulSplitK.js';
import { TILE_LARGE, TILE_MID, type TileVariant, tileKey, tileModule } from './matmulTile.js';

const H100 = { multiprocessors: 132 };
const ALIGNED = { a: true, b: true, y: true, c: true };

function problem(m: number, k: number, n: number, more: Partial<MatmulProblem> = {}): MatmulProblem {
  return { batch: 1, m, n, k, transA: false, transB: false, withC: false, aligned: ALIGNED, ...more };
}

const FLAGS = [
  [false, false],
  [true, false],
  [false, true],
  [true, true],
] as const;

describe('matmul kernel selection', () => {
  it('runs the GEMV as a warp per column for b stored [N, K], and as column lanes for [K, N]', () => {
    expect(planMatmul(problem(1, 4096, 4096, { transB: true }), H100)).toEqual({
      kind: 'dot',
      variant: { rows: 1, transA: false, vec: true, withC: false },
      swapped: false,
      columns: 4096,
      blocks: 512,
    });
    const axpy = planMatmul(problem(1, 4096, 4096), H100);
    expect(axpy).toMatchObject({ kind: 'axpy', swapped: false, columns: 4096 });
    if (axpy.kind !== 'axpy') throw new Error('unreachable');
    // Enough blocks for every SM, each reading rows of at least 32 bytes.
    expect(axpy.blocks).toBeGreaterThanOrEqual(132);
    expect(axpy.variant.columns).toBeGreaterThanOrEqual(8);
    expect(axpy.variant).toMatchObject({ rows: 1, transA: false, vec: true, quadK: true });
    // a is read 4 k at a time only where those are aligned .v4.
    expect(planMatmul(problem(1, 4095, 4096), H100).variant).toMatchObject({ quadK: false });
    expect(
      planMatmul(problem(1, 4096, 4096, { aligned: { ...ALIGNED, a: false } }), H100).variant,
    ).toMatchObject({
      quadK: false,
    });
  });

  it('reads a transposed single row of a as the row it is', () => {
    const plan = planMatmul(problem(1, 640, 383, { transA: true, transB: true }), H100);
    expect(plan).toMatchObject({ kind: 'dot', variant: { rows: 1, transA: false } });
  });

  it('takes every row of a small M at once, and a small N as the transposed product', () => {
    expect(planMatmul(problem(MAX_ROWS, 512, 1000, { transB: true }), H100)).toMatchObject({
      kind: 'dot',
      variant: { rows: MAX_ROWS },
      swapped: false,
    });
    // yᵀ = bᵀ·aᵀ: a [300, 64] becomes the [N, K] operand of the dot kernel.
    expect(planMatmul(problem(300, 64, 3), H100)).toMatchObject({
      kind: 'dot',
      variant: { rows: 3, transA: true },
      swapped: true,
      columns: 300,
    });
    // With a stored [K, M] it is the [K, N] operand of the axpy kernel.
    expect(planMatmul(problem(300, 64, 3, { transA: true, transB: true }), H100)).toMatchObject({
      kind: 'axpy',
      variant: { rows: 3, transA: false },
      swapped: true,
    });
    expect(planMatmul(problem(MAX_ROWS + 1, 64, 300), H100).kind).toBe('tile');
  });

  it('uses the large tile where it fills the device and the mid tile where it would not', () => {
    expect(planMatmul(problem(4096, 4096, 4096), H100)).toEqual({
      kind: 'tile',
      variant: { tile: TILE_LARGE, transA: false, transB: false, vec: true, withC: false },
      tilesM: 32,
      tilesN: 32,
      splits: 1,
      kPerSplit: 4096,
    });
    expect(planMatmul(problem(257, 300, 263), H100)).toMatchObject({
      variant: { tile: TILE_MID },
      tilesM: 5,
      tilesN: 5,
    });
    // Batches count: 40 products of 4 tiles fill 132 SMs.
    expect(planMatmul(problem(256, 64, 256, { batch: 40 }), H100)).toMatchObject({
      variant: { tile: TILE_LARGE },
    });
    expect(planMatmul(problem(256, 64, 256, { batch: 8 }), H100)).toMatchObject({
      variant: { tile: TILE_MID },
    });
  });

  // [why, problem, the plan's fields]
  const SPLIT_PLANS: readonly (readonly [string, MatmulProblem, object])[] = [
    [
      '64 rows against 4096×4096 weights: large tiles would be half padding, so 64 mid tiles, 5 splits of 832',
      problem(64, 4096, 4096, { transB: true, withC: true }),
      { variant: { tile: TILE_MID, withC: false }, splits: 5, kPerSplit: 832 },
    ],
    [
      '128 rows: 32 large tiles, 12 splits of 344 (384 blocks)',
      problem(128, 4096, 4096, { transB: true, withC: true }),
      { variant: { tile: TILE_LARGE, withC: false }, splits: 12, kPerSplit: 344 },
    ],
    [
      "a GPT block's product at 2048 tokens: 36 large tiles, split 11 ways",
      problem(768, 2048, 768, { transA: true }),
      { variant: { tile: TILE_LARGE }, splits: 11, kPerSplit: 192 },
    ],
    [
      "a GPT block's product at 2048 tokens: 96 large tiles, split 4 ways",
      problem(2048, 2048, 768),
      { variant: { tile: TILE_LARGE }, splits: 4, kPerSplit: 512 },
    ],
    ['192 large tiles split in two', problem(4096, 768, 768), { splits: 2, kPerSplit: 384 }],
    [
      '256 large tiles fill the device unsplit',
      problem(2048, 768, 2048),
      { variant: { tile: TILE_LARGE }, splits: 1 },
    ],
    [
      '16 large tiles cannot fill 132 SMs within K = 512: the mid tile, split in two',
      problem(512, 512, 512),
      { variant: { tile: TILE_MID }, splits: 2, kPerSplit: 256 },
    ],
    [
      'one K short of 512: two splits would fall below MIN_SPLIT_K',
      problem(512, 511, 512),
      { splits: 1, kPerSplit: 511 },
    ],
    [
      '64 large tiles of 1024×1024 over K = 4096: six splits of 688 (384 blocks)',
      problem(1024, 4096, 1024),
      { variant: { tile: TILE_LARGE }, splits: 6, kPerSplit: 688 },
    ],
  ];

  it.each(SPLIT_PLANS)('splits K where the tiles would leave SMs idle: %s', (_why, p, plan) => {
    expect(planMatmul(p, H100)).toMatchObject(plan);
  });

  it('splits K into whole tile steps of MIN_SPLIT_K or more', () => {
    for (const k of [512, 1000, 4097, 100_000]) {
      const plan = planMatmul(problem(100, k, 100), H100);
      if (plan.kind !== 'tile') throw new Error('unreachable');
      expect(plan.kPerSplit % plan.variant.tile.bk).toBe(0);
      expect(plan.kPerSplit).toBeGreaterThanOrEqual(
        plan.variant.tile === TILE_LARGE ? LARGE_MIN_SPLIT_K : MIN_SPLIT_K,
      );
      expect(plan.splits).toBe(Math.ceil(k / plan.kPerSplit));
      // At most about three blocks per SM.
      expect(plan.splits).toBeLessThanOrEqual(Math.round((2.9 * 132) / 1) + 1);
    }
  });

  it('uses .v4 only where every contiguous axis is a multiple of 4 and every operand 16-byte aligned', () => {
    const vec = (p: MatmulProblem) => planMatmul(p, H100).variant.vec;
    expect(vec(problem(64, 64, 64))).toBe(true);
    expect(vec(problem(64, 63, 64))).toBe(false); // K is a's contiguous axis
    expect(vec(problem(64, 63, 64, { transA: true }))).toBe(true); // now M is
    expect(vec(problem(63, 64, 64, { transA: true }))).toBe(false);
    expect(vec(problem(64, 64, 63, { transB: true }))).toBe(false); // N is y's
    expect(vec(problem(64, 64, 64, { aligned: { ...ALIGNED, b: false } }))).toBe(false);
    expect(vec(problem(64, 64, 64, { withC: true, aligned: { ...ALIGNED, c: false } }))).toBe(false);
    expect(vec(problem(64, 64, 64, { aligned: { ...ALIGNED, c: false } }))).toBe(true);
    // Streaming: b's contiguous axis (and a's along K for the dot kernel).
    expect(vec(problem(1, 4096, 4095, { transB: true }))).toBe(true);
    expect(vec(problem(1, 4095, 4096, { transB: true }))).toBe(false);
    expect(vec(problem(1, 4095, 4096))).toBe(true);
    expect(vec(problem(1, 4096, 4095))).toBe(false);
    expect(vec(problem(1, 4096, 4096, { transB: true, aligned: { ...ALIGNED, a: false } }))).toBe(false);
    expect(
      vec(problem(4, 4096, 4096, { transA: true, transB: true, aligned: { ...ALIGNED, a: false } })),
    ).toBe(true);
  });

  it('keeps the axpy cross-warp sums within shared memory and fills the SMs where it can', () => {
    for (let rows = 1; rows <= MAX_ROWS; rows++) {
      for (const vec of [true, false]) {
        for (const n of [3, 130, 4096, 100_000]) {
          const columns = axpyColumns(rows, n, vec ? 4 : 1, 1, 132);
          const variant = { rows, transA: false, vec, withC: false, columns, quadK: false };
          expect(axpySharedBytes(variant)).toBeLessThanOrEqual(32 * 1024);
          expect(() => axpyGeometry(variant)).not.toThrow();
          if (columns > 8) expect(Math.ceil(n / columns)).toBeGreaterThanOrEqual(132);
        }
      }
    }
    expect(axpyColumns(1, 100_000, 4, 1, 132)).toBe(128);
    expect(axpyColumns(1, 4096, 4, 1, 132)).toBe(16);
  });
});

describe('matmul modules', () => {
  it('sums the splits of K in order', () => {
    const text = splitSumModule(true).emit();
    expect(text).toContain('add.rn.f32');
    expect(text).toContain('fma.rn.f32');
    expect(splitSumModule(false).emit()).not.toContain('fma.rn.f32');
  });

  const tileVariants: TileVariant[] = [TILE_LARGE, TILE_MID].flatMap((tile) =>
    FLAGS.flatMap(([transA, transB]) =>
      [true, false].flatMap((vec) => [false, true].map((withC) => ({ tile, transA, transB, vec, withC }))),
    ),
  );
  const rowVariants: RowVariant[] = [1, 2, 5, MAX_ROWS].flatMap((rows) =>
    [false, true].flatMap((transA) => [
      { rows, transA, vec: true, withC: rows % 2 === 1 },
      { rows, transA, vec: true, withC: rows % 2 === 1, l2Prefetch: true },
      { rows, transA, vec: false, withC: rows % 2 === 1 },
    ]),
  );
  const axpyVariants: AxpyVariant[] = rowVariants.flatMap((v) =>
    [8, v.vec ? 64 : 32].flatMap((columns) =>
      (v.transA ? [false] : [false, true]).map((quadK) => ({ ...v, columns, quadK })),
    ),
  );

  // Half storage: weight-only (b half under f32 a and y) and all-half, at the widths they change (8 halves per load up to 4 rows).
  const HALF_TYPES: RowTypes[] = [
    { a: 'f32', b: 'bf16', out: 'f32' },
    { a: 'f32', b: 'f16', out: 'f32' },
    { a: 'bf16', b: 'f32', out: 'f32' },
    { a: 'f16', b: 'f16', out: 'f16' },
    { a: 'bf16', b: 'bf16', out: 'bf16' },
  ];
  const halfRowVariants: RowVariant[] = [1, 2, 4, 5, MAX_ROWS].flatMap((rows) =>
    HALF_TYPES.flatMap((types) => [
      { rows, transA: false, vec: true, withC: true, types },
      { rows, transA: true, vec: false, withC: false, types },
    ]),
  );
  const halfAxpyVariants: AxpyVariant[] = halfRowVariants.map((v) => ({
    ...v,
    columns: v.vec ? 8 * streamWidth(v.types!.b, v.rows) : 32,
    quadK: !v.transA,
  }));
  const halfTileVariants: TileVariant[] = HALF_TYPES.flatMap((types) =>
    FLAGS.map(([transA, transB]) => ({ tile: TILE_MID, transA, transB, vec: transA, withC: true, types })),
  );

  it('names every configuration by its own key', () => {
    const keys = [...tileVariants.map(tileKey), ...rowVariants.map(dotKey), ...axpyVariants.map(axpyKey)];
    expect(new Set(keys).size).toBe(keys.length);
    expect(tileKey(tileVariants[0]!)).toBe('matmul/tile128x128x8_8x8/nn/v4');
  });

  it('builds the same text for the same configuration', () => {
    const v = tileVariants[5]!;
    expect(tileModule(v).emit()).toBe(tileModule({ ...v }).emit());
  });

  it('multiplies out of shared memory with .v4 reads and one barrier per step', () => {
    const { bk, tm, tn } = TILE_LARGE;
    const text = tileModule({
      tile: TILE_LARGE,
      transA: false,
      transB: false,
      vec: true,
      withC: false,
    }).emit();
    // Two steps per loop iteration (one per buffer) and the first step's barrier.
    expect(text.match(/bar\.sync 0;/g)).toHaveLength(3);
    expect(text.match(/ld\.shared\.v4\.f32/g)).toHaveLength(2 * bk * (tm / 4 + tn / 4));
    expect(text.match(/fma\.rn\.f32/g)).toHaveLength(2 * bk * tm * tn);
    // a (K contiguous) is stored transposed, b (N contiguous) as it comes.
    expect(text).toMatch(/ld\.global\.nc\.v4\.f32/);
    expect(text.match(/st\.shared\.v4\.f32/g)).toHaveLength(3);
    expect(text).toMatch(/st\.global\.v4\.f32/);
  });

  it('streams b stored [K, N] with .L2::256B prefetches on sm_80 and newer, in modules that target sm_80', () => {
    const gemv = problem(1, 4096, 4096);
    const hopper = planMatmul(gemv, { ...H100, computeCapability: [9, 0] });
    expect(hopper).toMatchObject({ kind: 'axpy', variant: { l2Prefetch: true } });
    expect(planMatmul(gemv, { ...H100, computeCapability: [7, 5] }).variant).not.toHaveProperty('l2Prefetch');
    // Scalar loads of b, and b stored [N, K] (the dot kernel), keep the plain form.
    const odd = planMatmul(problem(1, 4096, 4095), { ...H100, computeCapability: [9, 0] });
    expect(odd.variant).not.toHaveProperty('l2Prefetch');
    const dot = planMatmul(problem(1, 4096, 4096, { transB: true }), { ...H100, computeCapability: [9, 0] });
    expect(dot).toMatchObject({ kind: 'dot' });
    expect(dot.variant).not.toHaveProperty('l2Prefetch');
    if (hopper.kind !== 'axpy') throw new Error('unreachable');
    const text = axpyModule(hopper.variant).emit();
    expect(text).toMatch(/^\.target sm_80/m);
    expect(text).toMatch(/ld\.global\.nc\.L2::256B\.v4\.f32/);
    // Only b's stream: a (the activations) is read plainly.
    expect(text).toMatch(/ld\.global\.nc\.v4\.f32/);
    expect(axpyKey(hopper.variant)).not.toBe(axpyKey({ ...hopper.variant, l2Prefetch: undefined }));
    // The dot kernel streams b the same way when asked.
    expect(dotModule({ rows: 1, transA: false, vec: true, withC: false, l2Prefetch: true }).emit()).toMatch(
      /ld\.global\.nc\.L2::256B\.v4\.f32/,
    );
  });

  it('reduces with warp shuffles', () => {
    const dot = dotModule({ rows: 3, transA: false, vec: true, withC: false }).emit();
    expect(dot.match(/shfl\.sync\.bfly\.b32/g)).toHaveLength(3 * 5);
    const axpy = axpyModule({
      rows: 2,
      transA: false,
      vec: true,
      withC: false,
      columns: 16,
      quadK: false,
    }).emit();
    // Lanes 4 apart share columns: offsets 4, 8 and 16 for each of 2 · 4 sums.
    expect(axpy.match(/shfl\.sync\.bfly\.b32/g)).toHaveLength(3 * 8);
    expect(axpy.match(/bar\.sync 0;/g)).toHaveLength(1);
  });

  it('rejects configurations it cannot build', () => {
    expect(() => dotModule({ rows: MAX_ROWS + 1, transA: false, vec: true, withC: false })).toThrow(
      InvalidArgumentError,
    );
    expect(() =>
      axpyModule({ rows: 2, transA: false, vec: true, withC: false, columns: 256, quadK: false }),
    ).toThrow(InvalidArgumentError);
    expect(() =>
      axpyModule({ rows: MAX_ROWS, transA: false, vec: true, withC: false, columns: 128, quadK: false }),
    ).toThrow(InvalidArgumentError);
    expect(() =>
      axpyModule({ rows: 2, transA: true, vec: true, withC: false, columns: 16, quadK: true }),
    ).toThrow(InvalidArgumentError);
    expect(() =>
      tileModule({ tile: { ...TILE_LARGE, tm: 4 }, transA: false, transB: false, vec: true, withC: false }),
    ).toThrow(InvalidArgumentError);
  });

  const gate = ptxasTestGate();
  describe.skipIf(gate.skip)(`PTX assembles with ptxas (${gate.reason})`, () => {
    /** Jobs for sm_90, which must not spill, and for the oldest target the module claims, which only has to assemble. */
    const both = (what: string, ptx: string, maxRegisters?: number): AssemblyJob[] => {
      const claimed = /^\.target (\S+)/m.exec(ptx)?.[1] ?? DEFAULT_TARGET;
      return [
        { ptx, arch: claimed, what: `${what} ${claimed}`, spillsAllowed: true },
        { ptx, arch: 'sm_90', what, maxRegisters },
      ];
    };
    it('tiles, every layout, .v4 and element-wise, with and without c', () => {
      // The large tile keeps two blocks per SM.
      expectAllAssembleCleanly(
        tileVariants.flatMap((v) =>
          both(tileKey(v), tileModule(v).emit(), v.tile === TILE_LARGE ? 128 : undefined),
        ),
      );
    }, 120_000);
    it('the dot and axpy kernels, and the sum of the splits of K', () => {
      expectAllAssembleCleanly([
        ...rowVariants.flatMap((v) => both(dotKey(v), dotModule(v).emit())),
        ...axpyVariants.flatMap((v) => both(axpyKey(v), axpyModule(v).emit())),
        ...[false, true].flatMap((withC) => both(splitSumKey(withC), splitSumModule(withC).emit())),
      ]);
    }, 120_000);
    it('the streaming, tiled and split-sum kernels over half storage', () => {
      expectAllAssembleCleanly([
        ...halfRowVariants.flatMap((v) => both(dotKey(v), dotModule(v).emit())),
        ...halfAxpyVariants.flatMap((v) => both(axpyKey(v), axpyModule(v).emit())),
        ...halfTileVariants.flatMap((v) => both(tileKey(v), tileModule(v).emit())),
        ...(['f16', 'bf16'] as const).flatMap((out) =>
          both(splitSumKey(true, undefined, out), splitSumModule(true, undefined, out).emit()),
        ),
      ]);
    }, 120_000);
  });
});

/** A backend on a fake device of `sms` SMs whose launches run in the PTX interpreter, checked against the cpu backend. */
function emulated(sms: number) {
  const { fake, gpu, cpu } = createEmulatedGpu({ multiprocessors: sms });
  const uniform = seededUniform(3, -1, 1);
  const random = (n: number) => Float32Array.from({ length: n }, uniform);

  /** Runs `spec` on both backends, compares within the conformance bound for depth `k`, returns the launches. */
  async function check(
    spec: typeof matmul | typeof batchedMatmul,
    shapes: number[][],
    attrs: Record<string, number | boolean>,
    k: number,
  ) {
    const data = shapes.map((s) => random(s.reduce((a, b) => a * b, 1)));
    const ins = data.map((d, i) => gpu.upload(d, shapes[i]!));
    const refs = data.map((d, i) => cpu.upload(d, shapes[i]!));
    const first = fake.launches.length;
    const [y] = gpu.run(spec as typeof matmul, ins, attrs) as Tensor[];
    const [want] = cpu.run(spec as typeof matmul, refs, attrs);
    const tolerance = { rtol: 1e-4, atol: 2e-5 * Math.sqrt(Math.max(k, 1)) };
    expect(compareOutputs('f32', await y!.read(), await want!.read(), tolerance)).toBeUndefined();
    const launches = fake.launches.slice(first);
    for (const t of [...ins, ...refs, y!, want!]) t.dispose();
    return launches;
  }
  return { fake, gpu, check };
}

// The tiled kernel on a one-SM device, where the planner takes the large
// tile for any size: edge tiles in M, N and K, each layout, alpha and beta.
// K of 7 steps of 8, the last partial: the double-buffered loop runs whole
// iterations and leaves by its mid-iteration exit, as at any odd step count.
describe('the large tile, and the widest axpy block, on a one-SM device', () => {
  const { fake, gpu, check } = emulated(1);
  afterAll(() => gpu.dispose());

  for (const [m, k, n, label] of [
    [131, 49, 67, 'element by element'],
    [132, 52, 68, '.v4'],
  ] as const) {
    for (const [transA, transB] of FLAGS) {
      it(`${m}×${k}×${n} ${label}${transA ? ' transA' : ''}${transB ? ' transB' : ''}, alpha and beta`, async () => {
        const modules = fake.images.length;
        const launches = await check(
          matmul,
          [transA ? [k, m] : [m, k], transB ? [n, k] : [k, n], [m, n]],
          { alpha: -0.75, beta: 0.5, transA, transB },
          k,
        );
        expect(launches.map((l) => [l.entry, l.grid])).toEqual([['matmul_tile', [2, 1, 1]]]);
        // Each layout and path is a module of its own: this one was just loaded.
        expect(fake.images).toHaveLength(modules + 1);
        expect(fake.images.at(-1)!.includes('ld.global.nc.v4.f32')).toBe(label === '.v4');
      }, 120_000);
    }
  }

  it('batches are blockIdx.z', async () => {
    const launches = await check(
      batchedMatmul,
      [
        [3, 40, 20],
        [3, 20, 36],
      ],
      { alpha: 2 },
      20,
    );
    expect(launches.map((l) => [l.entry, l.grid])).toEqual([['matmul_tile', [1, 1, 3]]]);
  }, 120_000);

  it('small M with a block as wide as a warp of .v4 columns', async () => {
    const launches = await check(
      matmul,
      [
        [5, 300],
        [300, 260],
      ],
      { alpha: 1.5 },
      300,
    );
    expect(launches.map((l) => [l.entry, l.grid])).toEqual([['matmul_axpy', [3, 1, 1]]]);
  }, 120_000);

  it('K = 0 leaves beta · c', async () => {
    await check(
      matmul,
      [
        [20, 0],
        [0, 24],
        [20, 24],
      ],
      { beta: -2 },
      0,
    );
    await check(
      matmul,
      [
        [1, 0],
        [24, 0],
        [1, 24],
      ],
      { beta: 3, transB: true },
      0,
    );
  }, 120_000);
});

// With 8 SMs the mid tile of a 64-wide product leaves most of them idle, so K is split in two.
describe('split K on an emulated device', () => {
  const { gpu, check } = emulated(8);
  afterAll(() => gpu.dispose());

  for (const [m, k, n, transA, transB] of [
    [64, 600, 64, false, false],
    [61, 601, 67, true, true],
  ] as const) {
    it(`${m}×${k}×${n}${transA ? ' transA' : ''}${transB ? ' transB' : ''} + c`, async () => {
      const launches = await check(
        matmul,
        [transA ? [k, m] : [m, k], transB ? [n, k] : [k, n], [m, n]],
        { alpha: 1.25, beta: -0.5, transA, transB },
        k,
      );
      const tiles = Math.ceil(m / TILE_MID.bm) * Math.ceil(n / TILE_MID.bn);
      expect(launches.map((l) => [l.entry, l.grid])).toEqual([
        ['matmul_tile', [tiles, 2, 1]],
        ['matmul_split_sum', [expect.any(Number), 1, 1]],
      ]);
    }, 120_000);
  }
});

// With 4 SMs a 256×256 output is 4 large tiles: K = 520 is split three ways
// (176, 176 and a short last 168) for about three blocks per SM.
describe('split K of the large tile on an emulated device', () => {
  const { gpu, check } = emulated(4);
  afterAll(() => gpu.dispose());

  it('256×520×256 transA + c', async () => {
    const [m, k, n] = [256, 520, 256];
    const launches = await check(
      matmul,
      [
        [k, m],
        [k, n],
        [m, n],
      ],
      { alpha: 0.75, beta: 1.5, transA: true },
      k,
    );
    expect(launches.map((l) => [l.entry, l.grid])).toEqual([
      ['matmul_tile', [4, 3, 1]],
      ['matmul_split_sum', [expect.any(Number), 1, 1]],
    ]);
  }, 300_000);
});

// Half weights under f32 activations where the planner takes 16-byte loads
// of 8 halves (K or N a multiple of 8), and past 4 rows 8-byte loads of 4.
describe('half weights on an emulated device', () => {
  const { gpu, cpu } = createEmulatedGpu({ multiprocessors: 4 });
  afterAll(() => gpu.dispose());
  const uniform = seededUniform(11, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const [m, k, n] of [
      [1, 264, 40],
      [3, 128, 136],
      [12, 96, 72],
      [40, 64, 5],
    ] as const) {
      for (const transB of [false, true]) {
        it(`${m}×${k}×${n}${transB ? ' transB' : ''}, ${dtype} b`, async () => {
          const aData = random(m * k);
          const bData = random(k * n);
          const bShape = transB ? [n, k] : [k, n];
          const a = [gpu.upload(aData, [m, k]), cpu.upload(aData, [m, k])] as const;
          const b = [gpu.upload(bData, bShape, dtype), cpu.upload(bData, bShape, dtype)] as const;
          const [y] = gpu.run(matmul, [a[0], b[0]], { transB });
          const [want] = cpu.run(matmul, [a[1], b[1]], { transB });
          const tolerance = { rtol: 1e-4, atol: 2e-5 * Math.sqrt(k) };
          expect(compareOutputs('f32', await y!.read(), await want!.read(), tolerance)).toBeUndefined();
          for (const t of [...a, ...b, y!, want!]) t.dispose();
        }, 120_000);
      }
    }
  }
});
