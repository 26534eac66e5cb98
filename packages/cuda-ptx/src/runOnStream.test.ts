import {
  createCpuBackend,
  type DecodeStep,
  decodeStep,
  InvalidArgumentError,
  type KernelRunner,
  type Tensor,
} from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { CudaBackend } from './backend.js';
import type { CudaCommandBatch } from './batch.js';
import { CudaDriver } from './driver/driver.js';
import { runOnStream } from './runOnStream.js';

// headDim 7 keeps the kernels on one-word loads, which the interpreter runs.
const N_HEADS = 4;
const N_KV = 2;
const HEAD_DIM = 7;
const MAX_SEQ = 20;

describe('decoding steps', () => {
  const fake = new FakeLibCuda();
  new PtxInterpreter(fake).attach();
  const gpu = new CudaBackend(new CudaDriver(fake));
  const cpu = createCpuBackend();
  afterAll(() => gpu.dispose());

  const rng = new Rng(11);
  const random = (n: number) => Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
  const data = {
    kCache: random(N_KV * MAX_SEQ * HEAD_DIM),
    vCache: random(N_KV * MAX_SEQ * HEAD_DIM),
    q: random(N_HEADS * HEAD_DIM),
    k: random(2 * N_KV * HEAD_DIM),
    v: random(2 * N_KV * HEAD_DIM),
  };

  function tensors(backend: { upload(d: Float32Array, s: number[]): Tensor }, position: number): DecodeStep {
    return {
      q: backend.upload(data.q, [N_HEADS, HEAD_DIM]),
      k: backend.upload(data.k, [2, N_KV * HEAD_DIM]),
      v: backend.upload(data.v, [2, N_KV * HEAD_DIM]),
      kCache: backend.upload(data.kCache, [N_KV, MAX_SEQ, HEAD_DIM]),
      vCache: backend.upload(data.vCache, [N_KV, MAX_SEQ, HEAD_DIM]),
      position,
    };
  }

  async function expectReference(step: DecodeStep, out: Tensor): Promise<void> {
    if (typeof step.position !== 'number') throw new Error('these steps take their position as a number');
    const ref = tensors(cpu, step.position);
    const want = decodeStep(cpu, ref);
    const tolerance = { rtol: 1e-4, atol: 1e-5 };
    expect(compareOutputs('f32', await out.read(), await want.read(), tolerance)).toBeUndefined();
    expect(compareOutputs('f32', await step.kCache.read(), await ref.kCache.read())).toBeUndefined();
    expect(compareOutputs('f32', await step.vCache.read(), await ref.vCache.read())).toBeUndefined();
  }

  it('runs on the backend’s stream (asynchronous; a read waits)', async () => {
    const step = tensors(gpu, 9);
    await expectReference(step, decodeStep(gpu, step));
  });

  it('runs in a batch', async () => {
    const step = tensors(gpu, 3);
    const batch = gpu.batch() as CudaCommandBatch;
    const out = decodeStep(batch, step);
    await batch.submit();
    await expectReference(step, out);
    batch.dispose();
  });

  it('runs on a caller’s stream, ordered after the backend’s work and before its later work', async () => {
    const stream = gpu.driver.createStream();
    const step = tensors(gpu, 17);
    const first = fake.calls.length;
    const launches = fake.launches.length;
    const out = runOnStream(gpu, stream, (runner) => decodeStep(runner, step));
    // Scatter, scatter, attention: all on the caller's stream.
    expect(fake.launches.slice(launches).map((l) => l.stream)).toEqual([stream, stream, stream]);
    const calls = fake.calls.slice(first).filter((c) => /Event|Launch/.test(c));
    expect(calls).toEqual([
      'cuEventCreate',
      'cuEventCreate',
      'cuEventRecord',
      'cuStreamWaitEvent',
      'cuLaunchKernel',
      'cuLaunchKernel',
      'cuLaunchKernel',
      'cuEventRecord',
      'cuStreamWaitEvent',
    ]);
    await expectReference(step, out);
    // Warm: the same two events again, nothing created.
    const again = fake.calls.length;
    runOnStream(gpu, stream, (runner) => decodeStep(runner, tensors(gpu, 2)));
    expect(fake.calls.slice(again)).not.toContain('cuEventCreate');
    gpu.driver.destroyStream(stream);
  });

  it('gives back what it recorded when the work throws, and rejects a stream that is not a handle', () => {
    const stream = gpu.driver.createStream();
    const launches = fake.launches.length;
    const step = tensors(gpu, MAX_SEQ - 1);
    // Two new rows at the last row: the spec rejects the position before anything is enqueued.
    expect(() => runOnStream(gpu, stream, (runner: KernelRunner) => decodeStep(runner, step))).toThrow(
      InvalidArgumentError,
    );
    expect(fake.launches.length).toBe(launches);
    expect(() => runOnStream(gpu, 5 as unknown as bigint, () => 0)).toThrow(InvalidArgumentError);
    gpu.driver.destroyStream(stream);
  });
});
