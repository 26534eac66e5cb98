import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Tensor } from '@rayo/core';
import { CudaBackend, CudaDriver } from '@rayo/cuda-ptx';
import { FakeLibCuda } from '@rayo/cuda-testkit';
import { LlamaModel } from '@rayo/train';
import { DECODE_CONFIGS } from './decodeBench.js';
import { type HostPhases, measureHostPhases } from './hostPhases.js';
import { writeSeededLlama } from './seededLlama.js';

/**
 * The fake driver with kernels that do nothing, and, once `quiet`, graph
 * launches, copies to the device and memsets that do nothing at all (a
 * graph launch leaves the stream busy for one poll): what is left of a
 * replayed token is rayo's own host work, without a device.
 */
class QuietLibCuda extends FakeLibCuda {
  quiet = false;

  override cuGraphLaunch(exec: bigint, stream: bigint): number {
    if (!this.quiet) return super.cuGraphLaunch(exec, stream);
    // A step takes a while on a device: the first poll after a launch finds it running.
    this.busyPolls = 1;
    return 0;
  }

  override cuMemcpyHtoDAsync_v2(dst: bigint, src: ArrayBufferView, bytes: number, stream: bigint): number {
    return this.quiet ? 0 : super.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream);
  }

  override cuMemsetD32Async(dst: bigint, value: number, count: number, stream: bigint): number {
    return this.quiet ? 0 : super.cuMemsetD32Async(dst, value, count, stream);
  }
}

/**
 * The host phases of a replayed decode token (`measureHostPhases`) of a
 * small Llama with `layers` layers, bf16 weights and KV cache, on a cuda
 * backend over the fake driver. Relative figures only: the fake costs less
 * than a driver call does, and nothing runs.
 */
export async function fakeReplayPhases(options: {
  readonly layers: number;
  readonly tokens: number;
  readonly rounds: number;
}): Promise<{ readonly kernels: number; readonly rounds: HostPhases[] }> {
  const fake = new QuietLibCuda();
  fake.memoryLimit = 2 ** 32;
  fake.executor = () => {};
  const backend = new CudaBackend(new CudaDriver(fake));
  const dir = await mkdtemp(join(tmpdir(), 'rayo-fake-replay-'));
  try {
    const config = { ...DECODE_CONFIGS['llama-tiny']!, num_hidden_layers: options.layers };
    await writeSeededLlama(dir, config, 3, 'bf16');
    const model = await LlamaModel.load(backend, dir, {
      maxSequence: 64,
      weightDtype: 'bf16',
      kvCacheDtype: 'bf16',
    });
    try {
      model.prefill([1, 2, 3, 4]).dispose();
      fake.quiet = true;
      const probe = backend.batch();
      const made: Tensor[] = [];
      model.recordStep(probe, made);
      const kernels = probe.size;
      probe.dispose();
      for (const t of made) t.dispose();
      const rounds: HostPhases[] = [];
      for (let r = 0; r < options.rounds; r++) {
        rounds.push(await measureHostPhases(model, { position: 8, tokens: options.tokens, warmup: 50 }));
      }
      return { kernels, rounds };
    } finally {
      model.dispose();
    }
  } finally {
    backend.dispose();
    await rm(dir, { recursive: true, force: true });
  }
}
