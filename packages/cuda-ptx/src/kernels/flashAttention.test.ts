import { flashAttention, flashAttentionBackward, type KernelSpec, type Tensor } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { archJobs, BOTH_TARGETS, expectAllAssembleCleanly, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { Operand } from '../kernel.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { flashUsesMma } from './flashAttention.js';
import { FLASH_MMA_FORWARD_ENTRY, flashMmaForwardModule } from './flashAttentionMma.js';
import {
  FLASH_MMA_DKDV_ENTRY,
  FLASH_MMA_DQ_ENTRY,
  flashMmaDkdvModule,
  flashMmaDqModule,
} from './flashAttentionMmaBackward.js';
import { flashDkdvModule, flashDqModule, flashForwardModule } from './flashAttentionRows.js';

const operand = (ptr: bigint): Operand => ({ ptr, size: 1, shape: [1], dtype: 'f32', byteLength: 4 });

describe('flash attention kernel choice', () => {
  const sm90 = { computeCapability: [9, 0] as const };
  const aligned = [operand(0x1000n), operand(0x2000n)];
  it("takes tensor cores under precision 'half' for head dims 64 and 128 on sm_80 and later", () => {
    expect(flashUsesMma(sm90, 'half', 64, aligned)).toBe(true);
    expect(flashUsesMma({ computeCapability: [8, 0] }, 'half', 128, aligned)).toBe(true);
  });
  it("leaves precision 'f32', other head dims, older devices and unaligned operands to the f32 kernels", () => {
    expect(flashUsesMma(sm90, 'f32', 64, aligned)).toBe(false);
    expect(flashUsesMma(sm90, 'half', 96, aligned)).toBe(false);
    expect(flashUsesMma({ computeCapability: [7, 5] }, 'half', 64, aligned)).toBe(false);
    expect(flashUsesMma(sm90, 'half', 64, [...aligned, operand(0x3008n)])).toBe(false);
  });
});

// The emulated device is an sm_90 part: precision 'half' at head dims 64 and 128 takes the tensor cores.
describe("flash attention under precision 'half' on an emulated device", () => {
  const { gpu, cpu, fake } = useEmulatedGpu({ multiprocessors: 2 });

  /**
   * Runs `spec` on both backends on `data` (host arrays of `shapes`), the
   * gpu's outputs poisoned first; returns the entries launched.
   */
  async function check(
    spec: KernelSpec<{ scale: number; precision: 'f32' | 'half' }>,
    shapes: readonly (readonly number[])[],
    data: readonly Float32Array[],
    tolerance: readonly { rtol: number; atol: number }[],
  ): Promise<string[]> {
    const attrs = { precision: 'half' } as const;
    const want = cpu.run(
      spec,
      data.map((d, i) => cpu.upload(d, shapes[i]!)),
      attrs,
    );
    const out = want.map((t) => gpu.upload(new Float32Array(t.size).fill(Number.NaN), t.shape));
    const first = fake.launches.length;
    const got = gpu.run(
      spec,
      data.map((d, i) => gpu.upload(d, shapes[i]!)),
      attrs,
      { out },
    ) as Tensor[];
    for (let i = 0; i < want.length; i++) {
      const mismatch = compareOutputs('f32', await got[i]!.read(), await want[i]!.read(), tolerance[i]!);
      expect(mismatch, `output ${i}`).toBeUndefined();
    }
    return fake.launches.slice(first).map((l) => l.entry);
  }

  const random = (rng: Rng, shape: readonly number[]) =>
    Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng.uniform(-1.5, 1.5));

  // [T, B, heads, kv heads, headDim]: odd lengths past one tile, GQA, both head dims.
  const SHAPES = [
    [70, 1, 2, 1, 64],
    [33, 1, 2, 1, 128],
  ] as const;
  for (const [tokens, batch, heads, kvHeads, hd] of SHAPES) {
    const q = [tokens, batch, heads, hd];
    const kv = [tokens, batch, kvHeads, hd];
    it(`forward: T ${tokens}, batch ${batch}, ${heads}/${kvHeads} heads of ${hd}`, async () => {
      const rng = new Rng(tokens + hd);
      // Beyond the reference's rounding only P is rounded (2^-9 relative), averaged over the keys.
      const entries = await check(
        flashAttention,
        [q, kv, kv],
        [random(rng, q), random(rng, kv), random(rng, kv)],
        [
          { rtol: 5e-3, atol: 3e-3 },
          { rtol: 1e-4, atol: 1e-4 },
        ],
      );
      expect(entries).toEqual([FLASH_MMA_FORWARD_ENTRY]);
    }, 300_000);

    it(`backward: T ${tokens}, batch ${batch}, ${heads}/${kvHeads} heads of ${hd}`, async () => {
      const rng = new Rng(tokens * hd);
      const qkv = [random(rng, q), random(rng, kv), random(rng, kv)];
      // out and lse of the forward (so P <= 1 and D is the row's), dOut random.
      const [out, lse] = cpu.run(
        flashAttention,
        qkv.map((d, i) => cpu.upload(d, [q, kv, kv][i]!)),
      );
      const inputs = [
        ...qkv,
        (await out!.read()) as Float32Array,
        random(rng, q),
        (await lse!.read()) as Float32Array,
      ];
      // P and dS rounded beyond the reference (2^-9 relative), summed over keys or queries.
      const tolerance = { rtol: 1e-2, atol: 1e-2 };
      const entries = await check(flashAttentionBackward, [q, kv, kv, q, q, [tokens, batch, heads]], inputs, [
        tolerance,
        tolerance,
        tolerance,
      ]);
      expect(entries).toEqual([FLASH_MMA_DQ_ENTRY, FLASH_MMA_DKDV_ENTRY]);
    }, 300_000);
  }
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(
  `flash attention PTX assembles with ptxas, without spills (${gate.reason})`,
  () => {
    it.each([
      {
        what: 'forward, dq and dk and dv at head dims 7, 64 and 128',
        modules: [flashForwardModule, flashDqModule, flashDkdvModule],
        headDims: [7, 64, 128],
        archs: BOTH_TARGETS,
      },
      {
        what: 'tensor-core kernels at head dims 64 and 128 for sm_80 and sm_90',
        modules: [flashMmaForwardModule, flashMmaDqModule, flashMmaDkdvModule],
        headDims: [64, 128],
        archs: ['sm_80', 'sm_90'],
      },
    ])(
      '$what',
      ({ modules, headDims, archs }) => {
        const names = ['forward', 'dq', 'dk and dv'];
        expectAllAssembleCleanly(
          modules.flatMap((module, i) =>
            headDims.flatMap((hd) => archJobs(module(hd).emit(), `${names[i]} d${hd}`, archs)),
          ),
        );
      },
      300_000,
    );
  },
);
