import {
  type Backend,
  createCpuBackend,
  incrementalAttention,
  kvCacheScatter,
  ropeKvScatter,
  type Tensor,
} from '@rayo/core';
import { compareOutputs, Rng, ropeTolerance } from '@rayo/core/testing';
import {
  type AssemblyJob,
  createEmulatedGpu,
  expectAllAssembleCleanly,
  FakeLibCuda,
  PtxInterpreter,
  useEmulatedGpu,
} from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CudaBackend } from '../backend.js';
import { CudaDriver } from '../driver/driver.js';
import { CU_DEVICE_ATTRIBUTE } from '../driver/libcuda.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import type { CudaTuningOptions } from '../tuning.js';
import {
  ATTENTION_WARPS,
  type AttentionConfig,
  attentionKey,
  laneLayout,
  MAX_SPLITS,
  MIN_SPLIT_TOKENS,
  planAttention,
} from './attentionPlan.js';
import { vectorWidth } from './decodingAccess.js';
import { attentionModule } from './incrementalAttention.js';
import {
  ropeScatterKey,
  ropeScatterModule,
  ropeScatterVariant,
  scatterKey,
  scatterModule,
} from './kvCache.js';

const H100 = { multiprocessors: 132 };
/** The emulated device below: one SM of 2,048 threads. */
const ONE_SM = { multiprocessors: 1, maxThreadsPerMultiprocessor: 2048 };

describe('decoding kernels', () => {
  it('moves four words at a time only where rows and addresses allow it', () => {
    expect(vectorWidth(128, [0x1000n, 0x2000n])).toBe(4);
    expect(vectorWidth(128, [0x1000n, 0x2004n])).toBe(1);
    expect(vectorWidth(7, [0x1000n])).toBe(1);
    expect(vectorWidth(6, [0x1000n])).toBe(1);
  });

  it('lays a row over the lanes of a slot', () => {
    expect(laneLayout(128, 4)).toEqual({ width: 4, chunks: 32, lanes: 32, perLane: 1, slots: 1 });
    expect(laneLayout(64, 4)).toEqual({ width: 4, chunks: 16, lanes: 16, perLane: 1, slots: 2 });
    expect(laneLayout(256, 4)).toEqual({ width: 4, chunks: 64, lanes: 32, perLane: 2, slots: 1 });
    expect(laneLayout(7, 1)).toEqual({ width: 1, chunks: 7, lanes: 8, perLane: 1, slots: 4 });
    expect(laneLayout(1, 1)).toEqual({ width: 1, chunks: 1, lanes: 1, perLane: 1, slots: 32 });
    expect(laneLayout(128, 1)).toEqual({ width: 1, chunks: 128, lanes: 32, perLane: 4, slots: 1 });
  });
});

