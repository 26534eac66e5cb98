import { type Backend, createBackend, createCpuBackend, probeBackends } from '@rayo/core';
import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { AdamW, LossScaler, trainStep } from '@rayo/train';
import { describe, expect, it } from 'vitest';
import { parityGate } from './parity.js';
import { expectReplayMatchesEager } from './replayParity.testkit.js';
import { buildWorkload, type WorkloadSpec } from './workload.js';

// Training under the 'f16' precision policy: each linear layer's products
// round their operands to f16 and sum in f32, with dynamic loss scaling
// (parityGate trains f16 with a LossScaler); weights, gradients and AdamW stay f32.

const cpu = (): Backend => createCpuBackend();
/**
 * f16 keeps 11 mantissa bits (a rounding moves a value by at most 2^-12 of
 * itself): over a few steps the losses of the two policies stay within a few
 * 1e-3 of each other and the gradient norms within a percent.
 */
const F16_VS_F32 = { lossTolerance: 5e-3, gradNormTolerance: 0.02 };
/** The same policy on two backends: a GPU may keep its f32 activations exact (as matmul's spec allows) and sums in another order. */
const F16_ACROSS_BACKENDS = { lossTolerance: 5e-3, gradNormTolerance: 0.02 };

/** A two-block language model that learns its next-token rule in a few dozen steps. */
const LEARNER: WorkloadSpec = {
  kind: 'transformer',
  vocab: 16,
  dim: 32,
  heads: 2,
  hidden: 48,
  blocks: 2,
  seq: 8,
  batch: 4,
};

/** The losses of `steps` eager AdamW steps of `spec` (under 'f16' with a loss scaler) on `backend`. */
async function losses(backend: Backend, spec: WorkloadSpec, steps: number): Promise<number[]> {
  const work = buildWorkload(backend, spec, 1);
  const optimizer = new AdamW(work.model.namedParameters(), { lr: 3e-3 });
  const lossScaler = spec.precision === 'f16' ? new LossScaler(backend) : undefined;
  try {
    const out: number[] = [];
    for (let i = 0; i < steps; i++) {
      const r = await trainStep({
        backend,
        optimizer,
        loss: (tape) => work.loss(tape),
        clipNorm: 1,
        ...(lossScaler ? { lossScaler } : {}),
      });
      expect(r.skipped ?? false, `step ${i}`).toBe(false);
      out.push(r.loss!);
    }
    return out;
  } finally {
    lossScaler?.dispose();
    optimizer.dispose();
    work.dispose();
  }
}

/** A 2-block language model trains under 'f16' to within 2% of f32's loss, and learns. */
async function expectTrainsLikeF32(make: () => Backend | Promise<Backend>, steps: number): Promise<void> {
  const backend = await make();
  try {
    const exact = await losses(backend, { ...LEARNER, precision: 'f32' }, steps);
    const half = await losses(backend, { ...LEARNER, precision: 'f16' }, steps);
    expect(half[steps - 1]!).toBeLessThan(0.7 * half[0]!);
    expect(Math.abs(half[steps - 1]! - exact[steps - 1]!)).toBeLessThan(0.02 * exact[steps - 1]!);
    expect(half).not.toEqual(exact);
  } finally {
    backend.dispose();
  }
}

/** The replay check under 'f16' with loss scalers growing every 2 steps: four finite steps double 2^16 twice. */
async function expectF16ReplayMatchesEager(
  backend: Backend,
  spec: WorkloadSpec,
  tolerance: number,
): Promise<void> {
  const r = await expectReplayMatchesEager(backend, spec, tolerance, { growthInterval: 2 });
  expect(r.scale).toBe(2 ** 18);
  expect(r.stepCount).toBe(4);
}

describe("the 'f16' policy on cpu", () => {
  for (const model of ['mlp', 'transformer'] as const) {
    it(`${model}: trains as f32 does within f16's rounding, and does round`, async () => {
      const report = await parityGate(cpu, cpu, {
        model,
        steps: 6,
        precisions: ['f32', 'f16'],
        ...F16_VS_F32,
      });
      expect(report.failures).toEqual([]);
      expect(report.maxLossDiff).toBeGreaterThan(0);
      expect(report.steps[5]!.lossB).toBeLessThan(report.steps[0]!.lossB);
      expect(report.kernels).toEqual(expect.arrayContaining(['cast', 'updateLossScale', 'multiTensorAdamw']));
    });
  }

  it('a two-block language model reaches the loss f32 reaches', async () => {
    await expectTrainsLikeF32(cpu, 30);
  }, 120_000);

  it('a replayed step gives the eager step’s losses and parameters', async () => {
    await expectF16ReplayMatchesEager(createCpuBackend(), { ...LEARNER, blocks: 1, precision: 'f16' }, 1e-6);
  });
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)("the 'f16' policy on wgpu", () => {
  for (const model of ['mlp', 'transformer'] as const) {
    it(`${model}: the cpu's f16 steps within f16 rounding over 4 steps`, async () => {
      const report = await parityGate(cpu, () => createBackend('wgpu'), {
        model,
        steps: 4,
        precisions: ['f16', 'f16'],
        ...F16_ACROSS_BACKENDS,
      });
      expect(report.failures).toEqual([]);
    }, 120_000);
  }

  it('a two-block language model reaches the loss f32 reaches', async () => {
    await expectTrainsLikeF32(() => createBackend('wgpu'), 30);
  }, 300_000);

  it('a replayed step gives the eager step’s losses and parameters', async () => {
    const spec: WorkloadSpec = {
      kind: 'mlp',
      sizes: [13, 24, 5],
      activation: 'gelu',
      batch: 7,
      precision: 'f16',
    };
    await expectF16ReplayMatchesEager(await createBackend('wgpu'), spec, 1e-5);
  }, 120_000);
});

describe("the 'f16' policy on emulated cuda", () => {
  for (const model of ['mlp', 'transformer'] as const) {
    it(`${model}: trains as the cpu does`, async () => {
      const emulated = createEmulatedGpu({ multiprocessors: 4 });
      emulated.cpu.dispose();
      const report = await parityGate(cpu, () => emulated.gpu, {
        model,
        steps: 2,
        precisions: ['f16', 'f16'],
        ...F16_ACROSS_BACKENDS,
      });
      expect(report.failures).toEqual([]);
    }, 300_000);
  }
});
