import { describe, expect, it } from 'vitest';
import { CollectiveError, SingleRankCommunicator } from './communicator.js';
import { createCpuBackend } from './cpu/backend.js';
import { DTypeError, InvalidArgumentError, ShapeError } from './errors.js';

describe('SingleRankCommunicator', () => {
  it('leaves tensors as they are for every reduction and broadcast', async () => {
    const cpu = createCpuBackend();
    const comm = new SingleRankCommunicator(cpu);
    const x = cpu.upload([1, -2, 3], [3]);
    for (const op of ['sum', 'avg', 'max', 'min', 'prod'] as const) comm.allReduce([x], op);
    comm.broadcast(x, 0);
    expect(Array.from(await x.read())).toEqual([1, -2, 3]);
    expect([comm.rank, comm.size, comm.failure]).toEqual([0, 1, undefined]);
  });

  it('overlaps trivially: an overlapped all-reduce is the identity and a join waits for nothing', async () => {
    const cpu = createCpuBackend();
    const comm = new SingleRankCommunicator(cpu);
    const x = cpu.upload([4, 5], [2]);
    comm.joinOverlapped();
    comm.allReduce([x], 'avg', { overlap: true });
    comm.joinOverlapped();
    expect(Array.from(await x.read())).toEqual([4, 5]);
    expect(() => comm.allReduce([x], 'mean' as 'sum', { overlap: true })).toThrow(InvalidArgumentError);
  });

  it('copies for all-gather and reduce-scatter, whatever the output’s shape', async () => {
    const cpu = createCpuBackend();
    const comm = new SingleRankCommunicator(cpu);
    const x = cpu.upload([1, 2, 3, 4], [2, 2]);
    const gathered = cpu.upload(new Float32Array(4), [1, 4]);
    comm.allGather(x, gathered);
    expect(Array.from(await gathered.read())).toEqual([1, 2, 3, 4]);
    const scattered = cpu.upload(new Float32Array(4), [4]);
    comm.reduceScatter(x, scattered, 'avg');
    expect(Array.from(await scattered.read())).toEqual([1, 2, 3, 4]);
  });

  it('checks its arguments as a multi-rank communicator does', () => {
    const cpu = createCpuBackend();
    const comm = new SingleRankCommunicator(cpu);
    const x = cpu.upload([1, 2], [2]);
    expect(() => comm.allReduce([x], 'mean' as 'sum')).toThrow(InvalidArgumentError);
    expect(() => comm.broadcast(x, 1)).toThrow(/root.*expected an integer in \[0, 1\)/);
    expect(() => comm.allGather(x, cpu.upload([1, 2, 3], [3]))).toThrow(ShapeError);
    expect(() => comm.allGather(x, cpu.upload(new Int32Array(2), [2], 'i32'))).toThrow(DTypeError);
    expect(() => comm.allReduce([createCpuBackend().upload([1], [1])])).toThrow(/another backend/);
  });

  it('refuses work after abort', async () => {
    const cpu = createCpuBackend();
    const comm = new SingleRankCommunicator(cpu);
    comm.abort('stopped');
    expect(() => comm.allReduce([])).toThrow(CollectiveError);
    await expect(comm.barrier()).rejects.toThrow(/communicator was stopped/);
  });
});
