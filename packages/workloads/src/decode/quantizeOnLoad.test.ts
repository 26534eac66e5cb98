import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { LlamaModel } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';
import { DECODE_CONFIGS } from './decodeBench.js';
import { writeSeededLlama } from './seededLlama.js';

// Quantizing on load on the device (emulated cuda: the real PTX in the
// interpreter) against the host path on the same device: the same weights
// bit for bit, so the same logits exactly, and the device path's kernel
// launched once per projection.

const config = DECODE_CONFIGS['llama-tiny']!;
const PROMPT = [5, 17];

describe('weights quantized on load on the device (emulated cuda)', () => {
  const { gpu, cpu, fake } = createEmulatedGpu({ multiprocessors: 2 });
  let dir: string | undefined;
  afterAll(async () => {
    gpu.dispose();
    cpu.dispose();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('gives the host path’s logits from a bf16 checkpoint, one quantizeRows launch per projection', async () => {
    dir = await mkdtemp(join(tmpdir(), 'rayo-quantize-on-load-'));
    await writeSeededLlama(dir, config, 9, 'bf16');
    const launches = () => fake.launches.filter((l) => l.entry === 'quantize_rows').length;
    const format = 'q4g32';
    const before = launches();
    using device = await LlamaModel.load(gpu, dir, { maxSequence: 16, weightFormat: format });
    expect(device.quantization).toMatchObject({ path: 'device', format });
    // 2 layers × (q, k, v, o, gate, up, down).
    expect(launches() - before).toBe(14);
    using host = await LlamaModel.load(gpu, dir, {
      maxSequence: 16,
      weightFormat: format,
      quantizeOn: 'host',
    });
    expect(host.quantization!.path).toBe('host');
    expect(launches() - before).toBe(14);
    using got = device.prefill(PROMPT);
    using want = host.prefill(PROMPT);
    expect(await got.read()).toEqual(await want.read());
  }, 600_000);
});
