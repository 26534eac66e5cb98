import {
  type Backend,
  type DType,
  f32ToBf16Bits,
  f32ToF16Bits,
  incrementalAttention,
  pagedAttention,
} from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { createEmulatedGpu, expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { CudaTuningOptions } from '../tuning.js';
import {
  DECODE_MMA_ROUND,
  type DecodeMmaConfig,
  decodeMmaKey,
  decodeMmaSharedBytes,
  planDecodeMma,
} from './attentionMmaPlan.js';
import { decodeMmaModule } from './incrementalAttentionMma.js';

function random(seed: number, n: number, scale = 1): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: n }, () => rng.uniform(-scale, scale));
}

describe('decode attention on tensor cores: plan and assembly', () => {
  it('plans one pass for a short cache, long splits where every SM still gets a block, whole rounds', () => {
    const h200 = { multiprocessors: 132 };
    // Up to 256 tokens a kv head: one pass, no merge.
    expect(planDecodeMma(h200, 8, 40)).toEqual({ splits: 1, splitTokens: DECODE_MMA_ROUND });
    expect(planDecodeMma(h200, 8, 256).splits).toBe(1);
    // 1,024 tokens over 8 kv heads: 16 splits of one round (a block for each SM beats longer splits).
    expect(planDecodeMma(h200, 8, 1024)).toEqual({ splits: 16, splitTokens: 64 });
    // 4,096: 16 splits of 256.
    expect(planDecodeMma(h200, 8, 4096)).toEqual({ splits: 16, splitTokens: 256 });
    // Llama-3.2-1B at 8,256 tokens: 32 splits wanted, whole rounds make 26 of 320.
    expect(planDecodeMma(h200, 8, 8256)).toEqual({ splits: 26, splitTokens: 320 });
    // 32,768 tokens of one kv head: at most 64 splits.
    expect(planDecodeMma(h200, 1, 32768).splits).toBe(64);
    // attentionSplitTokens replaces the rule: splits of at least that many tokens (a round at least).
    expect(planDecodeMma(h200, 8, 1024, 256)).toEqual({ splits: 4, splitTokens: 256 });
    expect(planDecodeMma(h200, 8, 1024, 16)).toEqual({ splits: 16, splitTokens: 64 });
    expect(planDecodeMma(h200, 8, 192, 64).splits).toBe(3);
  });

  it('assembles for sm_90 and sm_80 without spills, in 64 KiB of stages or fewer', () => {
    const configs: DecodeMmaConfig[] = [];
    for (const headDim of [64, 128]) {
      for (const group of [1, 4, 8]) {
        for (const split of [false, true]) {
          for (const act of ['f32', 'bf16'] as const) {
            configs.push({ headDim, group, split, deviceLength: split, act, cache: 'bf16' });
          }
          configs.push({ headDim, group, split, deviceLength: split, act: 'f32', cache: 'f16' });
        }
      }
    }
    for (const headDim of [64, 128]) {
      for (const split of [false, true])
        for (const cache of ['bf16', 'f16'] as const)
          configs.push({ headDim, group: 4, split, deviceLength: false, act: 'f32', cache, pageShift: 4 });
    }
    // ropeAttention's form: q rotated as loaded, the new row written by the warp whose tile holds it.
    for (const headDim of [64, 128]) {
      for (const [layout, table, cache, group] of [
        ['half', false, 'bf16', 4],
        ['interleaved', true, 'f16', 8],
      ] as const) {
        for (const split of [false, true]) {
          const rope = { layout, table };
          configs.push({
            headDim,
            group,
            split,
            deviceLength: true,
            fromPosition: true,
            rope,
            act: 'f32',
            cache,
          });
        }
      }
    }
    for (const c of configs) expect(decodeMmaSharedBytes(c)).toBeLessThanOrEqual(64 * 1024);
    expectAllAssembleCleanly(
      configs.flatMap((c) => {
        const ptx = decodeMmaModule(c).emit();
        return [
          { ptx, arch: 'sm_90', what: `${decodeMmaKey(c)} sm_90` },
          { ptx, arch: 'sm_80', what: `${decodeMmaKey(c)} sm_80` },
        ];
      }),
    );
  });
});

