import { type Backend, createCpuBackend, RayoError, SingleRankCommunicator } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { lockstepGroup } from '../../testing/lockstepGroup.js';
import { Parameter } from '../nn/module.js';
import { AdamW } from '../optim/adamw.js';
import { gradNorm } from '../optim/clip.js';
import { DataParallel } from './dataParallel.js';
import type { ShardedAdamW } from './shardedAdamW.js';

const W = [0.5, -1, 2, 0.25, 1.5, -0.75];
const B = [0.1, -0.2, 0.3];
/** Each rank's gradients of w (6 elements: splits over 2 and 3 ranks) and b (3: over 3 only). */
const GRADS = [
  { w: [1, -2, 3, 0.5, -1, 2], b: [0.5, 1, -1] },
  { w: [-3, 1, 0.5, 2, 2, -1], b: [1, -2, 0] },
  { w: [0.25, 0.5, -1, 1, 0, 3], b: [-1, 0.5, 2] },
];
const MAX_NORM = 1.5;
const LR = 0.1;

function modelOn(backend: Backend): Parameter[] {
  return [new Parameter(backend.upload(W, [2, 3]), 'w'), new Parameter(backend.upload(B, [3]), 'b')];
}

/** One AdamW step on one rank with the ranks' mean gradients, clipped by their norm. */
async function reference(ranks: number): Promise<number[][]> {
  const cpu = createCpuBackend();
  const [w, b] = modelOn(cpu);
  const mean = (key: 'w' | 'b') =>
    GRADS[0]![key].map((_, j) => GRADS.slice(0, ranks).reduce((s, g) => s + g[key][j]!, 0) / ranks);
  w!.grad = cpu.upload(mean('w'), [2, 3]);
  b!.grad = cpu.upload(mean('b'), [3]);
  const optimizer = new AdamW(
    [
      ['w', w!],
      ['b', b!],
    ],
    { lr: LR, noDecay: (name) => name === 'b' },
  );
  optimizer.step(cpu, { norm: gradNorm([w!, b!]), maxNorm: MAX_NORM });
  return [Array.from(await w!.value.read()), Array.from(await b!.value.read())];
}

/** The same step sharded over `ranks` lockstep ranks, phase by phase as the steps run it. */
async function sharded(ranks: number) {
  const backends = Array.from({ length: ranks }, () => createCpuBackend());
  const comms = lockstepGroup(backends);
  const all = backends.map((backend, r) => {
    const params = modelOn(backend);
    const parallel = new DataParallel({ communicator: comms[r]!, model: params, shardOptimizer: true });
    const optimizer = parallel.createAdamW({ lr: LR, noDecay: (name) => name === 'b' }) as ShardedAdamW;
    params[0]!.grad = backend.upload(GRADS[r]!.w, [2, 3]);
    params[1]!.grad = backend.upload(GRADS[r]!.b, [3]);
    return { backend, params, parallel, optimizer };
  });
  // Each phase is a collective: every rank calls it before the next phase.
  for (const { backend, parallel } of all) {
    for (const i of parallel.buckets.keys()) {
      parallel.stageBucket(i, backend, (p) => p.grad);
      parallel.reduceBucket(i, (p) => p.grad);
    }
  }
  const locals = all.map(({ backend, optimizer }) => optimizer.localNorm(backend));
  all.forEach(({ optimizer }, r) => {
    optimizer.gatherNorms(locals[r]!);
  });
  for (const { backend, optimizer } of all) {
    optimizer.step(backend, { norm: optimizer.globalNorm(backend), maxNorm: MAX_NORM });
  }
  for (const { optimizer } of all) optimizer.gatherParameters();
  return Promise.all(
    all.map(async ({ params, optimizer }) => ({
      params: await Promise.all(params.map(async (p) => Array.from(await p.value.read()))),
      state: optimizer.stateTensors().map(([name, t]) => [name, t.size] as const),
      lengths: optimizer.bucketLengths,
      moved: params.map((p) => p.value.isView),
    })),
  );
}

