import {
  type AttrValues,
  biasActivationBackward,
  gateUpSwiglu,
  type KernelSpec,
  LINEAR_ACTIVATIONS,
  linear,
  rmsNormMatmul,
  rmsNormMatmul3,
  type Tensor,
} from '@rayo/core';
import { compareOutputs, type Tolerance } from '@rayo/core/testing';
import { archJobs, expectAllAssembleCleanly, seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import {
  biasActivationKey,
  biasActivationModule,
  FUSED_MAX_ROWS,
  type FusedVariant,
  fusedKey,
  fusedModule,
} from './fused.js';
import { dotKey, dotModule, type RowVariant } from './gemv.js';
import { splitSumKey, splitSumModule } from './matmulSplitK.js';
import { TILE_LARGE, TILE_MID, type TileVariant, tileKey, tileModule } from './matmulTile.js';

const variants: FusedVariant[] = [
  ...[1, 2, 3, 4, 8, 9, FUSED_MAX_ROWS].flatMap((rows) =>
    [false, true].flatMap((vec) => [false, true].map((norm) => ({ gated: true, rows, vec, norm }))),
  ),
  ...[1, 2, 4, 8, FUSED_MAX_ROWS].flatMap((rows) =>
    [false, true].map((vec) => ({ gated: false, rows, vec, norm: true })),
  ),
  ...[2, 3].flatMap((weights) =>
    [1, 2, 9, FUSED_MAX_ROWS].flatMap((rows) =>
      [false, true].map((vec) => ({ gated: false, weights, rows, vec, norm: true })),
    ),
  ),
];

// Half weights under f32 activations (the decode case) and all-half, at each width the rows choose.
const halfVariants: FusedVariant[] = (
  [
    { act: 'f32', weight: 'bf16' },
    { act: 'f32', weight: 'f16' },
    { act: 'bf16', weight: 'bf16' },
    { act: 'f16', weight: 'f16' },
  ] as const
).flatMap((types) =>
  [1, 2, 4, 5, FUSED_MAX_ROWS].flatMap((rows) => [
    { gated: true, rows, vec: true, norm: true, types },
    { gated: false, weights: 3, rows, vec: rows % 2 === 0, norm: true, types },
  ]),
);

/** Each of the emulated gpu's outputs agrees with the reference's within `tolerance`. */
async function expectOutputsClose(got: readonly Tensor[], want: readonly Tensor[], tolerance: Tolerance) {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    expect(compareOutputs('f32', await got[i]!.read(), await want[i]!.read(), tolerance)).toBeUndefined();
  }
}

