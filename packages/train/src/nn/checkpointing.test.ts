import { type Backend, createCpuBackend, InvalidArgumentError, SingleRankCommunicator } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { crossEntropy } from '../autograd/ops/loss.js';
import type { Tape } from '../autograd/tape.js';
import { CausalLM } from '../causalLM.js';
import { DataParallel } from '../distributed/dataParallel.js';
import { ReplayedDataParallelStep } from '../distributed/replayedStep.js';
import { dataParallelStep } from '../distributed/step.js';
import { ReplayedStep } from '../loop/replayedStep.js';
import { trainStep } from '../loop/step.js';
import { AdamW } from '../optim/adamw.js';
import type { TrainPrecision } from '../precision.js';
import { Rng } from '../random.js';
import {
  type BlockCheckpointing,
  checkBlockCheckpointing,
  checkpointingFromName,
  checkpointingName,
  isCheckpointed,
} from './checkpointing.js';

describe('BlockCheckpointing', () => {
  it('picks blocks by policy', () => {
    const picked = (policy: BlockCheckpointing) =>
      [0, 1, 2, 3, 4, 5].filter((i) => isCheckpointed(policy, i));
    expect(picked('none')).toEqual([]);
    expect(picked('blocks')).toEqual([0, 1, 2, 3, 4, 5]);
    expect(picked({ every: 2 })).toEqual([0, 2, 4]);
    expect(picked({ every: 1 })).toEqual(picked('blocks'));
    expect([
      checkpointingName('none'),
      checkpointingName({ every: 1 }),
      checkpointingName({ every: 3 }),
    ]).toEqual(['none', 'blocks', 'every3']);
    for (const policy of ['none', 'blocks', { every: 3 }] as const) {
      expect(checkpointingFromName(checkpointingName(policy), 'test')).toEqual(policy);
    }
    expect(checkpointingFromName('every1', 'test')).toBe('blocks');
  });

  it('refuses what is not a policy, naming it', () => {
    for (const bad of ['all', { every: 0 }, { every: 1.5 }, null, 2]) {
      expect(() => checkBlockCheckpointing(bad, 'test')).toThrow(InvalidArgumentError);
    }
    for (const bad of ['every0', 'every', 'every-2', 'all']) {
      expect(() => checkpointingFromName(bad, 'test')).toThrow(InvalidArgumentError);
    }
    const backend = createCpuBackend();
    const model = new CausalLM(backend, { vocab: 5, dim: 4, heads: 1, blocks: 1 });
    expect(() => model.setCheckpointing('every' as BlockCheckpointing)).toThrow(/'none', 'blocks'/);
    expect(
      () => new CausalLM(backend, { vocab: 5, dim: 4, heads: 1, blocks: 1, checkpoint: { every: -1 } }),
    ).toThrow(/checkpoint/);
    model.dispose();
  });
});

const SIZES = { vocab: 23, dim: 12, heads: 3, hidden: 20, blocks: 3 } as const;
const [SEQ, BATCH] = [7, 2];

/** A fresh random batch per step: token ids [T, B] and targets [T·B]. */
function batchOf(step: number) {
  const rng = new Rng(100 + step);
  const draw = (n: number) => Int32Array.from({ length: n }, () => rng.int(SIZES.vocab));
  return { ids: draw(SEQ * BATCH), targets: draw(SEQ * BATCH) };
}

interface Run {
  readonly losses: number[];
  readonly norms: number[];
  readonly params: Float32Array[];
  readonly peakBytes: number;
}

