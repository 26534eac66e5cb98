import { type Communicator, SingleRankCommunicator, type Tensor } from '@rayo/core';
import { CudaBackend, CudaDriver, NcclCommunicator } from '@rayo/cuda-ptx';
// The emulated GPU and the fake NCCL are cuda-ptx's test doubles, not part of its API.
import { CollectiveLibCuda, FakeNccl, PtxInterpreter } from '@rayo/cuda-testkit';
import {
  AdamW,
  autograd,
  DataParallel,
  dataParallelStep,
  MLP,
  ReplayedDataParallelStep,
  ReplayedStep,
} from '@rayo/train';
import { describe, expect, it } from 'vitest';

const FEATURES = [0.5, -1, 2, 1, 0, -0.5, -2, 1.5, 0.25, 1, 1, -1];
const LABELS = [1, 0, 1, 0];
const STEPS = 3;

/**
 * Trains an MLP on `rows` of the global batch with `communicator` (step by
 * step, or replayed); returns the losses and the first weight.
 */
async function train(
  backend: CudaBackend,
  communicator: Communicator,
  rows: readonly [number, number],
  mode: 'eager' | 'replayed' = 'eager',
  overlap = true,
) {
  const model = new MLP(backend, [3, 8, 2], { seed: 7 });
  const parallel = new DataParallel({ communicator, model, bucketBytes: 64 });
  parallel.broadcastParameters();
  const optimizer = new AdamW(model.namedParameters(), { lr: 0.05 });
  const [start, end] = rows;
  const x: Tensor = backend.upload(FEATURES.slice(3 * start, 3 * end), [end - start, 3]);
  const y: Tensor = backend.upload(new Int32Array(LABELS.slice(start, end)), [end - start], 'i32');
  const loss = (tape: import('@rayo/train').Tape) =>
    autograd.crossEntropy(tape, model.forward(tape, tape.constant(x)), y);
  const replayed =
    mode === 'replayed'
      ? new ReplayedDataParallelStep({ backend, optimizer, parallel, loss, clipNorm: 1, overlap })
      : undefined;
  const losses: number[] = [];
  for (let step = 0; step < STEPS; step++) {
    const result = replayed
      ? await replayed.run()
      : await dataParallelStep({ backend, optimizer, parallel, clipNorm: 1, loss, overlap });
    losses.push(result.loss!);
  }
  const segments = replayed?.segments.length;
  replayed?.dispose();
  const params = await Promise.all(model.parameters().map(async (p) => Array.from(await p.value.read())));
  return { losses, weight: params[0]!, params, segments };
}

describe('data-parallel training on two emulated GPUs over the fake NCCL', () => {
  it('matches one GPU trained on the whole global batch', async () => {
    const cuda = new CollectiveLibCuda();
    new PtxInterpreter(cuda).attach();
    const single = new CudaBackend(new CudaDriver(cuda));
    const reference = await train(single, new SingleRankCommunicator(single), [0, 4]);

    const backends = [0, 1].map(() => new CudaBackend(new CudaDriver(cuda)));
    const comms = await NcclCommunicator.createGroup(backends, {
      lib: new FakeNccl(cuda),
      abortOnSignals: false,
    });
    const ranks = await Promise.all(backends.map((b, r) => train(b, comms[r]!, [2 * r, 2 * r + 2])));

    expect(reference.losses[STEPS - 1]).toBeLessThan(reference.losses[0]!);
    for (const rank of ranks) {
      for (const [i, loss] of rank.losses.entries()) expect(loss).toBeCloseTo(reference.losses[i]!, 5);
      for (const [i, w] of rank.weight.entries()) expect(w).toBeCloseTo(reference.weight[i]!, 5);
    }
    await Promise.all(comms.map((c) => c.dispose()));
  });

  it('replayed (two CUDA graphs a step and the collectives between them), matches one GPU replaying ReplayedStep', async () => {
    const cuda = new CollectiveLibCuda();
    new PtxInterpreter(cuda).attach();
    const single = new CudaBackend(new CudaDriver(cuda));
    const model = new MLP(single, [3, 8, 2], { seed: 7 });
    const optimizer = new AdamW(model.namedParameters(), { lr: 0.05 });
    const reference = new ReplayedStep({
      backend: single,
      optimizer,
      inputs: { x: { shape: [4, 3] }, y: { shape: [4], dtype: 'i32' } },
      loss: (tape, t) => autograd.crossEntropy(tape, model.forward(tape, tape.constant(t.x)), t.y),
      clipNorm: 1,
    });
    const batch = {
      x: { data: Float32Array.from(FEATURES), shape: [4, 3] },
      y: { data: Int32Array.from(LABELS), shape: [4] },
    };
    const losses: number[] = [];
    for (let step = 0; step < STEPS; step++) losses.push((await reference.run(batch)).loss!);
    const weight = Array.from(await model.parameters()[0]!.value.read());

    const backends = [0, 1].map(() => new CudaBackend(new CudaDriver(cuda)));
    const comms = await NcclCommunicator.createGroup(backends, {
      lib: new FakeNccl(cuda),
      abortOnSignals: false,
    });
    const ranks = await Promise.all(
      backends.map((b, r) => train(b, comms[r]!, [2 * r, 2 * r + 2], 'replayed')),
    );
    for (const rank of ranks) {
      for (const [i, loss] of rank.losses.entries()) expect(loss).toBeCloseTo(losses[i]!, 5);
      for (const [i, w] of rank.weight.entries()) expect(w).toBeCloseTo(weight[i]!, 5);
    }
    expect(losses[STEPS - 1]).toBeLessThan(losses[0]!);
    await Promise.all(comms.map((c) => c.dispose()));
  });

  it('gives the same losses and parameters, to the bit, with the all-reduce overlapped or after backward', async () => {
    const cuda = new CollectiveLibCuda();
    new PtxInterpreter(cuda).attach();
    const runRanks = async (mode: 'eager' | 'replayed', overlap: boolean) => {
      const backends = [0, 1].map(() => new CudaBackend(new CudaDriver(cuda)));
      const comms = await NcclCommunicator.createGroup(backends, {
        lib: new FakeNccl(cuda),
        abortOnSignals: false,
      });
      const ranks = await Promise.all(
        backends.map((b, r) => train(b, comms[r]!, [2 * r, 2 * r + 2], mode, overlap)),
      );
      await Promise.all(comms.map((c) => c.dispose()));
      return ranks;
    };
    for (const mode of ['eager', 'replayed'] as const) {
      const waitsBefore = cuda.calls.filter((c) => c.startsWith('cuStreamWaitEvent')).length;
      const on = await runRanks(mode, true);
      const waits = cuda.calls.filter((c) => c.startsWith('cuStreamWaitEvent')).length - waitsBefore;
      const off = await runRanks(mode, false);
      // The overlapped run ordered two streams through events; the other needed none.
      expect(waits).toBeGreaterThan(0);
      for (const r of [0, 1]) {
        expect(on[r]!.losses).toEqual(off[r]!.losses);
        expect(on[r]!.params).toEqual(off[r]!.params);
      }
      expect(on[0]!.params).toEqual(on[1]!.params);
      if (mode === 'replayed') {
        // Two fused layers: backward cut once per layer.
        expect(on[0]!.segments).toBe(2);
        expect(off[0]!.segments).toBe(1);
      }
    }
  });
});
