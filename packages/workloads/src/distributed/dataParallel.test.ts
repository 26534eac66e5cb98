import { type Communicator, SingleRankCommunicator, type Tensor } from '@rayo/core';
import { CudaBackend, CudaDriver, NcclCommunicator } from '@rayo/cuda-ptx';
import { AdamW, crossEntropy, DataParallel, dataParallelStep, MLP } from '@rayo/train';
import { describe, expect, it } from 'vitest';
// The emulated GPU and the fake NCCL are cuda-ptx's test doubles, not part of its API.
import { CollectiveLibCuda } from '../../../cuda-ptx/src/nccl/testing/collectiveLibCuda.js';
import { FakeNccl } from '../../../cuda-ptx/src/nccl/testing/fakeNccl.js';
import { PtxInterpreter } from '../../../cuda-ptx/src/testing/ptxInterpreter.js';

const FEATURES = [0.5, -1, 2, 1, 0, -0.5, -2, 1.5, 0.25, 1, 1, -1];
const LABELS = [1, 0, 1, 0];
const STEPS = 3;

/** Trains an MLP on `rows` of the global batch with `communicator`; returns the losses and the first weight. */
async function train(backend: CudaBackend, communicator: Communicator, rows: readonly [number, number]) {
  const model = new MLP(backend, [3, 8, 2], { seed: 7 });
  const parallel = new DataParallel({ communicator, model, bucketBytes: 64 });
  parallel.broadcastParameters();
  const optimizer = new AdamW(model.namedParameters(), { lr: 0.05 });
  const [start, end] = rows;
  const x: Tensor = backend.upload(FEATURES.slice(3 * start, 3 * end), [end - start, 3]);
  const y: Tensor = backend.upload(new Int32Array(LABELS.slice(start, end)), [end - start], 'i32');
  const losses: number[] = [];
  for (let step = 0; step < STEPS; step++) {
    const { loss } = await dataParallelStep({
      backend,
      optimizer,
      parallel,
      clipNorm: 1,
      loss: (tape) => crossEntropy(tape, model.forward(tape, tape.constant(x)), y),
    });
    losses.push(loss!);
  }
  return { losses, weight: Array.from(await model.parameters()[0]!.value.read()) };
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
});
