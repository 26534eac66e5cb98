import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { type Backend, createBackend, InvalidArgumentError } from '@rayo/core';
import { MISTRAL, writeTinyTextModel } from '@rayo/text-testkit';
import { llamaToGguf, parseLlamaConfig, urlFileOpener, writeGgufFile } from '@rayo/train';
import { type RangeServer, serveRanges, tinyLlamaConfig, tinyLlamaWeights } from '@rayo/train-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ggufVocabulary } from '../gguf/ggufVocabulary.js';
import { readHuggingFaceTokenizer } from '../tokenizer/huggingFaceFolder.js';
import { TextModel } from './textModel.js';

// A tiny text model folder served over HTTP with ranges: loaded by URL it
// must tokenize and generate exactly as loaded from the folder.
let backend: Backend;
let dir: string;
let served: RangeServer;

beforeAll(async () => {
  backend = await createBackend('cpu');
  dir = await writeTinyTextModel({ generationConfig: { eos_token_id: 1, max_new_tokens: 12 } });
  served = await serveRanges(dir);
});
afterAll(async () => {
  await served.close();
  backend.dispose();
  await rm(dir, { recursive: true, force: true });
});

describe('TextModel.load from a URL', () => {
  it('reads the tokenizer, generation config and weights by range requests and generates as from the folder', async () => {
    const remote = await TextModel.load(backend, `${served.url}files/`, { openFile: urlFileOpener() });
    const local = await TextModel.load(backend, dir);
    try {
      expect(remote.tokenizer.chatTemplates).toEqual(local.tokenizer.chatTemplates);
      expect(remote.generationDefaults).toEqual(local.generationDefaults);
      const prompt = [{ role: 'user', content: 'Say hi' }] as const;
      const remoteText = await textOf(remote.generateText(prompt));
      expect(remoteText.length).toBeGreaterThan(0);
      expect(remoteText).toBe(await textOf(local.generateText(prompt)));
      expect(remote.model.maxSequence).toBe(local.model.maxSequence);
    } finally {
      remote.dispose();
      local.dispose();
    }
    const paths = new Set(served.requests.map((r) => r.path));
    for (const name of ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'model.safetensors']) {
      expect(paths, name).toContain(`/files/${name}`);
    }
    for (const r of served.requests) expect(r.range, r.path).toMatch(/^bytes=/);
  });

  it('reads a .gguf URL by ranges and generates as from the file', async () => {
    // A GGUF file of a tiny Llama with a real vocabulary, beside the folder's files.
    const config = tinyLlamaConfig({ vocab_size: 32000, max_position_embeddings: 64 });
    const weights = tinyLlamaWeights(config, 7);
    const metadata = ggufVocabulary(await readHuggingFaceTokenizer(MISTRAL.dir));
    const path = join(dir, 'tiny.gguf');
    await writeGgufFile(path, llamaToGguf(parseLlamaConfig(config), weights, { metadata }));
    const before = served.requests.length;
    const remote = await TextModel.load(backend, `${served.url}files/tiny.gguf`, {
      openFile: urlFileOpener(),
    });
    const local = await TextModel.load(backend, path);
    try {
      const prompt = 'Once upon a time';
      const remoteText = await textOf(remote.generateText(prompt, { maxNewTokens: 12 }));
      expect(remoteText.length).toBeGreaterThan(0);
      expect(remoteText).toBe(await textOf(local.generateText(prompt, { maxNewTokens: 12 })));
    } finally {
      remote.dispose();
      local.dispose();
    }
    const requests = served.requests.slice(before);
    expect(new Set(requests.map((r) => r.path))).toEqual(new Set(['/files/tiny.gguf']));
    for (const r of requests) expect(r.status).toBe(206);
  });

  it('says which URL lacks tokenizer.json', async () => {
    const error = await TextModel.load(backend, `${served.url}nothing/`, { openFile: urlFileOpener() }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe(`${served.url}nothing/tokenizer.json`);
  });
});

async function textOf(generation: AsyncIterable<string>): Promise<string> {
  let text = '';
  for await (const piece of generation) text += piece;
  return text;
}