describe('fused streaming kernels', () => {
  it('reads both weights with .v4 through the non-coherent cache and writes only y', () => {
    const text = fusedModule({ gated: true, rows: 1, vec: true, norm: true }).emit();
    // Two weights, the norm weight and x, per step, unrolled 4 times.
    expect(text.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(4 * 4 + 4);
    expect(text.match(/st\.global/g)).toHaveLength(1);
    expect(text).not.toContain('bar.sync');
    expect(text).toContain('sqrt.rn.f32');
    expect(fusedModule({ gated: true, rows: 1, vec: true, norm: false }).emit()).not.toContain('sqrt');
    // One weight, the norm weight and x; no silu (no exponential).
    const plain = fusedModule({ gated: false, rows: 1, vec: true, norm: true }).emit();
    expect(plain.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(3 * 4 + 3);
    expect(plain).not.toContain('ex2');
  });

  it('names the variant in the key and refuses more rows than a block takes', () => {
    expect(fusedKey({ gated: true, rows: 3, vec: true, norm: true })).toBe('fused/gateUpSwiglu/m3/v4/norm');
    expect(fusedKey({ gated: false, rows: 1, vec: false, norm: true })).toBe(
      'fused/rmsNormMatmul/m1/scalar/norm',
    );
    expect(() => fusedModule({ gated: true, rows: FUSED_MAX_ROWS + 1, vec: true, norm: false })).toThrow(
      /rows/,
    );
    expect(fusedKey({ gated: false, weights: 3, rows: 1, vec: true, norm: true })).toBe(
      'fused/rmsNormMatmul3/w3/m1/v4/norm',
    );
    expect(() => fusedModule({ gated: false, weights: 4, rows: 1, vec: true, norm: true })).toThrow(
      /weights/,
    );
    expect(() => fusedModule({ gated: true, weights: 2, rows: 1, vec: true, norm: true })).toThrow(/weights/);
  });

  it('streams one weight per warp whichever of the three it is, and stores once', () => {
    const text = fusedModule({ gated: false, weights: 3, rows: 1, vec: true, norm: true }).emit();
    expect(text.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(3 * 4 + 3);
    expect(text.match(/st\.global/g)).toHaveLength(1);
    expect(text.match(/selp\.u64/g)).toHaveLength(2 * 2);
  });
});

// linear runs the matmul kernels with an epilogue: every activation, with and
// without the bias and z, on the tiles, the dot kernel and the split-K sum.
const epilogues = LINEAR_ACTIVATIONS.flatMap((activation) =>
  [false, true].map((bias) => ({ bias, activation, z: activation !== 'none' && bias })),
);
const linearTiles: TileVariant[] = [TILE_LARGE, TILE_MID].flatMap((tile) =>
  [true, false].flatMap((vec) =>
    epilogues.map((epilogue) => ({ tile, transA: false, transB: true, vec, withC: false, epilogue })),
  ),
);
const linearRows: RowVariant[] = [1, 3, 16].flatMap((rows) =>
  [true, false].flatMap((vec) =>
    epilogues.map((epilogue) => ({ rows, transA: false, vec, withC: false, epilogue })),
  ),
);

describe('linear epilogue and its backward', () => {
  it('adds the bias, applies the activation and stores z only when asked', () => {
    const plain = tileModule({
      tile: TILE_LARGE,
      transA: false,
      transB: true,
      vec: true,
      withC: false,
    }).emit();
    const epilogue = { bias: true, activation: 'gelu', z: true } as const;
    const text = tileModule({
      tile: TILE_LARGE,
      transA: false,
      transB: true,
      vec: true,
      withC: false,
      epilogue,
    }).emit();
    expect(plain).not.toContain('ex2');
    expect(text).toContain('ex2.approx');
    // z and y per quad: twice the stores of the plain product.
    expect(text.match(/st\.global\.v4\.f32/g)).toHaveLength(2 * plain.match(/st\.global\.v4\.f32/g)!.length);
    const relu = dotModule({
      rows: 1,
      transA: false,
      vec: true,
      withC: false,
      epilogue: { ...epilogue, activation: 'relu', z: false },
    }).emit();
    expect(relu).not.toContain('ex2');
    expect(relu.match(/st\.global/g)).toHaveLength(1);
  });

  it('names each epilogue in the key', () => {
    const keys = [...linearTiles.map(tileKey), ...linearRows.map(dotKey)];
    expect(new Set(keys).size).toBe(keys.length);
    expect(tileKey(linearTiles[1]!)).toBe('matmul/tile128x128x8_8x8/nt/v4/bias/none');
    expect(biasActivationKey('silu')).toBe('fused/biasActivationBackward/silu');
  });

  it('reads z only with an activation, and sums the warps through shared memory once', () => {
    const none = biasActivationModule('none').emit();
    expect(none.match(/ld\.global\.nc\.f32/g)).toHaveLength(1);
    const gelu = biasActivationModule('gelu').emit();
    expect(gelu.match(/ld\.global\.nc\.f32/g)).toHaveLength(2);
    expect(gelu.match(/bar\.sync 0;/g)).toHaveLength(1);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`fused PTX assembles with ptxas, without spills (${gate.reason})`, () => {
  it('every row count, layout and norm, over f32 and half storage', () => {
    expectAllAssembleCleanly(
      [...variants, ...halfVariants].flatMap((v) => archJobs(fusedModule(v).emit(), fusedKey(v))),
    );
  });

  it('linear: the tiles, the dot kernel and the split-K sum with every epilogue, and the backward', () => {
    expectAllAssembleCleanly([
      ...linearTiles.flatMap((v) => archJobs(tileModule(v).emit(), tileKey(v))),
      ...linearRows.flatMap((v) => archJobs(dotModule(v).emit(), dotKey(v))),
      ...epilogues.flatMap((e) => archJobs(splitSumModule(false, e).emit(), splitSumKey(false, e))),
      ...LINEAR_ACTIVATIONS.flatMap((a) =>
        (['f32', 'bf16'] as const).flatMap((type) =>
          archJobs(biasActivationModule(a, type).emit(), biasActivationKey(a, type)),
        ),
      ),
    ]);
  }, 300_000);
});

// One SM: a grid of a few blocks, long loops over K, and more rows than one
// block takes (blockIdx.y steps through them).
describe('gateUpSwiglu on a one-SM emulated device', () => {
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 1 });
  const uniform = seededUniform(11, -1, 1);
  const random = (n: number) => Float32Array.from({ length: n }, uniform);
  /** `spec` on fresh random inputs of `shapes`, run on the emulated gpu and on the reference. */
  const runBoth = <A extends AttrValues>(
    spec: KernelSpec<A>,
    shapes: readonly number[][],
    attrs?: Partial<A>,
  ) => {
    const data = shapes.map((s) => random(s.reduce((a, b) => a * b, 1)));
    const got = gpu.run(
      spec,
      data.map((d, i) => gpu.upload(d, shapes[i]!)),
      attrs,
    ) as Tensor[];
    const want = cpu.run(
      spec,
      data.map((d, i) => cpu.upload(d, shapes[i]!)),
      attrs,
    );
    return { got, want };
  };

  // One SM: long row loops in the backward, split K in the forward, the bias
  // along the rows of a transposed streaming product (N small, M large).
  for (const [m, k, n, activation] of [
    [40, 1030, 24, 'gelu'],
    [130, 61, 7, 'silu'],
    [2, 515, 33, 'tanh'],
  ] as const) {
    it(`linear ${m}×${k}→${n} ${activation} and its backward`, async () => {
      const { got, want } = runBoth(linear, [[m, k], [n, k], [n]], { activation, preActivation: true });
      await expectOutputsClose(got, want, { rtol: 1e-4, atol: 5e-5 * Math.sqrt(k) });
      const dy = random(m * n);
      const z = await want[1]!.read();
      const back = gpu.run(biasActivationBackward, [gpu.upload(dy, [m, n]), gpu.upload(z, [m, n])], {
        activation,
      }) as Tensor[];
      const ref = cpu.run(biasActivationBackward, [cpu.upload(dy, [m, n]), cpu.upload(z, [m, n])], {
        activation,
      });
      await expectOutputsClose(back, ref, { rtol: 1e-4, atol: 2e-5 * Math.sqrt(m) });
    });
  }

  for (const [m, k, n, norm] of [
    [1, 4096, 37, true],
    [1, 1027, 29, false],
    [11, 516, 19, true],
  ] as const) {
    it(`${m}×${k}→${n}${norm ? ' rmsNorm' : ''}`, async () => {
      const first = fake.launches.length;
      const { got, want } = runBoth(gateUpSwiglu, [[m, k], [n, k], [n, k], ...(norm ? [[k]] : [])]);
      await expectOutputsClose(got, want, { rtol: 1e-4, atol: 4e-5 * k });
      // One launch, whatever M.
      expect(fake.launches.length - first).toBe(1);
    });
  }

  for (const [m, k, n] of [
    [1, 4096, 41],
    [13, 260, 17],
  ] as const) {
    it(`rmsNormMatmul ${m}×${k}→${n}`, async () => {
      const { got, want } = runBoth(rmsNormMatmul, [[m, k], [k], [n, k]]);
      await expectOutputsClose(got, want, { rtol: 1e-4, atol: 5e-5 * Math.sqrt(k) });
    });
  }

  // Column splits inside a block and across blocks (8 columns a block), a
  // weight of one row, K with and without .v4, M past a block's rows.
  for (const [m, k, ns] of [
    [1, 4096, [37, 9, 9]],
    [1, 1027, [5, 1, 3]],
    [13, 260, [17, 8, 1]],
    [3, 131, [11, 6]],
    [2, 64, [7]],
  ] as const) {
    it(`rmsNormMatmul3 ${m}×${k}→${ns.join('+')}`, async () => {
      const shapes: number[][] = [[m, k], [k], ...ns.map((n) => [n, k])];
      const data = shapes.map((s) => random(s.reduce((a, b) => a * b, 1)));
      const first = fake.launches.length;
      const outs = ns.map((n) =>
        gpu.upload(
          Float32Array.from({ length: m * n }, () => Number.NaN),
          [m, n],
        ),
      );
      gpu.run(
        rmsNormMatmul3,
        data.map((d, i) => gpu.upload(d, shapes[i]!)),
        {},
        { out: outs },
      );
      expect(fake.launches.length - first).toBe(1);
      const want = cpu.run(
        rmsNormMatmul3,
        data.map((d, i) => cpu.upload(d, shapes[i]!)),
      );
      expect(want).toHaveLength(ns.length);
      await expectOutputsClose(outs, want, { rtol: 1e-4, atol: 5e-5 * Math.sqrt(k) });
    });
  }

  // Half weights under f32 activations, the decode case: 8 halves per load
  // (K a multiple of 8, up to 4 rows), 4 past that, element by element otherwise.
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const [m, k, n] of [
      [1, 512, 19],
      [3, 264, 9],
      [11, 136, 10],
      [2, 131, 7],
    ] as const) {
      it(`gateUpSwiglu and rmsNormMatmul3 ${m}×${k}→${n}, ${dtype} weights`, async () => {
        const x = random(m * k);
        const norm = random(k);
        const weights = [random(n * k), random(n * k), random(n * k)];
        const upload = (b: typeof gpu | typeof cpu) => [
          b.upload(x, [m, k]),
          b.upload(norm, [k]),
          ...weights.map((w) => b.upload([...w], [n, k], dtype)),
        ];
        const [gx, gn, gw0, gw1, gw2] = upload(gpu);
        const [cx, cn, cw0, cw1, cw2] = upload(cpu);
        const tolerance = { rtol: 1e-4, atol: 5e-5 * Math.sqrt(k) };
        const [y] = gpu.run(gateUpSwiglu, [gx!, gw0!, gw1!, gn!]) as Tensor[];
        const [want] = cpu.run(gateUpSwiglu, [cx!, cw0!, cw1!, cn!]);
        expect(compareOutputs('f32', await y!.read(), await want!.read(), tolerance)).toBeUndefined();
        const got3 = gpu.run(rmsNormMatmul3, [gx!, gn!, gw0!, gw1!, gw2!]) as Tensor[];
        const want3 = cpu.run(rmsNormMatmul3, [cx!, cn!, cw0!, cw1!, cw2!]);
        await expectOutputsClose(got3, want3, tolerance);
      });
    }
  }
});
