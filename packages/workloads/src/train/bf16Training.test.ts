import { type Backend, createBackend, createCpuBackend, probeBackends } from '@rayo/core';
import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { parityGate } from './parity.js';
import { expectReplayMatchesEager } from './replayParity.testkit.js';
import type { WorkloadSpec } from './workload.js';

// Training under the 'bf16' precision policy: every product rounds its
// operands to bf16 and sums in f32; weights, gradients and AdamW stay f32.

const cpu = (): Backend => createCpuBackend();
/**
 * bf16 keeps 8 mantissa bits (each rounding moves a value by at most 2^-9 of
 * itself): over a few steps the losses of the two policies stay within about
 * 1e-2 of each other and the gradient norms within a few percent.
 */
const BF16_VS_F32 = { lossTolerance: 2e-2, gradNormTolerance: 0.05 };
/**
 * The same policy on two backends: the cpu rounds both operands of every
 * product, a GPU may keep its f32 activations exact (as matmul's spec
 * allows) and sums in another order, so they differ by bf16 roundings too.
 */
const BF16_ACROSS_BACKENDS = { lossTolerance: 1e-2, gradNormTolerance: 0.05 };

describe("the 'bf16' policy on cpu", () => {
  for (const model of ['mlp', 'transformer'] as const) {
    it(`${model}: trains as f32 does within bf16's rounding, and does round`, async () => {
      const report = await parityGate(cpu, cpu, {
        model,
        steps: 6,
        precisions: ['f32', 'bf16'],
        ...BF16_VS_F32,
      });
      expect(report.failures).toEqual([]);
      expect(report.maxLossDiff).toBeGreaterThan(0);
      expect(report.steps[5]!.lossB).toBeLessThan(report.steps[0]!.lossB);
      expect(report.kernels).toContain('cast');
    });
  }

  it('a replayed step gives the eager step’s losses and parameters', async () => {
    const spec: WorkloadSpec = {
      kind: 'transformer',
      vocab: 11,
      dim: 8,
      heads: 2,
      hidden: 12,
      blocks: 2,
      seq: 5,
      batch: 3,
      precision: 'bf16',
    };
    await expectReplayMatchesEager(createCpuBackend(), spec, 1e-6);
  });
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)("the 'bf16' policy on wgpu", () => {
  for (const model of ['mlp', 'transformer'] as const) {
    it(`${model}: the cpu's bf16 steps within bf16 rounding over 4 steps`, async () => {
      const report = await parityGate(cpu, () => createBackend('wgpu'), {
        model,
        steps: 4,
        precisions: ['bf16', 'bf16'],
        ...BF16_ACROSS_BACKENDS,
      });
      expect(report.failures).toEqual([]);
    }, 120_000);
  }

  it('a replayed step gives the eager step’s losses and parameters', async () => {
    const spec: WorkloadSpec = {
      kind: 'mlp',
      sizes: [13, 24, 5],
      activation: 'gelu',
      batch: 7,
      precision: 'bf16',
    };
    await expectReplayMatchesEager(await createBackend('wgpu'), spec, 1e-5);
  }, 120_000);
});

describe("the 'bf16' policy on emulated cuda (sm_90)", () => {
  // 18 rows of 64 and 40 features: every linear layer's three products are
  // larger than 16 on both sides, so they take the tensor-core kernels; one
  // head of 64, so attention takes the tensor-core flash kernels.
  const spec: WorkloadSpec = {
    kind: 'transformer',
    vocab: 24,
    dim: 64,
    heads: 1,
    hidden: 40,
    blocks: 1,
    seq: 9,
    batch: 2,
  };

  it('trains as the cpu does, its products on tensor cores', async () => {
    const emulated = createEmulatedGpu({ multiprocessors: 4 });
    emulated.cpu.dispose();
    const tensorCore = () =>
      emulated.fake.launches.filter((l) => l.entry === 'matmul_mma' || l.entry === 'matmul_wgmma').length;
    const report = await parityGate(cpu, () => emulated.gpu, {
      workload: spec,
      // One step: the interpreter runs every tensor-core tile in full.
      steps: 1,
      precisions: ['bf16', 'bf16'],
      ...BF16_ACROSS_BACKENDS,
    });
    expect(report.failures).toEqual([]);
    // 8 linear layers (q, k, v, o, gate, up, down, head) × (forward, dX, dW).
    expect(tensorCore()).toBe(8 * 3);
    expect(emulated.fake.launches.map((l) => l.entry).filter((e) => e.startsWith('flash_attention'))).toEqual(
      ['flash_attention_mma_forward', 'flash_attention_mma_dq', 'flash_attention_mma_dkdv'],
    );
  }, 300_000);
});
