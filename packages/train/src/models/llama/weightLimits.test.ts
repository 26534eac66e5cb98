import { type Backend, createBackend, OutOfMemoryError } from '@rayo/core';
import {
  limitedBackend,
  removeTinyLlamas,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamaModel } from './model.js';

// The tiny Llama's largest weights are the embedding and the head, f32
// [97, 64]: 24832 bytes. A backend whose largest buffer is one byte less
// must refuse the load by the embedding's name before uploading anything.
const LARGEST = 97 * 64 * 4;
let cpu: Backend;
let dir: string;

beforeAll(async () => {
  cpu = await createBackend('cpu');
  const config = tinyLlamaConfig();
  dir = await writeTinyLlama(config, tinyLlamaWeights(config, 2));
});
afterAll(async () => {
  cpu.dispose();
  await removeTinyLlamas();
});

/** The cpu backend as a device whose largest buffer is `maxBufferBytes`, counting uploads. */
function limited(maxBufferBytes: number) {
  return limitedBackend(cpu, maxBufferBytes);
}

describe('weights against the backend’s largest buffer', () => {
  it('refuses a weight larger than one buffer by name, before any upload', async () => {
    const { backend, uploads } = limited(LARGEST - 1);
    const error = await LlamaModel.load(backend, dir).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect((error as OutOfMemoryError).argument).toBe('model.embed_tokens.weight');
    expect((error as OutOfMemoryError).expected).toContain(`<= ${LARGEST - 1} bytes`);
    expect((error as OutOfMemoryError).actual).toContain(`${LARGEST} bytes (f32[97, 64])`);
    expect(uploads()).toBe(0);
  });

  it('loads when the largest weight just fits, and counts in the device dtype', async () => {
    const fits = limited(LARGEST);
    const model = await LlamaModel.load(fits.backend, dir);
    expect(fits.uploads()).toBeGreaterThan(0);
    model.dispose();
    // Rounded to bf16 on load, the weights take half the bytes: a buffer of half fits them.
    const half = limited(LARGEST / 2);
    const rounded = await LlamaModel.load(half.backend, dir, { weightDtype: 'bf16' });
    expect(rounded.weightDtype).toBe('bf16');
    rounded.dispose();
  });
});