describe('planAttention', () => {
  it('splits a long cache so that the grid fills the SMs, in whole load groups', () => {
    const plan = planAttention(H100, { nHeads: 32, nKvHeads: 32, headDim: 128, seqLen: 4096 }, 4);
    expect(plan.config).toEqual({ headDim: 128, width: 4, headsPerBlock: 1, unroll: 4, split: true });
    expect(plan.headBlocks).toBe(32);
    expect(plan.splits).toBe(MAX_SPLITS);
    expect(plan.splitTokens).toBe(64);
    expect(plan.splitTokens % (ATTENTION_WARPS * 4)).toBe(0);
  });

  it('keeps every split at least MIN_SPLIT_TOKENS long and covers the cache exactly', () => {
    for (const seqLen of [1, 63, 64, 127, 128, 1031, 4096, 32768]) {
      for (const nHeads of [8, 32, 64]) {
        const plan = planAttention(H100, { nHeads, nKvHeads: nHeads, headDim: 64, seqLen }, 4);
        expect(plan.splits).toBeGreaterThanOrEqual(1);
        expect(plan.splits).toBeLessThanOrEqual(MAX_SPLITS);
        expect((plan.splits - 1) * plan.splitTokens).toBeLessThan(seqLen);
        expect(plan.splits * plan.splitTokens).toBeGreaterThanOrEqual(seqLen);
        if (plan.splits > 1) expect(plan.splitTokens).toBeGreaterThanOrEqual(MIN_SPLIT_TOKENS);
        expect(plan.config.split).toBe(plan.splits > 1);
      }
    }
  });

  it('takes short caches in one pass', () => {
    const plan = planAttention(H100, { nHeads: 32, nKvHeads: 8, headDim: 128, seqLen: 60 }, 4);
    expect(plan.splits).toBe(1);
    expect(plan.splitTokens).toBe(60);
    expect(plan.config.split).toBe(false);
  });

  it('gives a block the query heads of one kv head, as registers allow', () => {
    const heads = (nHeads: number, nKvHeads: number, headDim: number, width: 1 | 4 = 4) =>
      planAttention(H100, { nHeads, nKvHeads, headDim, seqLen: 4096 }, width).config.headsPerBlock;
    expect(heads(32, 8, 128)).toBe(4);
    expect(heads(64, 8, 128)).toBe(8);
    expect(heads(64, 2, 128)).toBe(8);
    expect(heads(64, 8, 256)).toBe(4);
    expect(heads(21, 3, 64)).toBe(7);
    expect(heads(27, 3, 64)).toBe(3);
    expect(heads(32, 8, 1024)).toBe(1);
    expect(heads(32, 32, 128)).toBe(1);
  });

  it('uses fewer splits when the heads alone fill the device', () => {
    const few = planAttention(
      { multiprocessors: 4 },
      { nHeads: 64, nKvHeads: 64, headDim: 128, seqLen: 4096 },
      4,
    );
    expect(few.splits).toBe(1);
    const more = planAttention(
      { multiprocessors: 4 },
      { nHeads: 8, nKvHeads: 8, headDim: 128, seqLen: 4096 },
      4,
    );
    expect(more.splits).toBe(8);
  });

  it('names modules by their configuration', () => {
    const c: AttentionConfig = { headDim: 128, width: 4, headsPerBlock: 4, unroll: 4, split: true };
    expect(attentionKey(c)).toBe('decoding/attention/split/d128v4/g4u4w4');
    expect(attentionKey({ ...c, deviceLength: true })).toBe('decoding/attention/split/d128v4/g4u4w4/len');
    expect(scatterKey(4, true)).toBe('decoding/kvCacheScatter/v4/at');
  });
});

const CONFIGS: readonly AttentionConfig[] = [
  { headDim: 128, width: 4, headsPerBlock: 1, unroll: 4, split: true },
  { headDim: 128, width: 4, headsPerBlock: 1, unroll: 4, split: false },
  { headDim: 128, width: 4, headsPerBlock: 4, unroll: 4, split: true },
  { headDim: 128, width: 4, headsPerBlock: 8, unroll: 4, split: true },
  // attentionUnroll: 8 tokens a load group (Llama-3.1-8B's heads, bf16 caches below too).
  { headDim: 128, width: 4, headsPerBlock: 4, unroll: 8, split: true },
  { headDim: 64, width: 4, headsPerBlock: 1, unroll: 4, split: true },
  { headDim: 64, width: 4, headsPerBlock: 4, unroll: 4, split: false },
  { headDim: 64, width: 4, headsPerBlock: 8, unroll: 4, split: true },
  { headDim: 128, width: 1, headsPerBlock: 2, unroll: 4, split: true },
  { headDim: 256, width: 4, headsPerBlock: 4, unroll: 2, split: true },
  { headDim: 1024, width: 4, headsPerBlock: 1, unroll: 1, split: true },
  { headDim: 7, width: 1, headsPerBlock: 3, unroll: 4, split: false },
  { headDim: 1, width: 1, headsPerBlock: 1, unroll: 4, split: true },
  // The length read from device memory.
  { headDim: 128, width: 4, headsPerBlock: 4, unroll: 4, split: true, deviceLength: true },
  { headDim: 64, width: 4, headsPerBlock: 1, unroll: 4, split: false, deviceLength: true },
  { headDim: 7, width: 1, headsPerBlock: 3, unroll: 4, split: true, deviceLength: true },
];

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`decoding PTX assembles with ptxas, without spills (${gate.reason})`, () => {
  /** A module's jobs: sm_90, where it must not spill, and the oldest target, where it must assemble. */
  const both = (ptx: string, what: string): AssemblyJob[] => [
    { ptx, arch: 'sm_90', what: `${what} sm_90` },
    { ptx, arch: DEFAULT_TARGET, what: `${what} ${DEFAULT_TARGET}`, spillsAllowed: true },
  ];
  // Half caches (under f32 or half q) at every configuration: every configuration the planner
  // makes keeps its state in registers on sm_90.
  const HALF_CONFIGS: AttentionConfig[] = CONFIGS.flatMap((c) =>
    (
      [
        { act: 'f32', cache: 'bf16' },
        { act: 'f16', cache: 'f16' },
      ] as const
    ).map((types) => ({ ...c, types })),
  );
  it(`the attention at every configuration, f32 and half, for sm_90 and ${DEFAULT_TARGET}`, () => {
    expectAllAssembleCleanly(
      [...CONFIGS, ...HALF_CONFIGS].flatMap((c) => both(attentionModule(c).emit(), attentionKey(c))),
    );
  });
  it('kvCacheScatter over f32 and half rows and caches', () => {
    const jobs: AssemblyJob[] = [];
    for (const width of [1, 4] as const) {
      for (const devicePosition of [false, true]) {
        jobs.push(...both(scatterModule(width, devicePosition).emit(), scatterKey(width, devicePosition)));
      }
      for (const [rows, cache] of [
        ['f32', 'bf16'],
        ['f32', 'f16'],
        ['f16', 'f16'],
        ['bf16', 'bf16'],
      ] as const) {
        const types = { rows, cache };
        jobs.push(
          ...both(scatterModule(width, true, types).emit(), `${scatterKey(width, true)} ${rows} ${cache}`),
        );
      }
    }
    for (const layout of ['half', 'interleaved'] as const) {
      for (const devicePosition of [false, true]) {
        for (const table of [false, true]) {
          for (const types of [
            { rows: 'f32', cache: 'f32' },
            { rows: 'f32', cache: 'bf16' },
            { rows: 'f16', cache: 'f16' },
          ] as const) {
            for (const headsPerThread of [1, 8]) {
              const variant = { layout, devicePosition, types, table, headsPerThread, indexBits: 5 };
              jobs.push(...both(ropeScatterModule(variant).emit(), ropeScatterKey(variant)));
            }
          }
        }
      }
    }
    expectAllAssembleCleanly(jobs);
  });
});

