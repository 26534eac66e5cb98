import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend, OutOfMemoryError } from '@rayo/core';
import { limitedBackend, tinyLlamaConfig, tinyLlamaWeights } from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { parseLlamaConfig } from '../models/llama/config.js';
import { llamaToGguf } from './convertLlama.js';
import type { GgmlType } from './ggmlTypes.js';
import { loadGgufLlama } from './loadLlama.js';
import { repackOntoCoreFormats } from './repack.js';
import { writeGgufFile } from './writer.js';

// A GGUF weight larger than the backend's largest buffer is refused by its
// name before any weight is uploaded, as a safetensors checkpoint's is: a
// float one in its upload dtype, a quantized one by the codes of its core
// format. The tiny model's embedding comes first: f32 [97, 64] is 24832
// bytes; as Q8_0 (q8g32 codes, a byte per weight) 6208.

const cpu = createCpuBackend();
const dir = await mkdtemp(join(tmpdir(), 'gguf-limit-'));
afterAll(async () => {
  cpu.dispose();
  await rm(dir, { recursive: true, force: true });
});

/** The cpu backend as a device whose largest buffer is `maxBufferBytes`, counting uploads. */
function limited(maxBufferBytes: number) {
  return limitedBackend(cpu, maxBufferBytes);
}

async function write(name: string, typeOf?: (hfName: string) => GgmlType): Promise<string> {
  const json = tinyLlamaConfig({ intermediate_size: 96 });
  const path = join(dir, name);
  await writeGgufFile(path, llamaToGguf(parseLlamaConfig(json), tinyLlamaWeights(json, 4), { typeOf }));
  return path;
}

describe('GGUF weights against the backend’s largest buffer', () => {
  it('refuses a float weight larger than one buffer by its name, before any upload', async () => {
    const path = await write('f32.gguf');
    const { backend, uploads } = limited(24832 - 1);
    const error = await loadGgufLlama(backend, path).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect((error as OutOfMemoryError).argument).toBe('token_embd.weight');
    expect((error as OutOfMemoryError).actual).toContain('24832 bytes (f32[97, 64]');
    expect(uploads()).toBe(0);
    // A buffer of the largest weight's size holds it.
    using model = await loadGgufLlama(limited(24832).backend, path);
    expect(model.config.vocabSize).toBe(97);
  });

  it('refuses a quantized weight by the codes of its core format', async () => {
    const path = await write('q8.gguf', (name) =>
      /(_proj|embed_tokens)\.weight$/.test(name) ? 'Q8_0' : 'F32',
    );
    const { backend, uploads } = limited(6208 - 1);
    const error = await loadGgufLlama(backend, path, { repack: repackOntoCoreFormats }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect((error as OutOfMemoryError).argument).toBe('token_embd.weight');
    expect((error as OutOfMemoryError).actual).toContain(
      '6208 bytes (the u32 codes of Q8_0 as q8g32, [97, 16])',
    );
    expect(uploads()).toBe(0);
  });
});
