import { add } from '@rayo/core';
import { CollectiveLibCuda, FakeNccl, PtxInterpreter } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CudaBackend } from '../backend.js';
import { CudaDriver } from '../driver/driver.js';
import { NcclCommunicator } from './ncclCommunicator.js';

describe('collectives between batches (CUDA graphs) on the emulated GPU', () => {
  it('runs a batch recorded after an all-reduce on the reduced values, whatever order the ranks reach it in', async () => {
    const cuda = new CollectiveLibCuda();
    new PtxInterpreter(cuda).attach();
    const backends = [0, 1].map(() => new CudaBackend(new CudaDriver(cuda)));
    const comms = await NcclCommunicator.createGroup(backends, {
      lib: new FakeNccl(cuda),
      abortOnSignals: false,
    });
    // A step as data parallelism runs it: a batch, the all-reduce between batches, another batch.
    const step = async (rank: number) => {
      const backend = backends[rank]!;
      const x = backend.upload([1 + 2 * rank, 2 + 2 * rank], [2]);
      const before = backend.batch();
      const [y] = before.run(add, [x, x]);
      await before.submit();
      comms[rank]!.allReduce([y!], 'sum');
      const after = backend.batch();
      const [z] = after.run(add, [y!, y!]);
      await after.submit();
      return Array.from(await z!.read());
    };
    // Rank 0's second batch is launched while its all-reduce still waits for rank 1.
    const results = await Promise.all([step(0), step(1)]);
    // y: [2, 4] and [6, 8], summed [8, 12]; z = 2y.
    expect(results).toEqual([
      [16, 24],
      [16, 24],
    ]);
    await Promise.all(comms.map((c) => c.dispose()));
  });
});
