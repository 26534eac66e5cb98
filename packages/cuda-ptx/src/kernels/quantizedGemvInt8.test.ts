import {
  type Backend,
  dequantizeWeights,
  type QuantFormat,
  type QuantizedHostWeight,
  quantizedMatmul,
  quantizeWeights,
  quantLayout,
  runQuantizedMatmul,
  uploadQuantized,
} from '@rayo/core';
import { int8ProductError, readNumbers, runQuantizedProduct } from '@rayo/core/testing';
import { createEmulatedGpu, expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { seededArrays } from '../../testing/quantizedMatmul.js';
import { cudaOptionsFromEnvironment } from '../environment.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { QGEMV_ENTRY } from './quantizedGemv.js';
import {
  deepestFor,
  persistentShape,
  QGEMV_INT8_ENTRY,
  QGEMV_INT8_FORMATS,
  type QgemvInt8Config,
  qgemvInt8Columns,
  qgemvInt8Key,
  qgemvInt8Module,
} from './quantizedGemvInt8.js';

/** Σ_k w(n, k) · x(r, k) in f64, and Σ |w · x| (the scale of f32 rounding). */
function products(w: Float64Array, x: Float64Array, m: number, k: number, n: number) {
  const y = new Float64Array(m * n);
  const magnitude = new Float64Array(m * n);
  for (let r = 0; r < m; r++)
    for (let j = 0; j < n; j++) {
      let sum = 0;
      let size = 0;
      for (let i = 0; i < k; i++) {
        const t = w[j * k + i]! * x[r * k + i]!;
        sum += t;
        size += Math.abs(t);
      }
      y[r * n + j] = sum;
      magnitude[r * n + j] = size;
    }
  return { y, magnitude };
}

describe('int8 quantized GEMV', () => {
  it('is a backend switch the environment can name, off by default', () => {
    const plain = createEmulatedGpu();
    expect(plain.gpu.tuning.qgemvActivations).toBeUndefined();
    plain.dispose();
    const int8 = createEmulatedGpu({ tuning: { qgemvActivations: 'int8' } });
    expect(int8.gpu.tuning.qgemvActivations).toBe('int8');
    int8.dispose();
    expect(cudaOptionsFromEnvironment({ RAYO_QGEMV_ACTIVATIONS: 'int8' })).toEqual({
      qgemvActivations: 'int8',
    });
    expect(() => cudaOptionsFromEnvironment({ RAYO_QGEMV_ACTIVATIONS: 'i8' })).toThrow(
      /RAYO_QGEMV_ACTIVATIONS/,
    );
    expect(cudaOptionsFromEnvironment({ RAYO_QGEMV_PERSISTENT: 'off' })).toEqual({ qgemvPersistent: 'off' });
    expect(() => cudaOptionsFromEnvironment({ RAYO_QGEMV_PERSISTENT: '0' })).toThrow(/RAYO_QGEMV_PERSISTENT/);
    expect(cudaOptionsFromEnvironment({ RAYO_QGEMV_DEPTH: '3' })).toEqual({ qgemvDepth: 3 });
    expect(cudaOptionsFromEnvironment({ RAYO_QGEMV_BLOCKS_PER_SM: '3' })).toEqual({ qgemvBlocksPerSm: 3 });
    expect(() => cudaOptionsFromEnvironment({ RAYO_QGEMV_BLOCKS_PER_SM: '5' })).toThrow(
      /RAYO_QGEMV_BLOCKS_PER_SM/,
    );
    expect(() => cudaOptionsFromEnvironment({ RAYO_QGEMV_DEPTH: '4' })).toThrow(/RAYO_QGEMV_DEPTH/);
    const wrong = { qgemvActivations: 'int4' } as unknown as { qgemvActivations: 'int8' };
    expect(() => createEmulatedGpu({ tuning: wrong })).toThrow(/'qgemvActivations'/);
  });

  it("runs where a call's activations allow int8, unless the switch forces exact f32", async () => {
    const weight = quantizeWeights(
      Float32Array.from({ length: 9 * 256 }, (_, i) => Math.sin(i) * 0.05),
      [9, 256],
      'q4k',
    );
    const x = Float32Array.from({ length: 256 }, (_, i) => Math.cos(i * 0.7));
    for (const [tuning, activations, int8] of [
      [{}, 'int8', true],
      [{}, 'exact', false],
      [{ qgemvActivations: 'f32' }, 'int8', false],
      [{ qgemvActivations: 'int8' }, 'exact', true],
    ] as const) {
      const { fake, gpu, dispose } = createEmulatedGpu({ multiprocessors: 1, tuning });
      try {
        const w = uploadQuantized(gpu, weight);
        using xs = gpu.upload(x, [1, 256]);
        const first = fake.launches.length;
        const inputs = [xs, w.packed, w.scales, w.zeros, undefined, w.offsets];
        using y = gpu.run(quantizedMatmul, inputs, { format: 'q4k', activations })[0]!;
        await y.read();
        const entries = fake.launches.slice(first).map((l) => l.entry);
        expect(entries.includes(QGEMV_INT8_ENTRY), `${JSON.stringify(tuning)} ${activations}`).toBe(int8);
      } finally {
        dispose();
      }
    }
  });

  it('sums codes with dp4a from x in shared memory, the next step loaded before this one is used', () => {
    const base: QgemvInt8Config = {
      format: 'q4g32',
      pair: false,
      withC: false,
      types: { act: 'f32', scale: 'f16' },
      rows: 1,
      stagedX: true,
      cols: 2,
      slices: 1,
      persistent: false,
      blocksPerSm: 0,
      depth: 1,
      prefetch: false,
      earlyLoads: false,
      triggerDependents: false,
      norm: false,
    };
    const text = qgemvInt8Module(base).emit();
    // Two columns' 16 bytes before the loop and in it; two dp4a per code word and column; no
    // predicated weight loads (a chunk past K reads the row's last).
    expect(text.match(/ld\.global\.nc\.v4\.b32/g)).toHaveLength(2 * 2);
    expect(text).not.toMatch(/@%p\d+ ld\.global/);
    expect(text.match(/dp4a\.u32\.s32/g)).toHaveLength(2 * 4 * 2);
    // The high nibbles masked in place, the low nibbles' sum times 16 before them.
    expect(text).toContain('and.b32');
    expect(text).toMatch(/-252645136|0xf0f0f0f0|4042322160/);
    // A ring of D sets: D − 1 loads before the loop, D in it, and D steps' sums a turn.
    for (const depth of [2, 3] as const) {
      const ring = qgemvInt8Module({ ...base, depth }).emit();
      expect(ring.match(/ld\.global\.nc\.v4\.b32/g)).toHaveLength((2 * depth - 1) * 2);
      expect(ring.match(/dp4a\.u32\.s32/g)).toHaveLength(depth * 2 * 4 * 2);
      expect(ring).not.toMatch(
        /mov\.b32\s+%r\d+, %r\d+;\n\s+mov\.b32\s+%r\d+, %r\d+;\n\s+mov\.b32\s+%r\d+, %r\d+;\n\s+mov\.b32\s+%r\d+, %r\d+;/,
      );
      expect(qgemvInt8Key({ ...base, depth })).not.toBe(qgemvInt8Key(base));
    }
    expect(deepestFor(2, 0)).toBe(3);
    expect(deepestFor(2, 4)).toBe(2);
    expect(deepestFor(4, 2)).toBe(2);
    expect(deepestFor(8, 0)).toBe(1);
    expect(() => qgemvInt8Module({ ...base, cols: 4, depth: 3 })).toThrow(/depth/);
    // Blocked kernels asked to fit 3 blocks an SM carry the bound that caps their registers.
    const capped = qgemvInt8Module({ ...base, blocksPerSm: 3 }).emit();
    expect(capped).toMatch(/\.minnctapersm 3/);
    expect(text).not.toMatch(/\.minnctapersm/);
    expect(qgemvInt8Key({ ...base, blocksPerSm: 3 })).not.toBe(qgemvInt8Key(base));
    expect(text.match(/ld\.shared\.v4\.b32/g)).toHaveLength(2);
    expect(text).toContain('cvt.rni.s32.f32');
    // Staged, x comes into shared memory by cp.async; else element by element.
    expect(text.match(/cp\.async\.cg\.shared\.global/g)).toHaveLength(1);
    expect(qgemvInt8Module({ ...base, stagedX: false }).emit()).not.toContain('cp.async');
    expect(
      qgemvInt8Module({ ...base, format: 'q8g32' })
        .emit()
        .match(/dp4a\.s32\.s32/g),
    ).toHaveLength(2 * 4);
    const keys = new Set(
      QGEMV_INT8_FORMATS.flatMap((format) =>
        [false, true].map((pair) => qgemvInt8Key({ ...base, format, pair })),
      ),
    );
    expect(keys.size).toBe(QGEMV_INT8_FORMATS.length * 2);
    expect(() => qgemvInt8Module({ ...base, format: 'q8g16' })).toThrow(/format/);
    // q6k's two high words a chunk in one load, q5k's one.
    expect(
      qgemvInt8Module({ ...base, format: 'q6k' })
        .emit()
        .match(/ld\.global\.nc\.v2\.b32/g),
    ).toHaveLength(2 * 2);
    expect(qgemvInt8Module({ ...base, format: 'q5k' }).emit()).not.toContain('ld.global.nc.v2.b32');
    // Prefetching: each warp's rows into L2, then the dependency wait, then x (blocked and persistent).
    for (const mode of [{}, { persistent: true, blocksPerSm: 2 }]) {
      const fetching = qgemvInt8Module({ ...base, ...mode, prefetch: true }).emit({ dependentLaunch: true });
      const first = (what: string) => fetching.indexOf(what);
      expect(fetching.match(/griddepcontrol\.wait;/g)).toHaveLength(1);
      expect(first('prefetch.global.L2')).toBeGreaterThan(0);
      expect(first('prefetch.global.L2')).toBeLessThan(first('griddepcontrol.wait;'));
      expect(first('ld.global.nc.v4.b32')).toBeLessThan(first('griddepcontrol.wait;'));
      expect(first('griddepcontrol.wait;')).toBeLessThan(first('cp.async'));
      expect(qgemvInt8Module({ ...base, ...mode, prefetch: true }).emit()).not.toContain('griddepcontrol');
    }
    // Early loads: the first codes before the wait, without prefetches; a persistent kernel may trigger its dependents.
    for (const mode of [{}, { persistent: true, blocksPerSm: 2, triggerDependents: true }]) {
      const early = qgemvInt8Module({ ...base, ...mode, earlyLoads: true }).emit({
        dependentLaunch: true,
        earlyTrigger: true,
      });
      const first = (what: string) => early.indexOf(what);
      expect(early).not.toContain('prefetch');
      expect(early.match(/griddepcontrol\.wait;/g)).toHaveLength(1);
      expect(first('ld.global.nc.v4.b32')).toBeLessThan(first('griddepcontrol.wait;'));
      expect(first('griddepcontrol.wait;')).toBeLessThan(first('cp.async'));
      expect(early.includes('griddepcontrol.launch_dependents;')).toBe('persistent' in mode);
    }
    expect(qgemvInt8Key({ ...base, earlyLoads: true })).not.toBe(qgemvInt8Key(base));
    expect(() => qgemvInt8Module({ ...base, triggerDependents: true })).toThrow(/persistent/);
    const plain = qgemvInt8Module(base).emit({ dependentLaunch: true });
    expect(plain.indexOf('griddepcontrol.wait;')).toBeLessThan(plain.indexOf('ld.param'));
    expect(plain).not.toContain('prefetch');
    expect(qgemvInt8Key({ ...base, prefetch: true })).not.toBe(qgemvInt8Key(base));
    // A folded norm: x · normWeight quantized (its loads beside x's), each row's sums times 1 / sqrt(mean(x²) + eps).
    const normed = qgemvInt8Module({ ...base, norm: true }).emit();
    expect(normed).toContain('sqrt.rn.f32');
    expect(normed).toContain('rcp.rn.f32');
    expect(text).not.toContain('sqrt');
    expect(qgemvInt8Key({ ...base, norm: true })).not.toBe(qgemvInt8Key(base));
    expect(() => qgemvInt8Module({ ...base, rows: 5 })).toThrow(/rows/);
    expect(() => qgemvInt8Module({ ...base, pair: true, withC: true })).toThrow(/c/);
    expect(() => qgemvInt8Module({ ...base, pair: true, cols: 8, rows: 4 })).toThrow(/cols/);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(
  `int8 quantized GEMV PTX assembles with ptxas, without spills (${gate.reason})`,
  () => {
    it('every format, pair or single, row count, x layout and storage', () => {
      const types = [
        { act: 'f32', scale: 'f16' },
        { act: 'bf16', scale: 'bf16' },
        { act: 'f16', scale: 'f32' },
      ] as const;
      const jobs = QGEMV_INT8_FORMATS.flatMap((format) =>
        types.flatMap((t, i) =>
          // Rows 1 and 4 at the default columns, and one row of two columns (variant c: 2 sums a lane).
          ([1, 4, 'c'] as const).flatMap((shape) => {
            const rows = shape === 'c' ? 1 : shape;
            const pair = i === 2 && shape !== 'c';
            const forced = shape === 'c' ? shape : undefined;
            const v: QgemvInt8Config = {
              format,
              pair,
              withC: i === 0,
              types: t,
              rows,
              stagedX: rows === 1,
              cols: qgemvInt8Columns(forced, rows, pair, quantLayout(format, 1).bits),
              slices: rows === 1 ? 1 : 4,
              persistent: false,
              blocksPerSm: 0,
              depth: 1,
              prefetch: false,
              earlyLoads: false,
              triggerDependents: false,
              norm: i === 1,
            };
            // The persistent mode at the blocks per SM persistentShape gives it; both loops.
            const sums = v.cols * rows * (v.pair ? 2 : 1);
            const persistent = { ...v, slices: 1 as const, persistent: true, blocksPerSm: 2 };
            const deepest = deepestFor(sums, 0);
            const rings = ([2, 3] as const)
              .filter((depth) => depth <= deepest)
              .flatMap((depth) =>
                [v, persistent]
                  .filter((c) => depth <= deepestFor(sums, c.blocksPerSm))
                  .map((c) => ({ ...c, depth })),
              );
            // Prefetching (emitted for dependent launch, its only use) at the default depth, both modes.
            const fetching = [v, persistent].map((c) => ({
              ...c,
              depth: Math.min(2, deepestFor(sums, c.blocksPerSm)) as 1 | 2,
              prefetch: true,
            }));
            return [v, persistent, ...rings, ...fetching].map((c) => ({
              ptx: qgemvInt8Module(c).emit({ dependentLaunch: c.prefetch }),
              arch: 'sm_90',
              what: qgemvInt8Key(c),
            }));
          }),
        ),
      );
      expectAllAssembleCleanly(jobs);
    }, 600_000);
  },
);

// Through the PTX interpreter against x quantized the same way on the host, products in f64: odd N,
// K not a multiple of 32 or of a step, M 1–4, split K, pairs, beta·c, bf16 x.
describe('int8 quantized GEMV on an emulated device', () => {
  const random = seededArrays(23);
  const cases: [
    QuantFormat,
    number,
    number,
    number,
    { pair?: boolean; act?: 'bf16'; variant?: 'b' | 'c' | 'd' },
  ][] = [
    // Two columns a warp (variant c): one row keeps 2 sums a lane, so every depth runs, 3 included.
    ['q4k', 1, 4096, 19, { variant: 'c' }],
    ['q4g32', 1, 1000, 21, { variant: 'c' }],
    ['q6k', 1, 768, 9, { variant: 'c' }],
    ['q8g32', 1, 2048, 13, { variant: 'c' }],
    ['q4g32', 1, 4096, 19, {}],
    ['q4g32', 3, 200, 21, {}],
    ['q4g128', 2, 1000, 9, { variant: 'b' }],
    ['q8', 2, 515, 9, {}],
    ['q8g32', 1, 2048, 13, { variant: 'd' }],
    ['q8g32', 4, 96, 5, {}],
    ['q4g32a', 1, 999, 21, {}],
    ['q8g32a', 3, 1000, 7, {}],
    ['q4k', 1, 4096, 19, {}],
    ['q5k', 1, 4096, 19, {}],
    ['q5k', 3, 768, 6, { act: 'bf16' }],
    ['q6k', 1, 4096, 19, {}],
    ['q6k', 2, 768, 9, { variant: 'b' }],
    ['q5g32', 1, 352, 21, {}],
    ['q5g32', 3, 1000, 9, {}],
    ['q5g32a', 2, 4096, 13, {}],
    ['q5g32a', 1, 161, 7, { act: 'bf16' }],
    ['q4k', 4, 768, 6, { act: 'bf16' }],
    ['q4g32', 1, 1024, 11, { pair: true }],
    ['q4k', 2, 1024, 7, { pair: true }],
    ['q8g32a', 1, 1000, 9, { pair: true }],
  ];
  for (const [format, m, k, n, opts] of cases)
    for (const depth of [1, 2, 3] as const) {
      const what = `${opts.pair ? 'gate·up ' : ''}${format} ${m}×${k}→${n}${opts.act ? ` ${opts.act} x` : ''}${opts.variant ? ` variant ${opts.variant}` : ''}, depth ${depth}`;
      it(`${what} equals the product of x's int8 blocks`, async () => {
        // Depth 2 (the default) prefetches its rows too: every prefetched line lies in the weights;
        // depth 3 loads its first steps before the dependency wait.
        const tuning = {
          qgemvActivations: 'int8' as const,
          qgemvDepth: depth,
          ...(depth === 2
            ? { weightPrefetch: 'on' as const }
            : depth === 3
              ? { weightPrefetch: 'loads' as const }
              : {}),
          ...(opts.variant ? { qgemvVariant: opts.variant } : {}),
        };
        const { fake, gpu, dispose } = createEmulatedGpu({ multiprocessors: 2, tuning });
        try {
          // Depth 1 folds an rmsNorm in: still one launch.
          const run = await runInt8Case(gpu, fake, random, {
            format,
            m,
            k,
            n,
            pair: opts.pair === true,
            act: opts.act,
            norm: depth === 1,
          });
          expect(run.launched.map((l) => l.entry)).toEqual([QGEMV_INT8_ENTRY]);
          expect(fake.images.at(-1)!.includes('prefetch.global.L2')).toBe(depth === 2);
          if (opts.variant === 'c' && m === 1) {
            // Two columns' codes: before the loop and in it, (2D − 1) loads each for a ring of D sets.
            const loads = fake.images.at(-1)!.match(/ld\.global\.nc\.v4\.b32/g)!.length;
            expect(loads).toBe(2 * (depth === 1 ? 2 : 2 * depth - 1));
          }
          const { x, weights, xq, parts } = expectInt8Product(run);
          // And within the stated bound of the exact product: Σ over blocks of d/2 · Σ|w|.
          if (!opts.pair && !run.norm) {
            const exact = products(dequantizeWeights(weights[0]!), Float64Array.from(x), m, k, n);
            const w = dequantizeWeights(weights[0]!);
            const blocks = Math.ceil(k / 32);
            for (let r = 0; r < m; r++)
              for (let j = 0; j < n; j++) {
                let bound = 0;
                for (let b = 0; b < blocks; b++) {
                  let weight = 0;
                  for (let i = b * 32; i < Math.min(k, b * 32 + 32); i++) weight += Math.abs(w[j * k + i]!);
                  bound += (xq.d[r * blocks + b]! / 2) * weight;
                }
                const diff = Math.abs(parts[0]!.y[r * n + j]! - exact.y[r * n + j]!);
                expect(diff).toBeLessThanOrEqual(bound * (1 + 1e-9));
              }
          }
        } finally {
          dispose();
        }
      });
    }

  it('leaves zero points, other formats and a switch left off to the exact kernels', async () => {
    const random2 = seededArrays(5);
    for (const [format, zeroPoints, tuning, entry] of [
      ['q4g32', true, { qgemvActivations: 'int8' }, QGEMV_ENTRY],
      ['q4g32', false, {}, QGEMV_ENTRY],
      ['q4g32', false, { qgemvActivations: 'f32' }, QGEMV_ENTRY],
      ['q8g16', false, { qgemvActivations: 'int8' }, 'quantized_dot'],
    ] as const) {
      const { fake, gpu, dispose } = createEmulatedGpu({ multiprocessors: 2, tuning });
      try {
        const w = uploadQuantized(
          gpu,
          quantizeWeights(random2(9 * 256, 0.05), [9, 256], format, { zeroPoints }),
        );
        const first = fake.launches.length;
        runQuantizedMatmul(gpu, gpu.upload(random2(256), [1, 256]), w);
        expect(fake.launches.slice(first).map((l) => l.entry)).toEqual([entry]);
      } finally {
        dispose();
      }
    }
  });
});

// The persistent mode on a one-SM device: every warp takes several units of columns, the loads of a
// unit's first step issued during the last step of the one before; units past N and K tails.
describe('persistent int8 quantized GEMV on an emulated device', () => {
  const random = seededArrays(29);
  const cases: [QuantFormat, number, number, number, boolean, 'c'?][] = [
    // Two columns a warp: 2 sums a lane, so a ring of 3 sets runs too.
    ['q4k', 1, 768, 203, false, 'c'],
    ['q8g32', 1, 512, 150, false, 'c'],
    ['q4g32', 1, 1024, 200, false],
    ['q4k', 1, 768, 203, false],
    ['q8g32', 2, 1000, 301, false],
    ['q4g32a', 1, 200, 150, false],
    ['q4k', 1, 512, 150, true],
    ['q8', 3, 96, 260, false],
    ['q5k', 1, 512, 203, false],
    ['q6k', 2, 768, 150, false],
    ['q5g32', 1, 352, 150, false],
  ];
  for (const [format, m, k, n, pair, variant] of cases)
    for (const depth of [1, 2, 3] as const) {
      it(`${pair ? 'gate·up ' : ''}${format} ${m}×${k}→${n}${variant ? ` variant ${variant}` : ''}, depth ${depth}: all resident blocks, the product of x's int8 blocks`, async () => {
        const tuning = {
          qgemvActivations: 'int8' as const,
          qgemvPersistent: 'on' as const,
          qgemvDepth: depth,
          ...(depth === 2
            ? { weightPrefetch: 'on' as const }
            : depth === 3
              ? { weightPrefetch: 'chain' as const }
              : {}),
          ...(variant ? { qgemvVariant: variant } : {}),
        };
        const { fake, gpu, dispose } = createEmulatedGpu({ multiprocessors: 1, tuning });
        try {
          const run = await runInt8Case(gpu, fake, random, {
            format,
            m,
            k,
            n,
            pair,
            act: undefined,
            norm: depth === 1,
          });
          expect(run.launched.map((l) => l.entry)).toEqual([QGEMV_INT8_ENTRY]);
          expect(fake.images.at(-1)!.includes('prefetch.global.L2')).toBe(depth === 2);
          const shape = persistentShape(
            n,
            qgemvInt8Columns(variant, Math.min(m, 4), pair, quantLayout(format, 1).bits),
            1,
            8,
          );
          expect(shape).toBeDefined();
          expect(run.launched[0]!.grid[0]).toBe(shape!.blocks);
          expectInt8Product(run);
        } finally {
          dispose();
        }
      });
    }

  it('takes the blocked mode where N is too narrow to keep every resident warp busy, or where asked', async () => {
    expect(persistentShape(100, 4, 132, 8)).toBeUndefined();
    // Llama-3.1-8B's gate·up in q4k: 2 columns a warp, 2 blocks an SM, 7,168 units over 2,112 warps.
    expect(persistentShape(14336, 2, 132, 8)).toEqual({ blocksPerSm: 2, blocks: 264 });
    // Asked for 3 blocks an SM (qgemvBlocksPerSm).
    expect(persistentShape(14336, 2, 132, 8, 3)).toEqual({ blocksPerSm: 3, blocks: 396 });
    // Shared memory for one block only.
    expect(persistentShape(14336, 2, 132, 1.5)).toEqual({ blocksPerSm: 1, blocks: 132 });
    // 2,752 units over 2,112 warps: the second round leaves most of them idle.
    expect(persistentShape(11008, 4, 132, 8)).toBeUndefined();
    const tuning = { qgemvActivations: 'int8' as const, qgemvPersistent: 'off' as const };
    const { fake, gpu, dispose } = createEmulatedGpu({ multiprocessors: 1, tuning });
    try {
      const w = uploadQuantized(gpu, quantizeWeights(random(200 * 256, 0.05), [200, 256], 'q4g32'));
      const first = fake.launches.length;
      runQuantizedMatmul(gpu, gpu.upload(random(256), [1, 256]), w);
      // Blocked: 4 columns a warp, 8 warps a block.
      expect(fake.launches.slice(first).map((l) => l.grid[0])).toEqual([Math.ceil(200 / 32)]);
    } finally {
      dispose();
    }
  });
});

interface Int8Case {
  readonly launched: readonly { readonly entry: string; readonly grid: readonly number[] }[];
  readonly got: Float64Array;
  /** x and c as the device holds them (bf16 rounds). */
  readonly x: Float64Array;
  readonly c: Float64Array;
  readonly weights: QuantizedHostWeight[];
  readonly shape: { readonly m: number; readonly k: number; readonly n: number; readonly pair: boolean };
  readonly act: 'bf16' | undefined;
  /** The folded norm's weight as the device holds it, and eps. */
  readonly norm: { readonly weight: Float64Array; readonly eps: number } | undefined;
}

/** y = x·Wᵀ + 0.5·c, or a gate·up pair, of random weights on the emulated device, with what it launched. */
async function runInt8Case(
  gpu: Backend,
  fake: { readonly launches: readonly { readonly entry: string; readonly grid: readonly number[] }[] },
  random: (n: number, scale?: number) => Float32Array,
  o: {
    format: QuantFormat;
    m: number;
    k: number;
    n: number;
    pair: boolean;
    act: 'bf16' | undefined;
    norm?: boolean;
  },
): Promise<Int8Case> {
  const { format, m, k, n, pair, act } = o;
  const weights = (pair ? [0, 1] : [0]).map(() => quantizeWeights(random(n * k, 0.05), [n, k], format));
  const first = fake.launches.length;
  // A norm weight around 1 (random of either sign otherwise), eps as Llama 3's.
  const norm = o.norm ? { weight: Float32Array.from(random(k), (v) => 1 + v), eps: 1e-5 } : undefined;
  const run = runQuantizedProduct(gpu, {
    x: random(m * k),
    c: random(m * n),
    weights,
    m,
    dtype: act ?? 'f32',
    ...(norm ? { norm } : {}),
  });
  try {
    return {
      launched: fake.launches.slice(first),
      got: await readNumbers(run.out),
      x: await readNumbers(run.inputs.x),
      c: await readNumbers(run.inputs.c),
      weights,
      shape: { m, k, n, pair },
      act,
      norm: run.inputs.normWeight
        ? { weight: await readNumbers(run.inputs.normWeight), eps: norm!.eps }
        : undefined,
    };
  } finally {
    run.dispose();
  }
}

/**
 * Checks a case against the product of x's int8 blocks (core's
 * int8ProductError) within f32 rounding (bf16 y rounds once more); returns
 * the blocks and the f64 sums for further checks.
 */
function expectInt8Product(run: Int8Case) {
  const { worst, at, blocks, sums } = int8ProductError(run.got, {
    x: run.x,
    c: run.c,
    weights: run.weights,
    m: run.shape.m,
    share: run.act ? 2 ** -8 : 4e-6,
    ...(run.norm ? { norm: run.norm } : {}),
  });
  if (!(worst <= 1)) expect.fail(`y[${at}] = ${run.got[at]}: ${worst} times its bound from the int8 product`);
  return { x: run.x, weights: run.weights, xq: blocks, parts: sums.map((y) => ({ y })) };
}