/** Four AdamW steps of a fresh model on fresh data each step, eager or replayed. */
async function train(
  backend: Backend,
  checkpoint: BlockCheckpointing,
  precision: TrainPrecision,
  replayed: boolean,
): Promise<Run> {
  backend.emptyCache();
  backend.resetPeakMemory();
  const model = new CausalLM(backend, { ...SIZES, seed: 4, precision, checkpoint });
  const optimizer = new AdamW(model.namedParameters(), { lr: 0.02 });
  const step = new ReplayedStep({
    backend,
    optimizer,
    inputs: { ids: { shape: [SEQ, BATCH], dtype: 'i32' }, targets: { shape: [SEQ * BATCH], dtype: 'i32' } },
    loss: (tape, { ids, targets }) => crossEntropy(tape, model.forward(tape, ids), targets),
    clipNorm: 0.5,
    readGradNorm: true,
  });
  const losses: number[] = [];
  const norms: number[] = [];
  for (let i = 0; i < 4; i++) {
    const { ids, targets } = batchOf(i);
    let result: { loss: number | undefined; gradNorm: number | undefined };
    if (replayed) {
      result = await step.run({
        ids: { data: ids, shape: [SEQ, BATCH] },
        targets: { data: targets, shape: [SEQ * BATCH] },
      });
    } else {
      const idsTensor = backend.upload(ids, [SEQ, BATCH], 'i32');
      const targetsTensor = backend.upload(targets, [SEQ * BATCH], 'i32');
      result = await trainStep({
        backend,
        optimizer,
        loss: (tape) => crossEntropy(tape, model.forward(tape, idsTensor), targetsTensor),
        clipNorm: 0.5,
        readGradNorm: true,
      });
      idsTensor.dispose();
      targetsTensor.dispose();
    }
    losses.push(result.loss!);
    norms.push(result.gradNorm!);
  }
  const params = await Promise.all(
    model.parameters().map(async (p) => Float32Array.from(await p.value.read())),
  );
  const peakBytes = backend.memory().peakAllocatedBytes;
  step.dispose();
  optimizer.dispose();
  model.dispose();
  return { losses, norms, params, peakBytes };
}

describe('CausalLM with checkpointed blocks, on cpu', () => {
  const backend = createCpuBackend();
  for (const precision of ['f32', 'bf16'] as const) {
    for (const replayed of [false, true]) {
      it(`${precision}, ${replayed ? 'replayed' : 'eager'}: the losses, norms and weights of keeping activations, bit for bit, in less memory`, async () => {
        const kept = await train(backend, 'none', precision, replayed);
        const peaks = [kept.peakBytes];
        for (const policy of [{ every: 2 }, 'blocks'] as const) {
          const recomputed = await train(backend, policy, precision, replayed);
          expect(recomputed.losses).toEqual(kept.losses);
          expect(recomputed.norms).toEqual(kept.norms);
          recomputed.params.forEach((p, i) => {
            expect(p, `parameter ${i}`).toEqual(kept.params[i]);
          });
          peaks.push(recomputed.peakBytes);
        }
        // Checkpointing blocks 0 and 2 of 3 saves less than checkpointing all three.
        expect(peaks[1]).toBeLessThan(peaks[0]!);
        expect(peaks[2]).toBeLessThan(peaks[1]!);
      });
    }
  }
});

describe('CausalLM with checkpointed blocks, data-parallel', () => {
  /** Three steps on one rank with small buckets, backward cut into segments where buckets become final. */
  async function trainParallel(checkpoint: BlockCheckpointing, replayed: boolean) {
    const backend = createCpuBackend();
    const model = new CausalLM(backend, { ...SIZES, seed: 6, checkpoint });
    const parallel = new DataParallel({
      communicator: new SingleRankCommunicator(backend),
      model,
      bucketBytes: 4096,
    });
    const optimizer = new AdamW(model.namedParameters(), { lr: 0.02 });
    const { ids, targets } = batchOf(0);
    const idsTensor = backend.upload(ids, [SEQ, BATCH], 'i32');
    const targetsTensor = backend.upload(targets, [SEQ * BATCH], 'i32');
    const loss = (tape: Tape) => crossEntropy(tape, model.forward(tape, idsTensor), targetsTensor);
    const step = replayed
      ? new ReplayedDataParallelStep({ backend, optimizer, parallel, loss, clipNorm: 1 })
      : undefined;
    const losses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = step
        ? await step.run()
        : await dataParallelStep({ backend, optimizer, parallel, loss, clipNorm: 1 });
      losses.push(r.loss!);
    }
    const segments = step?.segments.length;
    step?.dispose();
    const params = await Promise.all(
      model.parameters().map(async (p) => Float32Array.from(await p.value.read())),
    );
    backend.dispose();
    return { losses, params, segments };
  }

  for (const replayed of [false, true]) {
    it(`${replayed ? 'replayed' : 'eager'}, overlapped: the losses and weights of keeping activations, bit for bit`, async () => {
      const kept = await trainParallel('none', replayed);
      const recomputed = await trainParallel('blocks', replayed);
      expect(recomputed.losses).toEqual(kept.losses);
      expect(recomputed.params).toEqual(kept.params);
      expect(recomputed.losses[2]).toBeLessThan(recomputed.losses[0]!);
      if (replayed) {
        // A checkpointed block's gradients are final together, after its whole backward: buckets that
        // became final inside a block now do at its end, so backward is cut at block boundaries only.
        expect(recomputed.segments).toBeLessThan(kept.segments!);
        expect(recomputed.segments).toBeGreaterThan(1);
      }
    });
  }
});
