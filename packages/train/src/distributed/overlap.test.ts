import {
  type CollectiveOptions,
  type Communicator,
  createCpuBackend,
  type ReduceOp,
  SingleRankCommunicator,
  type Tensor,
} from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { crossEntropy, embedding, matmul } from '../autograd/ops/index.js';
import type { Tape } from '../autograd/tape.js';
import { saveCheckpoint } from '../checkpoint/checkpoint.js';
import { MLP } from '../nn/mlp.js';
import { Parameter } from '../nn/module.js';
import { AdamW } from '../optim/adamw.js';
import { DataParallel } from './dataParallel.js';
import { ReplayedDataParallelStep } from './replayedStep.js';
import { dataParallelStep } from './step.js';

/** A communicator of one rank that notes the collectives it is asked for, in order. */
function loggingCommunicator(inner: Communicator, log: string[]): Communicator {
  return {
    get rank() {
      return inner.rank;
    },
    get size() {
      return inner.size;
    },
    get backend() {
      return inner.backend;
    },
    get failure() {
      return inner.failure;
    },
    allReduce(tensors: readonly Tensor[], op?: ReduceOp, options?: CollectiveOptions) {
      log.push(`allReduce(${tensors.length}${options?.overlap ? ', overlap' : ''})`);
      inner.allReduce(tensors, op, options);
    },
    markOverlapped() {
      const mark = { index: log.filter((l) => l.startsWith('mark')).length, round: 0 };
      log.push(`mark(${mark.index})`);
      return mark;
    },
    joinOverlapped(mark) {
      log.push(mark ? `join(${mark.index})` : 'join');
      inner.joinOverlapped(mark);
    },
    broadcast: (t, root) => inner.broadcast(t, root),
    allGather: (i, o, options) => {
      log.push(`allGather${options?.overlap ? '(overlap)' : ''}`);
      inner.allGather(i, o, options);
    },
    reduceScatter: (i, o, op, options) => {
      log.push(`reduceScatter${options?.overlap ? '(overlap)' : ''}`);
      inner.reduceScatter(i, o, op, options);
    },
    barrier: () => inner.barrier(),
    abort: (reason) => inner.abort(reason),
    dispose: () => inner.dispose(),
  };
}

const FEATURES = [0.5, -1, 2, 1, 0, -0.5, -2, 1.5, 0.25, 1, 1, -1];
const LABELS = [1, 0, 1, 0];

/** An MLP of three fused linear layers (weight and bias final together, layer by layer) trained a few steps. */
async function train(options: { overlap: boolean; replayed: boolean; bucketBytes: number; log?: string[] }) {
  const backend = createCpuBackend();
  const model = new MLP(backend, [3, 8, 8, 2], { seed: 11 });
  const log = options.log ?? [];
  const communicator = loggingCommunicator(new SingleRankCommunicator(backend), log);
  const parallel = new DataParallel({ communicator, model, bucketBytes: options.bucketBytes });
  const optimizer = new AdamW(model.namedParameters(), { lr: 0.05 });
  const x = backend.upload(FEATURES, [4, 3]);
  const y = backend.upload(new Int32Array(LABELS), [4], 'i32');
  const loss = (tape: Tape) => crossEntropy(tape, model.forward(tape, tape.constant(x)), y);
  const { overlap } = options;
  const replayed = options.replayed
    ? new ReplayedDataParallelStep({ backend, optimizer, parallel, loss, clipNorm: 1, overlap })
    : undefined;
  const losses: number[] = [];
  for (let step = 0; step < 3; step++) {
    const r = replayed
      ? await replayed.run()
      : await dataParallelStep({ backend, optimizer, parallel, loss, clipNorm: 1, overlap });
    losses.push(r.loss!);
  }
  const segments = replayed?.segments;
  replayed?.dispose();
  const params = await Promise.all(model.parameters().map(async (p) => Array.from(await p.value.read())));
  return { losses, params, segments, buckets: parallel.buckets.map((b) => b.names) };
}