// The attention kernels run on an emulated device. Views one element past a
// 16-byte boundary make the kernels load one word at a time, which the
// interpreter executes; splits, grouped heads, partial slots and the merge
// are the same code at either width.
describe('attention on an emulated device', () => {
  const cpu = createCpuBackend();

  function device(multiprocessors: number): CudaBackend {
    const fake = new FakeLibCuda();
    fake.attributes.set(CU_DEVICE_ATTRIBUTE.MULTIPROCESSOR_COUNT, multiprocessors);
    new PtxInterpreter(fake).attach();
    return new CudaBackend(new CudaDriver(fake));
  }

  function random(seed: number, n: number, scale = 1): Float32Array {
    const rng = new Rng(seed);
    return Float32Array.from({ length: n }, () => rng.uniform(-scale, scale));
  }

  /** A tensor whose data starts 4 bytes past an aligned allocation, and the allocation. */
  function misaligned(gpu: CudaBackend, data: Float32Array, shape: number[]): [Tensor, Tensor] {
    const base = gpu.upload(Float32Array.from([0, ...data]), [data.length + 1]);
    return [gpu.importPointer(gpu.pointerOf(base).ptr + 4n, shape), base];
  }

  const CASES: readonly (readonly [string, number, number, number, number, number, number])[] = [
    // label, SMs, nHeads, nKvHeads, headDim, seqLen, scale
    ['grouped heads, one pass', 132, 8, 2, 64, 61, 0],
    ['grouped heads, split', 132, 32, 8, 128, 260, 0],
    ['eight heads per block, split', 132, 64, 8, 64, 200, 0],
    ['large scores, split', 132, 8, 2, 64, 1000, 4],
    ['many splits of one head, two slots per warp', 1, 1, 1, 16, 4096, 0],
    ['a partial last split', 2, 2, 1, 128, 200, 0],
  ];
  for (const [label, sms, nHeads, nKvHeads, headDim, seqLen, scale] of CASES) {
    it(`${label}: ${nHeads}/${nKvHeads} heads, headDim ${headDim}, seqLen ${seqLen}`, async () => {
      const plan = planAttention({ multiprocessors: sms }, { nHeads, nKvHeads, headDim, seqLen }, 1);
      expect(plan.config.split).toBe(!label.includes('one pass'));
      const gpu = device(sms);
      const maxSeq = seqLen + 3;
      const q = random(1, nHeads * headDim, scale === 4 ? 8 : 1);
      const kc = random(2, nKvHeads * maxSeq * headDim);
      const vc = random(3, nKvHeads * maxSeq * headDim);
      const [gq, bq] = misaligned(gpu, q, [nHeads, headDim]);
      const [gk, bk] = misaligned(gpu, kc, [nKvHeads, maxSeq, headDim]);
      const [gv, bv] = misaligned(gpu, vc, [nKvHeads, maxSeq, headDim]);
      const attrs = { seqLen, scale };
      const got = await gpu.run(incrementalAttention, [gq, gk, gv], attrs)[0]!.read();
      const want = await cpu
        .run(
          incrementalAttention,
          [cpu.upload(q, [nHeads, headDim]), cpu.upload(kc, gk.shape), cpu.upload(vc, gv.shape)],
          attrs,
        )[0]!
        .read();
      const tolerance = scale === 4 ? { rtol: 1e-3, atol: 1e-4 } : { rtol: 1e-4, atol: 1e-5 };
      expect(compareOutputs('f32', got, want, tolerance)).toBeUndefined();
      for (const t of [bq, bk, bv]) t.dispose();
      gpu.dispose();
    }, 120_000);
  }

  it('a device length of 150 in a 2,048-row f32 cache: the grid planned for the cache shares the 150 rows, twice over', async () => {
    const [nHeads, nKvHeads, headDim, maxSeq, seqLen] = [32, 8, 64, 2048, 150];
    const { gpu, fake, dispose } = createEmulatedGpu({ multiprocessors: 132 });
    try {
      const q = random(7, nHeads * headDim);
      const kc = random(8, nKvHeads * maxSeq * headDim);
      const vc = random(9, nKvHeads * maxSeq * headDim);
      const inputs = (b: Backend) => [
        b.upload(q, [nHeads, headDim]),
        b.upload(kc, [nKvHeads, maxSeq, headDim]),
        b.upload(vc, [nKvHeads, maxSeq, headDim]),
        b.upload(Int32Array.of(seqLen), [1], 'i32'),
      ];
      const want = await cpu.run(incrementalAttention, inputs(cpu))[0]!.read();
      // The second launch finds the completion counters as the first found them.
      for (let run = 0; run < 2; run++) {
        const first = fake.launches.length;
        const got = await gpu.run(incrementalAttention, inputs(gpu))[0]!.read();
        expect(fake.launches.slice(first).map((l) => l.entry)).toEqual(['attention_split']);
        expect(fake.launches[first]!.grid[0]).toBeGreaterThan(Math.ceil(seqLen / MIN_SPLIT_TOKENS));
        expect(compareOutputs('f32', got, want, { rtol: 1e-4, atol: 1e-5 })).toBeUndefined();
      }
    } finally {
      dispose();
    }
  }, 120_000);

  /** Llama-3.1-8B's heads (32 × 128 over 8 kv heads) through the split kernels under `tuning`, against the cpu. */
  async function expectGroupedAsCpu(
    tuning: CudaTuningOptions,
    seqLen: number,
    splits?: number,
  ): Promise<void> {
    const [nHeads, nKvHeads, headDim] = [32, 8, 128];
    const { gpu, fake, dispose } = createEmulatedGpu({ multiprocessors: 132, tuning });
    try {
      const q = random(4, nHeads * headDim);
      const kc = random(5, nKvHeads * seqLen * headDim);
      const vc = random(6, nKvHeads * seqLen * headDim);
      const attrs = { seqLen, scale: 0 };
      const inputs = (b: Backend) => [
        b.upload(q, [nHeads, headDim]),
        b.upload(kc, [nKvHeads, seqLen, headDim]),
        b.upload(vc, [nKvHeads, seqLen, headDim]),
      ];
      const first = fake.launches.length;
      const got = await gpu.run(incrementalAttention, inputs(gpu), attrs)[0]!.read();
      // One kernel: the splits' partial states, merged by the last block of each head block.
      expect(fake.launches.slice(first).map((l) => l.entry)).toEqual(['attention_split']);
      if (splits !== undefined) expect(fake.launches[first]!.grid[0]).toBe(splits);
      const want = await cpu.run(incrementalAttention, inputs(cpu), attrs)[0]!.read();
      expect(compareOutputs('f32', got, want, { rtol: 1e-4, atol: 1e-5 })).toBeUndefined();
    } finally {
      dispose();
    }
  }

  it('splits a short cache into 16-token splits where attentionSplitTokens asks (Llama-3.1-8B heads; 32 by default)', async () => {
    const shape = { nHeads: 32, nKvHeads: 8, headDim: 128, seqLen: 256 };
    expect(planAttention({ multiprocessors: 132 }, shape, 4, { minSplitTokens: 16 })).toMatchObject({
      splits: 16,
      splitTokens: 16,
    });
    expect(planAttention({ multiprocessors: 132 }, shape, 4).splits).toBe(8);
    await expectGroupedAsCpu({ attentionSplitTokens: 16 }, shape.seqLen);
  }, 120_000);

  it('cuts a long cache into up to 256 splits where attentionMaxSplits asks (Llama-3.2-1B heads; 64 by default)', async () => {
    const shape = { nHeads: 32, nKvHeads: 8, headDim: 64, seqLen: 8256 };
    // 64 splits at most, rounded to whole load groups of 32 tokens: 52 of 160 tokens.
    expect(planAttention({ multiprocessors: 132 }, shape, 4)).toMatchObject({ splits: 52, splitTokens: 160 });
    const plan = planAttention({ multiprocessors: 132 }, shape, 4, { maxSplits: 256 });
    expect(plan.splits).toBeGreaterThan(128);
    expect(plan.splits).toBeLessThanOrEqual(256);
    // 4,200 tokens of the grouped heads below: 131 splits wanted, of whole 16-token load groups: 88
    // of 48 tokens, past the default's 64.
    await expectGroupedAsCpu({ attentionMaxSplits: 256 }, 4200, 88);
  }, 120_000);

  it('loads 8 tokens a group where attentionUnroll asks (Llama-3.1-8B heads over 1,000 tokens)', async () => {
    const plan = planAttention(
      { multiprocessors: 132 },
      { nHeads: 32, nKvHeads: 8, headDim: 128, seqLen: 1000 },
      4,
      {
        unroll: 8,
      },
    );
    // Splits in whole groups of 4 warps × 8 tokens.
    expect(plan.config.unroll).toBe(8);
    expect(plan.splitTokens % 32).toBe(0);
    await expectGroupedAsCpu({ attentionUnroll: 8 }, 1000);
  }, 120_000);
});

