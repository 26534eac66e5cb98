import {
  GATE_UP_FORMATS,
  InvalidArgumentError,
  isGateUpFormat,
  QGEMV_SHAPES,
  QGEMV_VARIANTS,
  type QgemvSlices,
  QUANT_FORMATS,
} from '@rayo/core';
import { compareOutputs, conformanceSuite, runChecks, sampleConformance } from '@rayo/core/testing';
import {
  type AssemblyJob,
  createEmulatedGpu,
  expectAllAssembleCleanly,
  useEmulatedGpu,
} from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { quantizedMatmulProblem, seededArrays } from '../../testing/quantizedMatmul.js';
import { cudaOptionsFromEnvironment } from '../environment.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { QUANT_DOT_ENTRY } from './quantizedCodes.js';
import {
  QGEMV_ENTRY,
  type QgemvConfig,
  qgemvKey,
  qgemvModule,
  qgemvReads,
  unrollOf,
} from './quantizedGemv.js';

const base: QgemvConfig = {
  format: 'q4g32',
  zeros: false,
  withC: false,
  pair: false,
  types: { act: 'f32', scale: 'f16' },
  rows: 1,
  vecX: true,
  cols: 4,
  words: 1,
  slices: 4,
};

describe('quantized GEMV', () => {
  it('takes its variant and split from the backend options, which the environment can name', () => {
    expect(createEmulatedGpu().gpu.tuning).toEqual({
      qgemvVariant: undefined,
      qgemvSlices: undefined,
      qgemvMma: undefined,
    });
    const tuned = createEmulatedGpu({ tuning: { qgemvVariant: 'd', qgemvSlices: 2, qgemvMma: 'on' } });
    expect(tuned.gpu.tuning).toEqual({ qgemvVariant: 'd', qgemvSlices: 2, qgemvMma: 'on' });
    tuned.dispose();
    const variant = { qgemvVariant: 'z' } as unknown as { qgemvVariant: 'a' };
    expect(() => createEmulatedGpu({ tuning: variant })).toThrow(InvalidArgumentError);
    expect(() => createEmulatedGpu({ tuning: variant })).toThrow(
      /CudaBackend\.create: argument 'qgemvVariant'/,
    );
    const slices = { qgemvSlices: 3 } as unknown as { qgemvSlices: 1 };
    expect(() => createEmulatedGpu({ tuning: slices })).toThrow(/'qgemvSlices'.*got 3/);
    expect(cudaOptionsFromEnvironment({ RAYO_QGEMV_VARIANT: 'd', RAYO_QGEMV_SLICES: '4' })).toEqual({
      qgemvVariant: 'd',
      qgemvSlices: 4,
    });
    expect(cudaOptionsFromEnvironment({ RAYO_QGEMV_VARIANT: '' })).toEqual({});
    expect(cudaOptionsFromEnvironment({ RAYO_QGEMV_MMA: 'on' })).toEqual({ qgemvMma: 'on' });
    expect(() => cudaOptionsFromEnvironment({ RAYO_QGEMV_MMA: 'yes' })).toThrow(/RAYO_QGEMV_MMA/);
    const mma = { qgemvMma: true } as unknown as { qgemvMma: 'on' };
    expect(() => createEmulatedGpu({ tuning: mma })).toThrow(/'qgemvMma'/);
    expect(() => cudaOptionsFromEnvironment({ RAYO_QGEMV_VARIANT: 'z' })).toThrow(/RAYO_QGEMV_VARIANT/);
  });

  it('loads codes coalesced and x from global memory, with one barrier and no convert per code', () => {
    const text = qgemvModule(base).emit();
    const unroll = unrollOf(base);
    expect(unroll).toBe(4);
    // C columns × U steps of one u32 word per lane, in the loop.
    expect(text.match(/ld\.global\.nc\.b32/g)).toHaveLength(base.cols * unroll);
    expect(text.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(2 * unroll);
    expect(text.match(/bar\.sync 0;/g)).toHaveLength(1);
    expect(text).not.toContain('cvt.rn.f32.u32');
    expect(text.match(/st\.global/g)).toHaveLength(1);
    const v2 = qgemvModule({ ...base, cols: 2, words: 2, format: 'q8' }).emit();
    expect(v2).toContain('ld.global.nc.v2.b32');
  });

  it('names every configuration in the key and refuses what it cannot take', () => {
    const keys = new Set<string>();
    for (const format of ['q8', 'q4g32', 'q4g128'] as const)
      for (const pair of [false, true])
        for (const rows of [1, 2, 3, 4])
          for (const slices of [1, 2, 4, 8] as const)
            keys.add(qgemvKey({ ...base, format, pair, rows, slices }));
    expect(keys.size).toBe(3 * 2 * 4 * 4);
    expect(() => qgemvModule({ ...base, rows: 5 })).toThrow(/rows/);
    expect(() => qgemvModule({ ...base, format: 'q8', zeros: true })).toThrow(/zero points/);
    expect(() => qgemvModule({ ...base, pair: true, withC: true })).toThrow(/c/);
    expect(() => qgemvModule({ ...base, cols: 9, rows: 4 })).toThrow(/cols/);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`quantized GEMV PTX assembles with ptxas, without spills (${gate.reason})`, () => {
  it('every variant, format, row count, x layout and storage', () => {
    const jobs: AssemblyJob[] = [];
    const types = [
      { act: 'f32', scale: 'f16' },
      { act: 'bf16', scale: 'bf16' },
      { act: 'f16', scale: 'f32' },
    ] as const;
    for (const shape of Object.values(QGEMV_SHAPES)) {
      for (const format of ['q8', 'q4g32', 'q4g128'] as const) {
        for (const [i, t] of types.entries()) {
          for (const rows of [1, 4]) {
            const zeros = format !== 'q8' && i === 1;
            const pair = i === 2;
            const v: QgemvConfig = { ...base, ...shape, format, zeros, pair, withC: !pair, types: t, rows };
            if (v.cols * rows > 32) continue;
            for (const arch of ['sm_90', DEFAULT_TARGET]) {
              jobs.push({ ptx: qgemvModule(v).emit(), arch, what: `${qgemvKey(v)} ${arch}` });
            }
            const scalar = { ...v, vecX: false, slices: 8 as const };
            jobs.push({ ptx: qgemvModule(scalar).emit(), arch: 'sm_90', what: qgemvKey(scalar) });
          }
        }
      }
    }
    // The gate·up pair's other formats: group scales of 8-bit codes, offsets and Σ x, q4k's sub-blocks.
    for (const format of ['q8g32', 'q8g16', 'q4g32a', 'q8g32a', 'q4k'] as const) {
      for (const shape of Object.values(QGEMV_SHAPES)) {
        for (const t of types) {
          for (const rows of [1, 4]) {
            const v: QgemvConfig = {
              ...base,
              ...shape,
              format,
              zeros: false,
              pair: true,
              withC: false,
              types: t,
              rows,
            };
            if (v.cols * rows > 32) continue;
            jobs.push({ ptx: qgemvModule(v).emit(), arch: 'sm_90', what: qgemvKey(v) });
          }
        }
      }
    }
    expectAllAssembleCleanly(jobs);
  }, 600_000);
});

// Every variant through the PTX interpreter, on shapes the kernel treats specially: N not a
// multiple of the columns per block, K not a multiple of the group or of a step, split K, M 1–4.
describe('quantized GEMV variants on an emulated device', () => {
  const { cpu } = useEmulatedGpu();
  const random = seededArrays(11);
  const shapes = [
    ['q4g32', false, 1, 4096, 19],
    ['q4g128', true, 3, 1000, 21],
    ['q8', false, 2, 515, 9],
    ['q4g32', true, 4, 96, 67],
    ['q4g32', false, 1, 200, 5],
    ['q8', false, 4, 2048, 3],
    // Eight warps split K.
    ['q8', false, 1, 8192, 3],
  ] as const;
  const cases = [
    ...QGEMV_VARIANTS.flatMap((variant) => shapes.map((shape) => [variant, undefined, shape] as const)),
    // Eight slices forced on rows of one or two steps: warps with no step of K add nothing.
    ...(['b', 'c'] as const).map((variant) => [variant, 8, ['q4g32', true, 2, 200, 13]] as const),
  ];
  for (const [variant, slices, shape] of cases) {
    const [format, zeroPoints, m, k, n] = shape;
    it(`${variant}${slices ? ` slices ${slices}` : ''}: ${format}${zeroPoints ? ' zero points' : ''} ${m}×${k}→${n}`, async () => {
      const tuning = { qgemvVariant: variant, ...(slices ? { qgemvSlices: slices as QgemvSlices } : {}) };
      const { fake, gpu, dispose } = createEmulatedGpu({ multiprocessors: 2, tuning });
      try {
        const run = quantizedMatmulProblem(random, shape);
        const first = fake.launches.length;
        const got = run(gpu);
        const launched = fake.launches.slice(first);
        expect(launched.map((l) => l.entry)).toEqual([variant === 'a' ? QUANT_DOT_ENTRY : QGEMV_ENTRY]);
        // A forced split gives each block 8 / slices warps of C columns.
        if (variant !== 'a' && slices) {
          expect(launched[0]!.grid[0]).toBe(Math.ceil(n / ((QGEMV_SHAPES[variant].cols * 8) / slices)));
        }
        const want = run(cpu);
        expect(
          compareOutputs('f32', await got.read(), await want.read(), {
            rtol: 1e-4,
            atol: 2e-5 * Math.sqrt(k),
          }),
        ).toBeUndefined();
      } finally {
        dispose();
      }
    });
  }
});

// The conformance cases of both quantized specs (half dtypes, batches and error cases included)
// through the PTX interpreter, once per variant.
describe('quantized conformance cases on an emulated device', () => {
  const full = process.env.RAYO_FULL_CONFORMANCE === '1';
  for (const variant of QGEMV_VARIANTS) {
    it(`variant ${variant}`, async () => {
      const suite = conformanceSuite({
        create: () => createEmulatedGpu({ multiprocessors: 2, tuning: { qgemvVariant: variant } }).gpu,
      });
      try {
        // Cases of more than 4 rows of quantizedMatmul take the tiled kernel whatever the variant
        // (quantized.test.ts runs it); the interpreter is slow enough to leave them out here.
        // The variants differ in their shape, not in how they load half storage: here they take
        // the f32 cases (minutes fewer in the interpreter); the whole suite, half cases included,
        // runs with the default choice in emulated.test.ts. So do the cases no variant changes:
        // quantizedEmbedding, the formats this file's kernel does not read (the dot kernel takes
        // them whatever the variant) and the error cases (refused before any kernel is picked).
        const tiled = /^quantizedMatmul .*\b([5-9]|\d{2,})×/;
        const half = /\((b?f16)\b/;
        const kernels = ['quantizedMatmul', 'quantizedGateUpSwiglu'];
        const formatOf = (variant: string) => /\bformat=(\S+)/.exec(variant)?.[1] ?? '';
        // Every format of 8- or 4-bit codes: a variant asked for takes single products of all of them.
        const readHere = (_kernel: string, format: string) => isGateUpFormat(format);
        const checks = suite.checks.filter(
          (c) =>
            c.group === 'quantized' &&
            c.kernelCase !== undefined &&
            kernels.includes(c.kernelCase.kernel) &&
            readHere(c.kernelCase.kernel, formatOf(c.kernelCase.variant)) &&
            !tiled.test(c.name) &&
            !half.test(c.name),
        );
        const covered = new Set(
          checks.map((c) => `${c.kernelCase!.kernel} ${formatOf(c.kernelCase!.variant)}`),
        );
        expect([...covered].sort()).toEqual(
          [
            ...QUANT_FORMATS.filter(qgemvReads).map((f) => `quantizedMatmul ${f}`),
            ...GATE_UP_FORMATS.map((f) => `quantizedGateUpSwiglu ${f}`),
          ].sort(),
        );
        // By default one case of every kernel × variant (format, dtypes) per GEMV variant, a
        // small one, as in emulated.test.ts (the shapes above are those the variants treat
        // specially); RAYO_FULL_CONFORMANCE=1 runs them all.
        const chosen = full ? checks : sampleConformance(checks, 'variant', 'small').checks;
        const summary = await runChecks(chosen);
        expect(summary.failures).toEqual([]);
      } finally {
        await suite.teardown();
      }
    }, 600_000);
  }
});
