import { type Backend, createBackend, createCpuBackend, probeBackends, type Tensor } from '@rayo/core';
import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { AdamW, type BlockCheckpointing, ReplayedStep, Rng, type StepResult, trainStep } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';
import { SMALL_TRANSFORMER } from './smallWorkload.js';
import { buildWorkload, type TransformerWorkloadSpec } from './workload.js';

// train-bench's GPT-style workload at a small, odd size, with and without its blocks checkpointed.
const SPEC = SMALL_TRANSFORMER;
const STEPS = 3;

interface Training {
  readonly losses: number[];
  readonly norms: number[];
  readonly params: Float32Array[];
  readonly peakBytes: number;
}

/** Fresh random token ids and targets for step `i`: the same on every run. */
function batchOf(spec: TransformerWorkloadSpec, i: number): { ids: Int32Array; targets: Int32Array } {
  const rng = new Rng(1000 + i);
  const draw = () => Int32Array.from({ length: spec.seq * spec.batch }, () => rng.int(spec.vocab));
  return { ids: draw(), targets: draw() };
}

/**
 * `STEPS` AdamW steps (clipping, norms read) of a fresh model on fresh data
 * each step, eagerly (`trainStep`) or recorded once and replayed
 * (`ReplayedStep`); the peak of allocated device bytes from the start.
 */
async function train(
  backend: Backend,
  spec: TransformerWorkloadSpec,
  checkpoint: BlockCheckpointing,
  replayed: boolean,
  steps: number,
): Promise<Training> {
  backend.emptyCache();
  backend.resetPeakMemory();
  const work = buildWorkload(backend, { ...spec, checkpoint }, 7);
  const optimizer = new AdamW(work.model.namedParameters(), { lr: 0.01 });
  const shapes = { ids: [spec.seq, spec.batch], targets: [spec.seq * spec.batch] };
  const step = new ReplayedStep({
    backend,
    optimizer,
    inputs: { ids: { shape: shapes.ids, dtype: 'i32' }, targets: { shape: shapes.targets, dtype: 'i32' } },
    loss: (tape, inputs) => work.lossOn(tape, inputs),
    clipNorm: 1,
    readGradNorm: true,
  });
  const losses: number[] = [];
  const norms: number[] = [];
  try {
    for (let i = 0; i < steps; i++) {
      const { ids, targets } = batchOf(spec, i);
      let result: StepResult;
      if (replayed) {
        result = await step.run({
          ids: { data: ids, shape: shapes.ids },
          targets: { data: targets, shape: shapes.targets },
        });
      } else {
        const inputs: Record<string, Tensor> = {
          ids: backend.upload(ids, shapes.ids, 'i32'),
          targets: backend.upload(targets, shapes.targets, 'i32'),
        };
        result = await trainStep({
          backend,
          optimizer,
          loss: (tape) => work.lossOn(tape, inputs),
          clipNorm: 1,
          readGradNorm: true,
        });
        for (const t of Object.values(inputs)) t.dispose();
      }
      losses.push(result.loss!);
      norms.push(result.gradNorm!);
    }
    const params = await Promise.all(
      work.model.parameters().map(async (p) => Float32Array.from(await p.value.read())),
    );
    return { losses, norms, params, peakBytes: backend.memory().peakAllocatedBytes };
  } finally {
    step.dispose();
    optimizer.dispose();
    work.dispose();
  }
}

/**
 * Trains with and without checkpointed blocks and expects the same losses,
 * norms and weights (bit for bit: the recompute runs the same kernels on the
 * same inputs, and every backend's kernels are deterministic) and a lower
 * peak.
 */
async function expectSameTrainingInLessMemory(
  backend: Backend,
  spec: TransformerWorkloadSpec,
  replayed: boolean,
  steps = STEPS,
): Promise<void> {
  const kept = await train(backend, spec, 'none', replayed, steps);
  const recomputed = await train(backend, spec, 'blocks', replayed, steps);
  expect(recomputed.losses).toEqual(kept.losses);
  expect(recomputed.norms).toEqual(kept.norms);
  expect(recomputed.params).toHaveLength(kept.params.length);
  recomputed.params.forEach((p, i) => {
    expect(p, `parameter ${i}`).toEqual(kept.params[i]);
  });
  // Fresh data every step: the losses are those of different batches.
  expect(new Set(kept.losses).size).toBe(steps);
  expect(recomputed.peakBytes).toBeLessThan(kept.peakBytes);
}

const MODES = [
  ['eager', false],
  ['replayed', true],
] as const;

describe('checkpointed blocks on cpu', () => {
  for (const precision of ['f32', 'bf16'] as const) {
    for (const [mode, replayed] of MODES) {
      it(`${precision}, ${mode}: the same training, bit for bit, in less memory`, async () => {
        const backend = createCpuBackend();
        try {
          await expectSameTrainingInLessMemory(backend, { ...SPEC, precision }, replayed);
        } finally {
          backend.dispose();
        }
      });
    }
  }
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)('checkpointed blocks on wgpu', () => {
  const backends: Backend[] = [];
  afterAll(() => {
    for (const b of backends) b.dispose();
  });
  for (const precision of ['f32', 'bf16'] as const) {
    for (const [mode, replayed] of MODES) {
      it(`${precision}, ${mode}: the same training, bit for bit, in less memory`, async () => {
        const backend = await createBackend('wgpu');
        backends.push(backend);
        await expectSameTrainingInLessMemory(backend, { ...SPEC, precision }, replayed);
      }, 120_000);
    }
  }
});

describe('checkpointed blocks on emulated cuda', () => {
  // The interpreter runs every thread: two steps (fresh data each) of the
  // smallest model that reaches the tensor-core products and the mma flash
  // kernels, replayed as one CUDA graph per step; f32 and the composed
  // attention are checked on cpu and wgpu above.
  it('bf16 on tensor cores and the mma flash kernels, replayed (one CUDA graph per step): the same training, bit for bit, in less memory', async () => {
    const emulated = createEmulatedGpu({ multiprocessors: 4 });
    try {
      // Products larger than 16 on both sides and one head of 64: the tensor-core kernels (sm_90).
      const tensorCores: TransformerWorkloadSpec = {
        ...SPEC,
        vocab: 24,
        dim: 64,
        heads: 1,
        hidden: 40,
        blocks: 2,
        seq: 9,
        batch: 2,
        precision: 'bf16',
      };
      await expectSameTrainingInLessMemory(emulated.gpu, tensorCores, true, 2);
      const entries = new Set(emulated.fake.launches.map((l) => l.entry));
      for (const kernel of [
        'flash_attention_mma_forward',
        'flash_attention_mma_dq',
        'flash_attention_mma_dkdv',
      ]) {
        expect(entries.has(kernel), kernel).toBe(true);
      }
      expect(entries.has('matmul_mma') || entries.has('matmul_wgmma')).toBe(true);
    } finally {
      emulated.dispose();
    }
  }, 300_000);
});