describe('device positions and lengths outside the cache on an emulated device', () => {
  it('a position past the cache writes nothing, and a length outside it reads nothing', async () => {
    const fake = new FakeLibCuda();
    new PtxInterpreter(fake).attach();
    const gpu = new CudaBackend(new CudaDriver(fake));
    const rng = new Rng(4);
    const random = (n: number) => Float32Array.from({ length: n }, () => rng.uniform(-1, 1) || 0.375);
    const [nKvHeads, maxSeq, headDim] = [2, 9, 8];
    const cacheData = random(nKvHeads * maxSeq * headDim);
    const cache = gpu.upload(cacheData, [nKvHeads, maxSeq, headDim]);
    const rows = gpu.upload(random(3 * nKvHeads * headDim), [3, nKvHeads * headDim]);
    const at = gpu.upload(Int32Array.of(0), [1], 'i32');
    for (const position of [7, 9, -1, 2 ** 31 - 1]) {
      gpu.write(at, [position]);
      gpu.run(kvCacheScatter, [cache, rows, at]);
      expect(await cache.read()).toEqual(cacheData);
    }
    // A cache of 300 rows on 132 SMs: the length on the device is split as the capacity is.
    const big = gpu.upload(random(nKvHeads * 300 * headDim), [nKvHeads, 300, headDim]);
    const q = gpu.upload(random(4 * headDim), [4, headDim]);
    const length = gpu.upload(Int32Array.of(1), [1], 'i32');
    for (const seqLen of [0, -5, 301]) {
      gpu.write(length, [seqLen]);
      const out = gpu.run(incrementalAttention, [q, big, big, length])[0]!;
      expect(Array.from(await out.read()).every(Number.isNaN)).toBe(true);
      out.dispose();
    }
    gpu.dispose();
  }, 120_000);
});

