import {
  type Backend,
  createCpuBackend,
  type QuantFormat,
  quantizedMatmul,
  quantizeWeights,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import { compareOutputs, int8ProductError, Rng, readNumbers, runQuantizedProduct } from '@rayo/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { dawnGpu } from '../dawn.js';
import { backendProvider, createWgpuBackend, WgpuBackend } from '../index.js';
import type { KernelEncoder } from '../kernel.js';
import { quantColumnsFor, quantStreamShader, residentWordsFor } from './quantized.js';
import { streamsInt8 } from './quantizedStreamInt8.js';

describe('the streaming quantized shader with several columns a group', () => {
  it('reads each word of x from the tile once for all its columns', () => {
    for (const format of ['q4k', 'q6k', 'q8', 'q5g32'] as const) {
      const one = quantStreamShader({
        format,
        rows: 1,
        vecX: true,
        norm: false,
        subgroups: true,
        cols: 1,
        int8: false,
      });
      const four = quantStreamShader({
        format,
        rows: 1,
        vecX: true,
        norm: false,
        subgroups: true,
        cols: 4,
        int8: false,
      });
      expect(four.key).toBe(`quantized/stream/m1/v4/c4/subgroups/${format}`);
      expect(one.key).toBe(`quantized/stream/m1/v4/subgroups/${format}`);
      const code = four.code();
      expect(code.match(/let xa0 = xt\[/g)).toHaveLength(1);
      for (const c of [0, 1, 2, 3]) {
        expect(code).toContain(`let next_wv${c} = word_of(wRow${c}, chunks, next);`);
        expect(code).toContain(`acc0_${c} += subgroupShuffleXor(acc0_${c}, o);`);
        expect(code).toContain(`if (col${c} < params.n)`);
      }
    }
  });

  it('on int8 activations, stage each tile as packed int8 blocks and sum by dot4I8Packed', () => {
    for (const format of ['q4k', 'q4g32', 'q8g32', 'q8'] as const) {
      const v = { format, rows: 1, vecX: true, norm: true, subgroups: true, cols: 2, int8: true } as const;
      const shader = quantStreamShader(v);
      expect(shader.key).toBe(`quantized/stream/m1/v4/c2/int8/norm/subgroups/${format}`);
      const code = shader.code();
      expect(code).toContain('pack4xI8(');
      expect(code).toContain('dot4I8Packed(');
      expect(code).toContain('var<workgroup> xq: array<vec4<u32>');
      expect(code).not.toContain('codes_lo(wv0[j])');
    }
    expect(streamsInt8('q4k')).toBe(true);
    expect(streamsInt8('q8g32')).toBe(true);
    expect(streamsInt8('q6k')).toBe(false);
    expect(streamsInt8('q5g32')).toBe(false);
    expect(() =>
      quantStreamShader({
        format: 'q6k',
        rows: 1,
        vecX: true,
        norm: false,
        subgroups: false,
        cols: 1,
        int8: true,
      }),
    ).toThrow(/4 or 8 bits/);
  });

  it('stage one row of int8 x whole for long rows without a norm, where workgroup memory holds it', () => {
    const encoder = (quantResident?: 'on' | 'off', bytes = 16_384) =>
      ({
        tuning: { quantResident },
        limits: { maxComputeWorkgroupStorageSize: bytes },
      }) as unknown as KernelEncoder;
    const long = { k: 8192, norm: false };
    // 256 words of 4-bit codes: 8 KiB of packed x, 2 KiB of block scales and 1 KiB of sums.
    expect(residentWordsFor(encoder(), 4, 256, long)).toBe(256);
    expect(residentWordsFor(encoder(), 4, 256, { k: 8192, norm: true })).toBeUndefined();
    expect(residentWordsFor(encoder(), 4, 128, { k: 4096, norm: false })).toBeUndefined();
    // 448 words round up to 512: 21 KiB, past WebGPU's default 16 KiB.
    expect(residentWordsFor(encoder(), 4, 448, { k: 14_336, norm: false })).toBeUndefined();
    expect(residentWordsFor(encoder(undefined, 32_768), 4, 448, { k: 14_336, norm: false })).toBe(512);
    expect(residentWordsFor(encoder('on'), 4, 16, { k: 512, norm: true })).toBe(32);
    expect(residentWordsFor(encoder('off'), 4, 256, long)).toBeUndefined();
  });

  it('take more columns a group only while the product keeps 256 workgroups', () => {
    expect(quantColumnsFor(2048, 8, undefined)).toBe(1);
    expect(quantColumnsFor(4096, 8, undefined)).toBe(2);
    expect(quantColumnsFor(8192, 8, undefined)).toBe(4);
    expect(quantColumnsFor(14336, 6, undefined)).toBe(4);
    expect(quantColumnsFor(14336, 4, undefined)).toBe(2);
    expect(quantColumnsFor(2048, 4, undefined)).toBe(1);
    expect(quantColumnsFor(8192, 4, 1)).toBe(1);
    expect(quantColumnsFor(16, 4, 4)).toBe(4);
  });
});

/** The key of every pipeline `gpu` looks up from now on, in order. */
function pipelineKeys(gpu: WgpuBackend): string[] {
  const keys: string[] = [];
  const get = gpu.pipelines.get.bind(gpu.pipelines);
  gpu.pipelines.get = (source) => {
    keys.push(source.key);
    return get(source);
  };
  return keys;
}

/**
 * Runs `problem` on `gpu`, checks it against the product of x's int8 blocks
 * (core's int8ProductError: within f32 rounding) and gives the streaming
 * shaders' pipeline keys it took.
 */
async function int8StreamKeys(
  gpu: WgpuBackend,
  problem: Parameters<typeof int8ProductError>[1],
): Promise<string[]> {
  const keys = pipelineKeys(gpu);
  const run = runQuantizedProduct(gpu, problem);
  try {
    const { worst, at } = int8ProductError(await readNumbers(run.out), problem);
    expect(worst, `element ${at}`).toBeLessThanOrEqual(1);
    return keys.filter((key) => key.startsWith('quantized/stream/'));
  } finally {
    run.dispose();
  }
}

/**
 * A seeded product problem (core's runQuantizedProduct): `weights` host-quantized [N, K] weights of
 * `format` (two for a gate·up pair), then x [M, K], c [M, N] and, with `norm`, a folded norm's weight,
 * drawn in that order.
 */
function seededProblem(
  seed: number,
  format: QuantFormat,
  [m, k, n]: readonly [number, number, number],
  options: { readonly weights: 1 | 2; readonly norm: boolean; readonly zeroPoints?: boolean },
) {
  const rng = new Rng(seed);
  const random = (size: number, scale = 1) => Array.from({ length: size }, () => rng.uniform(-scale, scale));
  const quantize = { zeroPoints: options.zeroPoints === true };
  const weights = Array.from({ length: options.weights }, () =>
    quantizeWeights(Float32Array.from(random(n * k, 0.1)), [n, k], format, quantize),
  );
  return {
    x: random(m * k),
    c: random(m * n),
    weights,
    m,
    ...(options.norm ? { norm: { weight: random(k), eps: 1e-5 } } : {}),
  };
}

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

// Forced 2 and 4 columns a group on odd N (a last group with columns past
// the end), against the cpu backend: super-block formats with offsets and
// a folded norm (q4k), two sub-blocks a word (q6k), high bits (q5g32a) and
// a scale per row with x read element by element (q8).
const cases: readonly (readonly [QuantFormat, number, number, number, boolean])[] = [
  ['q4k', 1, 512, 37, true],
  ['q6k', 2, 256, 21, false],
  ['q5g32a', 1, 96, 19, false],
  ['q8', 3, 200, 11, false],
  // Four tiles of words, the last partial: the prefetched words rotate through the loop.
  ['q4k', 1, 3328, 7, false],
  ['q8', 2, 1600, 5, false],
];
for (const quantColumns of [2, 4] as const) {
  needsAdapter(`the streaming quantized shader, ${quantColumns} columns a group`, () => {
    const cpu = createCpuBackend();
    const gpuReady = createWgpuBackend({ quantColumns });
    afterAll(async () => {
      (await gpuReady).dispose();
      cpu.dispose();
    });
    for (const [format, m, k, n, norm] of cases) {
      it(`${format} ${m}×${k}→${n}${norm ? ' rmsNorm' : ''} matches the cpu backend`, async () => {
        const gpu = await gpuReady;
        const rng = new Rng(n * 1000 + k + quantColumns);
        const random = (size: number, scale = 1) =>
          Array.from({ length: size }, () => rng.uniform(-scale, scale));
        const weight = quantizeWeights(Float32Array.from(random(n * k, 0.1)), [n, k], format);
        const x = random(m * k);
        const c = random(m * n);
        const normWeight = random(k);
        const keys = pipelineKeys(gpu);
        const run = (b: Backend) => {
          const w = uploadQuantized(b, weight);
          const inputs = [
            b.upload(x, [m, k]),
            w.packed,
            w.scales,
            w.zeros,
            b.upload(c, [m, n]),
            w.offsets,
            ...(norm ? [b.upload(normWeight, [k])] : []),
          ];
          return b.run(quantizedMatmul, inputs, {
            format,
            beta: 0.5,
            ...(norm ? { eps: 1e-5 } : {}),
          })[0] as Tensor;
        };
        const got = run(gpu);
        const want = run(cpu);
        const mismatch = compareOutputs('f32', await got.read(), await want.read(), {
          rtol: 1e-4,
          atol: 3e-5 * Math.sqrt(k),
        });
        expect(mismatch).toBeUndefined();
        expect(keys.filter((key) => key.startsWith('quantized/stream/'))).toEqual([
          expect.stringContaining(`/c${quantColumns}/`),
        ]);
      }, 600_000);
    }
  });
}

// int8 activations against the product of x's int8 blocks in f64 (core's
// int8ProductError: within f32 rounding), 2 columns a group (both forced
// by the backend's switches): 4-bit codes
// with zero points and with q4k's offsets and a folded norm, int8 codes with
// a scale per row, x read element by element and K past a whole block;
// four tiles of words, the last partial (each tile's blocks restaged);
// more columns than a resident x's workgroups take at once.
const int8Cases: readonly (readonly [QuantFormat, number, number, number, boolean, boolean])[] = [
  ['q4k', 1, 512, 37, true, false],
  ['q4g32', 3, 96, 19, false, true],
  ['q8', 2, 200, 11, false, false],
  ['q8g32', 1, 256, 13, true, false],
  ['q4k', 1, 3328, 9, true, false],
  ['q8g32', 2, 1600, 7, false, false],
  // 1,032 workgroups' columns: a resident x's workgroups take a second column set.
  ['q8g32', 1, 64, 16_500, false, false],
];
// Each tile staged in turn, one row's x staged whole (resident), and that by 256 workgroups at most
// (the 16,500 columns' workgroups then take five column sets each).
const int8Stagings = [
  { quantResident: 'off' },
  { quantResident: 'on' },
  { quantResident: 'on', quantResidentWorkgroups: 256 },
] as const;
for (const staging of int8Stagings) {
  const { quantResident } = staging;
  const staged =
    quantResident === 'on'
      ? `whole${'quantResidentWorkgroups' in staging ? ` by at most ${staging.quantResidentWorkgroups} workgroups` : ''}`
      : 'tile by tile';
  needsAdapter(`the streaming quantized shader on int8 activations, x staged ${staged}`, () => {
    // The switch takes int8 activations whatever the call's attribute says.
    const gpuReady = createWgpuBackend({ quantColumns: 2, qgemvActivations: 'int8', ...staging });
    afterAll(async () => (await gpuReady).dispose());
    for (const [format, m, k, n, norm, zeroPoints] of int8Cases) {
      // Only one row's x stays resident.
      if (quantResident === 'on' && m > 1) continue;
      it(`${format} ${m}×${k}→${n}${norm ? ' rmsNorm' : ''} matches its int8 blocks`, async () => {
        const gpu = await gpuReady;
        const problem = seededProblem(n * 7 + k + m, format, [m, k, n], { weights: 1, norm, zeroPoints });
        const stream = await int8StreamKeys(gpu, problem);
        expect(stream).toEqual([expect.stringContaining('/int8/')]);
        expect(/\/int8\/r\d+\//.test(stream[0]!)).toBe(quantResident === 'on');
      }, 600_000);
    }
  });
}

// The gate·up pair in one pass with two rows of each weight a group, on int8 x: tile by tile (odd N, so
// a last group's second rows lie past the end; a folded norm; several rows) and with x resident on few
// workgroups (five column sets each).
const pairColumnCases: readonly (readonly [QuantFormat, number, number, number, boolean])[] = [
  ['q4k', 1, 512, 37, true],
  ['q8g32', 2, 1600, 7, false],
  ['q4k', 1, 256, 2500, false],
];
for (const staging of [{}, { quantResident: 'on', quantResidentWorkgroups: 256 }] as const) {
  const how = 'quantResident' in staging ? 'x resident' : 'tile by tile';
  needsAdapter(`the gate·up pair on int8 x, two rows of each weight a group, ${how}`, () => {
    const gpuReady = createWgpuBackend({ qgemvActivations: 'int8', quantPairColumns: 2, ...staging });
    afterAll(async () => (await gpuReady).dispose());
    for (const [format, m, k, n, norm] of pairColumnCases) {
      if ('quantResident' in staging && (m > 1 || norm)) continue;
      it(`${format} ${m}×${k}→${n}${norm ? ' rmsNorm' : ''} matches its int8 blocks`, async () => {
        const gpu = await gpuReady;
        const problem = seededProblem(n * 17 + k + m, format, [m, k, n], { weights: 2, norm });
        const stream = await int8StreamKeys(gpu, problem);
        expect(stream).toEqual([expect.stringMatching(/\/c4\/int8\/(r\d+\/)?pair\//)]);
        expect(/\/int8\/r\d+\//.test(stream[0]!)).toBe('quantResident' in staging);
      }, 600_000);
    }
  });
}

// The gate·up pair of the formats without a pair shader: up to 4 rows in one
// pass of the streaming shader, each group a row of both weights (the
// device binds them all); 5 rows take the tiled products and a SwiGLU
// dispatch. Against the cpu backend, on odd N, with and without a folded norm.
const gatedCases: readonly (readonly [QuantFormat, number, number, number, boolean])[] = [
  ['q4k', 1, 512, 37, true],
  ['q4g32a', 2, 96, 19, false],
  // Four and two tiles of words.
  ['q4k', 1, 3328, 9, false],
  ['q8g32a', 3, 1600, 7, true],
  ['q8g32', 5, 256, 13, false],
];
needsAdapter('the gate·up pair in one pass', () => {
  const cpu = createCpuBackend();
  const gpuReady = createWgpuBackend();
  afterAll(async () => {
    (await gpuReady).dispose();
    cpu.dispose();
  });
  for (const [format, m, k, n, norm] of gatedCases) {
    it(`${format} ${m}×${k}→${n}${norm ? ' rmsNorm' : ''} matches the cpu backend`, async () => {
      const gpu = await gpuReady;
      const problem = seededProblem(n * 31 + k + m, format, [m, k, n], { weights: 2, norm });
      const keys = pipelineKeys(gpu);
      const got = runQuantizedProduct(gpu, problem);
      const want = runQuantizedProduct(cpu, problem);
      try {
        const mismatch = compareOutputs('f32', await got.out.read(), await want.out.read(), {
          rtol: 1e-4,
          atol: 3e-5 * Math.sqrt(k),
        });
        expect(mismatch).toBeUndefined();
        const stream = keys.filter((key) => key.startsWith('quantized/stream/'));
        const swiglu = keys.filter((key) => key.startsWith('quantizedGateUpSwiglu/parts/'));
        if (m <= 4) {
          expect(stream).toEqual([expect.stringContaining('/pair/')]);
          expect(swiglu).toEqual([]);
        } else {
          expect(stream).toEqual([]);
          expect(swiglu).toHaveLength(1);
        }
      } finally {
        got.dispose();
        want.dispose();
      }
    }, 600_000);
  }
});

// A device at WebGPU's default limits (8 storage buffers a stage, fewer than
// the 11 of q4k's pair with a norm).
async function defaultLimitsBackend(options: { qgemvActivations?: 'int8' } = {}): Promise<WgpuBackend> {
  const adapter = await (await dawnGpu({})).requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter');
  const device = await adapter.requestDevice();
  return WgpuBackend.create({ device, ...options });
}

// On int8 activations the pair goes in one pass as well (x staged once for
// both weights); where it does not (a device binding fewer buffers), the
// gate's product, then the up product whose epilogue stores silu(gate) · up.
// Against the products of x's int8 blocks.
for (const fewBindings of [false, true]) {
  needsAdapter(`the gate·up pair on int8 activations${fewBindings ? ', 8 bindings' : ''}`, () => {
    const gpuReady = fewBindings
      ? defaultLimitsBackend({ qgemvActivations: 'int8' })
      : createWgpuBackend({ qgemvActivations: 'int8' });
    afterAll(async () => (await gpuReady).dispose());
    it('q4k 1×3328→37 rmsNorm matches its int8 blocks', async () => {
      const gpu = await gpuReady;
      const problem = seededProblem(5, 'q4k', [1, 3328, 37], { weights: 2, norm: true });
      const stream = await int8StreamKeys(gpu, problem);
      if (fewBindings) {
        expect(gpu.device.limits.maxStorageBuffersPerShaderStage).toBeLessThan(11);
        expect(stream).toHaveLength(2);
        expect(stream.filter((key) => /\/int8\/(r\d+\/)?gated\//.test(key))).toHaveLength(1);
      } else {
        expect(stream).toEqual([expect.stringMatching(/\/int8\/(r\d+\/)?pair\//)]);
      }
    }, 600_000);
  });
}
