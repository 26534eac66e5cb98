import { createCpuBackend, type DeviceStorage, RayoError, SingleRankCommunicator } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { lockstepGroup } from '../../testing/lockstepGroup.js';
import { mseLoss } from '../autograd/ops/index.js';
import { trainStep } from '../loop/step.js';
import { MLP } from '../nn/mlp.js';
import { Parameter } from '../nn/module.js';
import { AdamW } from '../optim/adamw.js';
import { DataParallel, shardIndices, shardRange } from './dataParallel.js';
import { dataParallelStep } from './step.js';

describe('DataParallel', () => {
  it('buckets gradients in reverse parameter order up to the byte limit', () => {
    const cpu = createCpuBackend();
    const params = [4, 2, 2, 8, 1].map(
      (n, i) => new Parameter(cpu.upload(new Float32Array(n), [n]), `p${i}`),
    );
    const dp = new DataParallel({
      communicator: new SingleRankCommunicator(cpu),
      model: params,
      bucketBytes: 16,
    });
    expect(dp.buckets.map((b) => b.names)).toEqual([['p4'], ['p3'], ['p2', 'p1'], ['p0']]);
    expect(dp.buckets.map((b) => b.bytes)).toEqual([4, 32, 16, 16]);
  });

  it('averages every gradient across the ranks', () => {
    const backends = [createCpuBackend(), createCpuBackend()];
    const comms = lockstepGroup(backends);
    const ranks = backends.map((b, r) => {
      const w = new Parameter(b.upload([1, 2], [2]), 'w');
      const v = new Parameter(b.upload([3], [1]), 'v');
      w.grad = b.upload([r, 10 * r], [2]);
      v.grad = b.upload([4 * r], [1]);
      return { w, v, dp: new DataParallel({ communicator: comms[r]!, model: [w, v], bucketBytes: 4 }) };
    });
    for (const { dp } of ranks) dp.allReduceGradients();
    for (const { w, v } of ranks) {
      expect(Array.from(w.grad!.storage<DeviceStorage<Float32Array>>().buffer)).toEqual([0.5, 5]);
      expect(Array.from(v.grad!.storage<DeviceStorage<Float32Array>>().buffer)).toEqual([2]);
    }
  });

  it('refuses a parameter without a gradient, naming it', () => {
    const cpu = createCpuBackend();
    const w = new Parameter(cpu.upload([1], [1]), 'layer.w');
    const dp = new DataParallel({ communicator: new SingleRankCommunicator(cpu), model: [w] });
    expect(() => dp.allReduceGradients()).toThrow(RayoError);
    expect(() => dp.allReduceGradients()).toThrow(/argument 'layer.w'.*has no gradient/);
  });

  it('takes a model’s named parameters', () => {
    const cpu = createCpuBackend();
    const model = new MLP(cpu, [3, 4, 2], { seed: 1 });
    const dp = new DataParallel({ communicator: new SingleRankCommunicator(cpu), model });
    expect(dp.buckets).toHaveLength(1);
    expect(dp.buckets[0]!.names[0]).toBe(model.namedParameters().at(-1)![0]);
  });

  it('on one rank, a data-parallel step is exactly a training step', async () => {
    const run = async (parallel: boolean) => {
      const cpu = createCpuBackend();
      const model = new MLP(cpu, [3, 8, 2], { seed: 3 });
      const optimizer = new AdamW(model.namedParameters(), { lr: 1e-2 });
      const dp = new DataParallel({ communicator: new SingleRankCommunicator(cpu), model });
      dp.broadcastParameters();
      const x = cpu.upload([1, 2, 3, -1, 0.5, 2], [2, 3]);
      const y = cpu.upload([1, 0, 0, 1], [2, 2]);
      const options = {
        backend: cpu,
        optimizer,
        clipNorm: 0.5,
        readGradNorm: true,
        loss: (tape: import('../autograd/tape.js').Tape) =>
          mseLoss(tape, model.forward(tape, tape.constant(x)), tape.constant(y)),
      };
      const losses: number[] = [];
      for (let step = 0; step < 3; step++) {
        const r = parallel ? await dataParallelStep({ ...options, parallel: dp }) : await trainStep(options);
        losses.push(r.loss!);
      }
      return { losses, weights: await model.parameters()[0]!.value.read() };
    };
    const [single, parallel] = [await run(false), await run(true)];
    expect(parallel.losses).toEqual(single.losses);
    expect(Array.from(parallel.weights)).toEqual(Array.from(single.weights));
    expect(single.losses[2]).toBeLessThan(single.losses[0]!);
  });

  it('reduces metrics across the ranks', async () => {
    const cpu = createCpuBackend();
    const dp = new DataParallel({ communicator: new SingleRankCommunicator(cpu), model: [] });
    expect(await dp.reduceMetrics({ loss: 2.5, tokens: 7 })).toEqual({ loss: 2.5, tokens: 7 });
  });
});

describe('sharding', () => {
  it('splits a global batch evenly and refuses an uneven split', () => {
    expect(shardRange(8, 1, 4)).toEqual({ start: 2, end: 4 });
    expect(() => shardRange(6, 0, 4)).toThrow(/globalBatch.*a positive multiple of 4/);
    expect(() => shardRange(8, 4, 4)).toThrow(/rank/);
  });

  it('deals one shared permutation round-robin, padded to a multiple of the ranks', () => {
    const shards = [0, 1, 2].map((rank) =>
      shardIndices(7, { rank, size: 3, shuffle: true, seed: 5, epoch: 1 }),
    );
    expect(shards.map((s) => s.length)).toEqual([3, 3, 3]);
    const all = shards.flat();
    expect(new Set(all).size).toBe(7);
    expect(shardIndices(5, { rank: 1, size: 2 })).toEqual([1, 3, 0]);
    const otherEpoch = shardIndices(7, { rank: 0, size: 3, shuffle: true, seed: 5, epoch: 2 });
    expect(shardIndices(7, { rank: 0, size: 3, shuffle: true, seed: 5, epoch: 1 })).toEqual(shards[0]);
    expect(otherEpoch).not.toEqual(shards[0]);
  });
});