// The tensor-core kernel keeps q and the weights in two bf16 parts each,
// about 16 bits: its results must agree with the f32 reference as closely as
// the CUDA-core kernel's, which a plain bf16 q (8 bits) would not.
describe('decode attention on tensor cores on an emulated device', () => {
  const TIGHT = { rtol: 2e-4, atol: 2e-5 };

  async function expectAsCpu(
    o: {
      nHeads: number;
      nKvHeads: number;
      headDim: number;
      seqLen: number;
      maxSeq?: number;
      qType?: DType;
      /** The caches' dtype (default bf16). */
      cache?: 'bf16' | 'f16';
      scale?: number;
      qScale?: number;
      deviceLength?: boolean;
      multiprocessors?: number;
    },
    expectEntries: readonly string[],
    tuning: CudaTuningOptions = {},
  ): Promise<void> {
    const { nHeads, nKvHeads, headDim, seqLen } = o;
    const maxSeq = o.maxSeq ?? seqLen;
    const { gpu, cpu, fake, dispose } = createEmulatedGpu({
      multiprocessors: o.multiprocessors ?? 4,
      tuning,
    });
    try {
      const q = random(seqLen + headDim, nHeads * headDim, o.qScale ?? 1);
      const kc = random(seqLen + 1, nKvHeads * maxSeq * headDim);
      const vc = random(seqLen + 2, nKvHeads * maxSeq * headDim);
      const attrs = o.deviceLength ? { scale: o.scale ?? 0 } : { seqLen, scale: o.scale ?? 0 };
      const cache = o.cache ?? 'bf16';
      const inputs = (b: Backend) => {
        const bf16 = (x: Float32Array) => Uint16Array.from(x, f32ToBf16Bits);
        const half = (x: Float32Array) => Uint16Array.from(x, cache === 'f16' ? f32ToF16Bits : f32ToBf16Bits);
        const list = [
          o.qType === 'bf16' ? b.upload(bf16(q), [nHeads, headDim], 'bf16') : b.upload(q, [nHeads, headDim]),
          b.upload(half(kc), [nKvHeads, maxSeq, headDim], cache),
          b.upload(half(vc), [nKvHeads, maxSeq, headDim], cache),
        ];
        if (o.deviceLength) list.push(b.upload(Int32Array.from([seqLen]), [1], 'i32'));
        return list;
      };
      const want = await cpu.run(incrementalAttention, inputs(cpu), attrs)[0]!.read();
      // Large scores scale f32's score errors up (the CUDA-core kernel's test allows the same).
      const tolerance =
        o.qType === 'bf16' ? { rtol: 4e-3, atol: 4e-3 } : o.scale === 4 ? { rtol: 1e-3, atol: 1e-4 } : TIGHT;
      // Twice: a split kernel must leave its completion counters as it found them for the next launch.
      for (let run = 0; run < 2; run++) {
        const first = fake.launches.length;
        const out = gpu.run(incrementalAttention, inputs(gpu), attrs)[0]!;
        // The output is poisoned first: every element must be written.
        const got = await out.read();
        expect(fake.launches.slice(first).map((l) => l.entry)).toEqual(expectEntries);
        expect(compareOutputs(o.qType ?? 'f32', got, want, tolerance)).toBeUndefined();
      }
    } finally {
      dispose();
    }
  }

  // Splits in one kernel: the last block of each kv head merges their states.
  const SPLIT = ['attention_mma_split'];

  it('one kv head of 4 query heads over 13 tokens: one pass, a partial tile', async () => {
    await expectAsCpu({ nHeads: 4, nKvHeads: 1, headDim: 64, seqLen: 13 }, ['attention_mma']);
  }, 120_000);

  it("Llama-3.2-1B's heads (32 × 64 over 8) over 300 of 333 tokens: splits of whole rounds and a partial one", async () => {
    await expectAsCpu(
      { nHeads: 32, nKvHeads: 8, headDim: 64, seqLen: 300, maxSeq: 333, multiprocessors: 132 },
      SPLIT,
    );
  }, 120_000);

  it('8 query heads a kv head (every remainder row used), headDim 128, a device length', async () => {
    await expectAsCpu(
      { nHeads: 16, nKvHeads: 2, headDim: 128, seqLen: 200, maxSeq: 261, deviceLength: true },
      SPLIT,
    );
  }, 120_000);

  it('7 query heads a kv head (Qwen), headDim 64, large scores', async () => {
    await expectAsCpu({ nHeads: 14, nKvHeads: 2, headDim: 64, seqLen: 400, scale: 4, qScale: 4 }, SPLIT);
  }, 120_000);

  it('one query head a kv head, an explicit scale, a bf16 q and output', async () => {
    await expectAsCpu({ nHeads: 2, nKvHeads: 2, headDim: 128, seqLen: 70, scale: 0.3, qType: 'bf16' }, [
      'attention_mma',
    ]);
  }, 120_000);

  it('a device length past the splits of a long cache leaves their states empty', async () => {
    await expectAsCpu(
      { nHeads: 8, nKvHeads: 2, headDim: 64, seqLen: 5, maxSeq: 1000, deviceLength: true },
      SPLIT,
    );
  }, 120_000);

  it("a device length of 192 in the CLI's 2,048-row cache: the grid planned for the cache shares the 192 rows", async () => {
    await expectAsCpu(
      {
        nHeads: 32,
        nKvHeads: 8,
        headDim: 64,
        seqLen: 192,
        maxSeq: 2048,
        deviceLength: true,
        multiprocessors: 132,
      },
      SPLIT,
    );
  }, 120_000);

  it('f16 caches: q and the weights in two f16 parts each, splits over 32 × 64 heads', async () => {
    await expectAsCpu(
      { nHeads: 32, nKvHeads: 8, headDim: 64, seqLen: 300, maxSeq: 333, multiprocessors: 132, cache: 'f16' },
      SPLIT,
    );
  }, 120_000);

  it('f16 caches: a q far past f16 (|q · scale| to 4e5) is brought into range by its row, a device length', async () => {
    await expectAsCpu(
      { nHeads: 8, nKvHeads: 2, headDim: 128, seqLen: 90, deviceLength: true, qScale: 4e6, cache: 'f16' },
      ['attention_mma'],
    );
  }, 120_000);

  it("attentionKernel 'lanes' keeps the CUDA-core kernel", async () => {
    await expectAsCpu({ nHeads: 8, nKvHeads: 2, headDim: 64, seqLen: 300 }, ['attention_split'], {
      attentionKernel: 'lanes',
    });
  }, 120_000);

  /**
   * pagedAttention of B sequences over bf16 pools of `pageSize`-row pages,
   * the pages of each sequence taken from a shuffled pool, against the cpu.
   */
  async function expectPagedAsCpu(
    o: { nHeads: number; nKvHeads: number; headDim: number; pageSize: number; seqLens: number[] },
    expectEntries: readonly string[],
  ): Promise<void> {
    const { nHeads, nKvHeads, headDim, pageSize, seqLens } = o;
    const { gpu, cpu, fake, dispose } = createEmulatedGpu({ multiprocessors: 132 });
    try {
      const maxPages = Math.max(1, ...seqLens.map((n) => Math.ceil(n / pageSize)));
      const numPages = seqLens.length * maxPages + 3;
      const rng = new Rng(pageSize + headDim);
      const order = Array.from({ length: numPages }, (_, i) => i).sort(() => rng.uniform(-1, 1));
      const tables = Int32Array.from({ length: seqLens.length * maxPages }, (_, i) => order[i]!);
      const poolShape = [numPages, nKvHeads, pageSize, headDim];
      const q = random(7, seqLens.length * nHeads * headDim);
      const kc = Uint16Array.from(random(8, numPages * nKvHeads * pageSize * headDim), f32ToBf16Bits);
      const vc = Uint16Array.from(random(9, numPages * nKvHeads * pageSize * headDim), f32ToBf16Bits);
      const inputs = (b: Backend) => [
        b.upload(q, [seqLens.length, nHeads, headDim]),
        b.upload(kc, poolShape, 'bf16'),
        b.upload(vc, poolShape, 'bf16'),
        b.upload(tables, [seqLens.length, maxPages], 'i32'),
        b.upload(Int32Array.from(seqLens), [seqLens.length], 'i32'),
      ];
      const first = fake.launches.length;
      const got = await gpu.run(pagedAttention, inputs(gpu), { scale: 0 })[0]!.read();
      expect(fake.launches.slice(first).map((l) => l.entry)).toEqual(expectEntries);
      const want = await cpu.run(pagedAttention, inputs(cpu), { scale: 0 })[0]!.read();
      expect(compareOutputs('f32', got, want, TIGHT)).toBeUndefined();
    } finally {
      dispose();
    }
  }

  it('paged: 3 sequences of [100, 0, 37] over pages of 16 in one pass, an idle one left zero', async () => {
    await expectPagedAsCpu({ nHeads: 8, nKvHeads: 2, headDim: 64, pageSize: 16, seqLens: [100, 0, 37] }, [
      'attention_mma',
    ]);
  }, 120_000);

  it('paged: 3 sequences of [300, 0, 37] in splits, the idle one merged to zero', async () => {
    await expectPagedAsCpu({ nHeads: 8, nKvHeads: 2, headDim: 64, pageSize: 16, seqLens: [300, 0, 37] }, [
      'attention_mma_split',
    ]);
  }, 120_000);

  it('paged: pages of 32 rows (two tiles a page), headDim 128, 4 query heads a kv head', async () => {
    await expectPagedAsCpu({ nHeads: 8, nKvHeads: 2, headDim: 128, pageSize: 32, seqLens: [70, 300] }, [
      'attention_mma_split',
    ]);
  }, 120_000);

  it('paged: pages of 8 rows (a tile would span two) stay on the CUDA-core kernel', async () => {
    await expectPagedAsCpu({ nHeads: 4, nKvHeads: 1, headDim: 64, pageSize: 8, seqLens: [30] }, [
      'attention',
    ]);
  }, 120_000);
});