describe('ShardedAdamW over lockstep ranks', () => {
  it('updates as AdamW on one rank with the mean gradients, clipped by the global norm', async () => {
    for (const ranks of [2, 3]) {
      const expected = await reference(ranks);
      for (const rank of await sharded(ranks)) {
        for (const [j, param] of rank.params.entries()) {
          for (const [i, value] of param.entries()) expect(value).toBeCloseTo(expected[j]![i]!, 6);
        }
      }
    }
  });

  it('lays each bucket out flat and keeps m and v only for the pieces in its block', async () => {
    // One bucket, in reverse model order: b at 0–2, w at 4–9 (16-byte aligned).
    // 2 ranks: blocks of 8, so b and w's first 4 on rank 0, w's last 2 on rank 1.
    const two = await sharded(2);
    expect(two.map((r) => r.lengths)).toEqual([[16], [16]]);
    expect(two.map((r) => r.moved)).toEqual([
      [true, true],
      [true, true],
    ]);
    expect(two.map((r) => r.state.map(([name, size]) => `${name} ${size}`))).toEqual([
      ['b.m 3', 'b.v 3', 'w.m 4', 'w.v 4'],
      ['w.m 2', 'w.v 2'],
    ]);
    // 3 ranks: blocks of 4: b, then w in pieces of 4 and 2.
    const three = await sharded(3);
    expect(three.map((r) => r.state.map(([name, size]) => `${name} ${size}`))).toEqual([
      ['b.m 3', 'b.v 3'],
      ['w.m 4', 'w.v 4'],
      ['w.m 2', 'w.v 2'],
    ]);
  });

  it('refuses a model too small for every rank to hold a piece, and half master weights', () => {
    const backends = [0, 1, 2, 3].map(() => createCpuBackend());
    const comms = lockstepGroup(backends);
    const tiny = (r: number) => [new Parameter(backends[r]!.zeros([3]), 'tiny')];
    expect(() =>
      new DataParallel({ communicator: comms[3]!, model: tiny(3), shardOptimizer: true }).createAdamW(),
    ).toThrow(/too small to shard.*rank 3 of 4/s);
    const half = [new Parameter(backends[0]!.zeros([8], 'bf16'), 'half')];
    expect(() =>
      new DataParallel({ communicator: comms[0]!, model: half, shardOptimizer: true }).createAdamW(),
    ).toThrow(/f32 master weights/);
  });

  it('moves the parameters back into memory of their own when disposed', async () => {
    const cpu = createCpuBackend();
    const params = modelOn(cpu);
    const parallel = new DataParallel({
      communicator: new SingleRankCommunicator(cpu),
      model: params,
      shardOptimizer: true,
    });
    const optimizer = parallel.createAdamW();
    expect(params.map((p) => p.value.isView)).toEqual([true, true]);
    optimizer.dispose();
    expect(params.map((p) => p.value.isView)).toEqual([false, false]);
    expect(Array.from(await params[0]!.value.read())).toEqual(W);
    expect(Array.from(await params[1]!.value.read())).toEqual(B.map(Math.fround));
  });

  it('refuses an optimizer that does not match the wrapper, and a second sharded one', () => {
    const cpu = createCpuBackend();
    const params = modelOn(cpu);
    const communicator = new SingleRankCommunicator(cpu);
    const shardedDp = new DataParallel({ communicator, model: params, shardOptimizer: true });
    const plain = new DataParallel({ communicator, model: params });
    const optimizer = shardedDp.createAdamW();
    expect(() => shardedDp.createAdamW()).toThrow(RayoError);
    expect(() => shardedDp.shardedOptimizer(new AdamW(params), 'step')).toThrow(
      /argument 'optimizer'.*createAdamW/,
    );
    expect(() => plain.shardedOptimizer(optimizer, 'step')).toThrow(/not sharded/);
    expect(shardedDp.shardedOptimizer(optimizer, 'step')).toBe(optimizer);
  });
});
