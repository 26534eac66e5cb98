import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { LlamaModel } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';
import { DECODE_CONFIGS } from './decodeBench.js';
import { writeSeededLlama } from './seededLlama.js';

// A quantized model's decode step on int8 activations (emulated cuda: the
// real PTX in the interpreter): the norms before q·k·v and gate·up fold into
// those GEMVs, so the step launches no rmsNorm but the head's, and its
// logits follow the cpu's exact products within int8 rounding of x.

const config = DECODE_CONFIGS['llama-tiny']!;
const PROMPT = [5, 17, 3];
/** The int8 GEMV's entry (cuda-ptx's quantizedGemvInt8.ts). */
const INT8_GEMV = 'quantized_gemv_int8';

describe('norms folded into int8 GEMVs (emulated cuda)', () => {
  const { gpu, cpu, fake } = createEmulatedGpu({ multiprocessors: 2, tuning: { qgemvActivations: 'int8' } });
  let dir: string | undefined;
  afterAll(async () => {
    gpu.dispose();
    cpu.dispose();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('decodes with no rmsNorm launch but the head’s, near the cpu’s logits', async () => {
    dir = await mkdtemp(join(tmpdir(), 'rayo-folded-norm-'));
    await writeSeededLlama(dir, config, 11, 'f32');
    const options = { maxSequence: 16, weightFormat: 'q8g32', replay: false } as const;
    using device = await LlamaModel.load(gpu, dir, options);
    using host = await LlamaModel.load(cpu, dir, options);
    device.prefill(PROMPT).dispose();
    host.prefill(PROMPT).dispose();
    const first = fake.launches.length;
    using got = device.decode(7);
    const entries = fake.launches.slice(first).map((l) => l.entry);
    const layers = config.num_hidden_layers as number;
    // q·k·v, o, gate·up and down on the int8 GEMV per layer; the head's norm is its own.
    expect(entries.filter((e) => e === INT8_GEMV)).toHaveLength(4 * layers);
    expect(entries.filter((e) => e === 'rms_norm').length).toBeLessThanOrEqual(1);
    using want = host.decode(7);
    const [a, b] = [(await got.read()) as Float32Array, (await want.read()) as Float32Array];
    let worst = 0;
    let size = 0;
    for (let i = 0; i < a.length; i++) {
      worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
      size = Math.max(size, Math.abs(b[i]!));
    }
    expect(worst).toBeLessThan(0.05 * size);
  }, 600_000);
});