describe('ropeKvScatter on an emulated device', () => {
  // One SM: the grid is smaller than the work, so the grid-stride loop turns.
  const { gpu, cpu } = useEmulatedGpu({ multiprocessors: 1 });
  const POISON = Number.NaN;

  // [T, heads, kvHeads, headDim, maxSeq, position, device position, k as [T, kvHeads, headDim]]
  const CASES: readonly (readonly [number, number, number, number, number, number, boolean, boolean])[] = [
    [1, 3, 1, 6, 13, 12, false, false],
    [5, 4, 2, 14, 13, 0, false, true],
    [1, 32, 8, 64, 67, 66, true, false],
    [3, 6, 3, 10, 9, 6, true, true],
    // Pairs past the one SM's 2,048 threads: runs of 4 heads (6 = 4 + 2, 5 = 4 + 1) share an angle.
    [20, 6, 5, 40, 23, 2, false, false],
    // Past 8 × 2,048: runs of 8 (12 = 8 + 4, 9 = 8 + 1), k by head.
    [26, 12, 9, 64, 29, 3, true, true],
  ];
  it('the cases above take runs of 1, 4 and 8 heads', () => {
    const runs = CASES.map(
      ([tokens, heads, kvHeads, headDim]) =>
        ropeScatterVariant(ONE_SM, 'half', [tokens, heads, headDim], kvHeads, {}).headsPerThread,
    );
    expect(runs).toEqual([1, 1, 1, 1, 4, 8]);
  });
  for (const layout of ['half', 'interleaved'] as const) {
    for (const [tokens, heads, kvHeads, headDim, maxSeq, position, onDevice, kByHead] of CASES) {
      it(`${layout}: T ${tokens}, ${heads}/${kvHeads} heads, headDim ${headDim}, ${onDevice ? 'device ' : ''}position ${position} of ${maxSeq}`, async () => {
        const rng = new Rng(tokens * 1000 + heads * 100 + headDim);
        const random = (n: number) => Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
        const width = kvHeads * headDim;
        const shapes = [
          [tokens, heads, headDim],
          kByHead ? [tokens, kvHeads, headDim] : [tokens, width],
          [tokens, width],
          [kvHeads, maxSeq, headDim],
          [kvHeads, maxSeq, headDim],
        ];
        const data = shapes.map((shape) => random(shape.reduce((a, b) => a * b, 1)));
        const attrs = { layout, theta: 10000, ...(onDevice ? {} : { position }) };
        const run = async (backend: typeof gpu | typeof cpu) => {
          const inputs = data.map((x, i) => backend.upload(x, shapes[i]!));
          const at = onDevice ? [backend.upload(Int32Array.of(position), [1], 'i32')] : [];
          const y = backend.upload(new Float32Array(data[0]!.length).fill(POISON), shapes[0]!);
          const outs = backend.run(ropeKvScatter, [...inputs, ...at], attrs, { out: [y] });
          return Promise.all(outs.map((t) => t.read()));
        };
        const [got, want] = [await run(gpu), await run(cpu)];
        const tolerance = ropeTolerance(position + tokens - 1);
        for (const o of [0, 1, 2])
          expect(compareOutputs('f32', got[o]!, want[o]!, tolerance)).toBeUndefined();
        // v is copied bit for bit.
        expect(got[2]).toEqual(want[2]);
      }, 120_000);
    }
  }

  it('a device position past the cache writes nothing to the caches', async () => {
    const rng = new Rng(5);
    const random = (n: number) => Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
    const [tokens, heads, kvHeads, headDim, maxSeq] = [3, 4, 2, 8, 9];
    const kData = random(kvHeads * maxSeq * headDim);
    const vData = random(kvHeads * maxSeq * headDim);
    const kCache = gpu.upload(kData, [kvHeads, maxSeq, headDim]);
    const vCache = gpu.upload(vData, [kvHeads, maxSeq, headDim]);
    const q = gpu.upload(random(tokens * heads * headDim), [tokens, heads, headDim]);
    const rows = gpu.upload(random(tokens * kvHeads * headDim), [tokens, kvHeads * headDim]);
    const at = gpu.upload(Int32Array.of(0), [1], 'i32');
    for (const position of [7, 9, -1, 2 ** 31 - 1]) {
      gpu.write(at, [position]);
      gpu.run(ropeKvScatter, [q, rows, rows, kCache, vCache, at])[0]!.dispose();
      expect(await kCache.read()).toEqual(kData);
      expect(await vCache.read()).toEqual(vData);
    }
  }, 120_000);
});