describe('overlapping the gradient all-reduce with backward', () => {
  it('records backward as one segment per point where buckets become final', async () => {
    const log: string[] = [];
    const r = await train({ overlap: true, replayed: true, bucketBytes: 4, log });
    // One bucket per parameter, last layer first: [l2.bias, l2.weight, l1.bias, ...].
    expect(r.buckets).toHaveLength(6);
    expect(r.buckets[0]![0]).toMatch(/bias/);
    // A fused linear layer finishes its weight and bias together: three cuts.
    expect(r.segments!.map((s) => s.buckets)).toEqual([
      [0, 1],
      [2, 3],
      [4, 5],
    ]);
    for (const s of r.segments!) expect(s.kernels).toBeGreaterThan(0);
    // Per step: six overlapped bucket all-reduces, one join, then the loss (not overlapped).
    const step = [...Array(6).fill('allReduce(1, overlap)'), 'join', 'allReduce(1)'];
    expect(log).toEqual([...step, ...step, ...step]);
  });

  it('cuts nowhere with one bucket, and records one batch without overlap', async () => {
    const one = await train({ overlap: true, replayed: true, bucketBytes: 2 ** 20 });
    expect(one.segments!.map((s) => s.buckets)).toEqual([[0]]);
    const log: string[] = [];
    const off = await train({ overlap: false, replayed: true, bucketBytes: 4, log });
    expect(off.segments!.map((s) => s.buckets)).toEqual([[0, 1, 2, 3, 4, 5]]);
    expect(log.slice(0, 8)).toEqual([...Array(6).fill('allReduce(1)'), 'join', 'allReduce(1)']);
  });

  it('gives the same losses and parameters, to the bit, overlapped or not, eager or replayed', async () => {
    for (const replayed of [false, true]) {
      const on = await train({ overlap: true, replayed, bucketBytes: 40 });
      const off = await train({ overlap: false, replayed, bucketBytes: 40 });
      expect(on.losses).toEqual(off.losses);
      expect(on.params).toEqual(off.params);
      expect(on.losses[2]).toBeLessThan(on.losses[0]!);
    }
  });

  it('gathers sharded parameters ahead: each piece of the next forward waits for the buckets it reads first', async () => {
    const backend = createCpuBackend();
    const model = new MLP(backend, [3, 8, 8, 2], { seed: 11 });
    const log: string[] = [];
    const communicator = loggingCommunicator(new SingleRankCommunicator(backend), log);
    const parallel = new DataParallel({ communicator, model, bucketBytes: 4, shardOptimizer: true });
    const optimizer = parallel.createAdamW({ lr: 0.05 });
    const x = backend.upload(FEATURES, [4, 3]);
    const y = backend.upload(new Int32Array(LABELS), [4], 'i32');
    const loss = (tape: Tape) => crossEntropy(tape, model.forward(tape, tape.constant(x)), y);
    const step = new ReplayedDataParallelStep({
      backend,
      optimizer,
      parallel,
      loss,
      gatherAhead: true,
      forwardCutKernels: 1,
    });
    await step.run();
    // Buckets last layer first (bias, weight): the forward reads 5 and 4, then 3 and 2, then 1 and 0.
    expect(step.forward.map((f) => f.buckets)).toEqual([
      [5, 4],
      [3, 2],
      [1, 0],
    ]);
    for (const f of step.forward) expect(f.kernels).toBeGreaterThan(0);
    const gathers = [5, 4, 3, 2, 1, 0].flatMap((_, i) => ['allGather(overlap)', `mark(${i})`]);
    // Gathered in that order and left running: no join at the end of the step.
    expect(log).toEqual([...Array(6).fill('reduceScatter(overlap)'), 'join', 'allReduce(1)', ...gathers]);
    log.length = 0;
    await step.run();
    // The next run's forward pieces wait for marks 0–1, 2–3, 4–5 before they run.
    expect(log.slice(0, 6)).toEqual(['join(0)', 'join(1)', 'join(2)', 'join(3)', 'join(4)', 'join(5)']);
    // A checkpoint reads the parameters after the gathers left running: it joins them first.
    log.length = 0;
    await saveCheckpoint({ model, optimizer, step: 2 });
    expect(log[0]).toBe('join');
    step.dispose();
    expect(log.at(-1)).toBe('join');
    // By default a piece holds at least MIN_CUT_KERNELS kernels: this small forward stays whole.
    const whole = new ReplayedDataParallelStep({ backend, optimizer, parallel, loss, gatherAhead: true });
    await whole.run();
    expect(whole.forward.map((f) => f.buckets)).toEqual([[5, 4, 3, 2, 1, 0]]);
    whole.dispose();
  });

  it('all-reduces a tied weight only once backward has reached its first use', async () => {
    const backend = createCpuBackend();
    // An embedding whose table is also the output head, and a projection between them.
    const table = new Parameter(backend.upload([0.1, -0.2, 0.3, 0.4, 0.5, -0.6], [3, 2]), 'table');
    const proj = new Parameter(backend.upload([1, 0.5, -0.5, 1], [2, 2]), 'proj');
    const log: string[] = [];
    const communicator = loggingCommunicator(new SingleRankCommunicator(backend), log);
    const parallel = new DataParallel({ communicator, model: [table, proj], bucketBytes: 4 });
    const optimizer = new AdamW([table, proj], { lr: 0.1 });
    const ids = backend.upload(new Int32Array([2, 0]), [2], 'i32');
    const step = new ReplayedDataParallelStep({
      backend,
      optimizer,
      parallel,
      loss: (tape) => {
        const h = matmul(tape, embedding(tape, table, ids), proj);
        const logits = matmul(tape, h, table, { transB: true });
        return crossEntropy(tape, logits, ids);
      },
    });
    await step.run();
    // Buckets: [proj], [table]. proj is final after its product; table, used first by the
    // embedding, only at the end, although the head's product contributes to it first.
    expect(parallel.buckets.map((b) => b.names)).toEqual([['proj'], ['table']]);
    expect(step.segments.map((s) => s.buckets)).toEqual([[0], [1]]);
    step.dispose();
  });
});
