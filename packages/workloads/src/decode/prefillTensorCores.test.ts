import type { Backend } from '@rayo/core';
import { createEmulatedGpu } from '@rayo/cuda-testkit';
import { type LlamaLoadOptions, LlamaModel } from '@rayo/train';
import { temporaryDirectories } from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { DECODE_CONFIGS } from './decodeBench.js';
import { writeSeededLlama } from './seededLlama.js';

// A prompt's projections and head on tensor cores, end to end: the tiny
// model's prefill logits on the emulated cuda device (sm_90) against the
// cpu backend computing the same rounding (matmul precision 'half'), and
// against the exact f32 model within bf16's rounding of the inputs.

const config = DECODE_CONFIGS['llama-tiny']!;
const vocab = config.vocab_size as number;
/** 40 tokens: M = 40 > the streaming kernels' 16 rows, so the chunk's products take the tensor-core kernels. */
const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % vocab);
/**
 * bf16 inputs of every product: each moves by at most 2^-9 of itself; the
 * logits (|logit| of a few units here) moved by about 0.01 in the cpu runs.
 * Five roundings' worth at 4, as halfPrecision.test.ts bounds a bf16 model.
 */
const BF16_INPUTS = 5 * 2 ** -9 * 4;

describe('a prompt on tensor cores (emulated cuda)', () => {
  const tempDir = temporaryDirectories('rayo-prefill-tc-');
  const { gpu, cpu, fake } = createEmulatedGpu({ multiprocessors: 4 });
  afterAll(() => {
    gpu.dispose();
    cpu.dispose();
  });
  const checkpoint = async (dtype: 'f32' | 'bf16') => {
    const dir = await tempDir();
    await writeSeededLlama(dir, config, 5, dtype);
    return dir;
  };
  const logits = async (backend: Backend, dir: string, options: LlamaLoadOptions = {}) => {
    using model = await LlamaModel.load(backend, dir, { maxSequence: 64, ...options });
    using out = model.prefill(PROMPT);
    return (await out.read()) as Float32Array;
  };
  // The mma.sync and the warpgroup-MMA kernels' entries.
  const tensorCoreLaunches = () =>
    fake.launches.filter((l) => l.entry === 'matmul_mma' || l.entry === 'matmul_wgmma').length;
  // Passes that round f32 activations to bf16 before a product.
  const roundingPasses = () => fake.launches.filter((l) => l.entry === 'cast_f32_bf16').length;
  // SwiGLU passes over a chunk's stored gate and up products.
  const swigluPasses = () => fake.launches.filter((l) => l.entry === 'ew_swiglu').length;
  const maxDiff = (a: Float32Array, b: Float32Array) => {
    expect(a.length).toBe(b.length);
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
    return worst;
  };

  it('bf16 weights: every projection and the head on tensor cores, as the cpu rounds them', async () => {
    const bf16 = await checkpoint('bf16');
    const before = tensorCoreLaunches();
    const rounding = roundingPasses();
    const swiglus = swigluPasses();
    const got = await logits(gpu, bf16);
    // 2 layers × (q, k and v fused in one, o, gate·up with SwiGLU in one, down) and the head.
    expect(tensorCoreLaunches() - before).toBe(9);
    expect(swigluPasses() - swiglus).toBe(0);
    // The norms, the attention and the gated product write the products' bf16 operands themselves.
    expect(roundingPasses() - rounding).toBe(0);
    const want = await logits(cpu, bf16);
    expect(maxDiff(got, want)).toBeLessThan(1e-3);
    // Against the same weights multiplied exactly (f32 activations): bf16's rounding of the inputs.
    const exact = await logits(cpu, bf16, { weightDtype: 'f32' });
    const drift = maxDiff(got, exact);
    expect(drift).toBeGreaterThan(0);
    expect(drift).toBeLessThan(BF16_INPUTS);
  }, 600_000);

  it("f32 weights: exact by default, on tensor cores with prefillPrecision 'bf16'", async () => {
    const f32 = await checkpoint('f32');
    const exact = await logits(cpu, f32);
    let before = tensorCoreLaunches();
    const swiglus = swigluPasses();
    const plain = await logits(gpu, f32);
    expect(tensorCoreLaunches()).toBe(before);
    expect(maxDiff(plain, exact)).toBeLessThan(1e-4);
    before = tensorCoreLaunches();
    const rounded = await logits(gpu, f32, { prefillPrecision: 'bf16' });
    // f32 gate and up weights are rounded by their products: two products and a swiglu pass a layer.
    expect(tensorCoreLaunches() - before).toBe(11);
    expect(swigluPasses() - swiglus).toBe(4);
    expect(maxDiff(rounded, await logits(cpu, f32, { prefillPrecision: 'bf16' }))).toBeLessThan(1e-3);
    expect(maxDiff(rounded, exact)).toBeLessThan(BF16_INPUTS);
  }, 600_000);

  it('a prompt in chunks has its logits joined on the device, all of them or the last rows', async () => {
    const bf16 = await checkpoint('bf16');
    // Chunks of 16, 16 and 8 rows (fewer than 32: the streaming kernels' products), joined by copyRows.
    const chunked = await logits(gpu, bf16, { prefillChunk: 16 });
    expect(maxDiff(chunked, await logits(cpu, bf16, { prefillChunk: 16 }))).toBeLessThan(1e-3);
    using model = await LlamaModel.load(gpu, bf16, { maxSequence: 64, prefillChunk: 16 });
    // The last 30 rows: the head on the first chunk's last 6 rows, then on the second and third chunks whole.
    using tail = model.prefill(PROMPT, { lastRows: 30 });
    expect(tail.shape).toEqual([30, vocab]);
    expect(maxDiff((await tail.read()) as Float32Array, chunked.subarray((PROMPT.length - 30) * vocab))).toBe(
      0,
    );
  }, 600_000);

  it('q8 projections: a chunk of 32+ rows dequantized and multiplied on tensor cores', async () => {
    const f32 = await checkpoint('f32');
    const before = tensorCoreLaunches();
    const got = await logits(gpu, f32, { weightFormat: 'q8' });
    // The 8 products (q, k and v fused in one, gate and up gated in one, a layer); the dense f32 head stays exact.
    expect(tensorCoreLaunches() - before).toBe(8);
    expect(maxDiff(got, await logits(cpu, f32, { weightFormat: 'q8' }))).toBeLessThan(1e-3);
  }, 600_000);
});
