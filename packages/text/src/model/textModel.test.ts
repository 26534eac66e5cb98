import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Backend, createBackend, InvalidArgumentError } from '@rayo/core';
import { MISTRAL, TINY_CHAT_TEMPLATE, writeTinyTextModel } from '@rayo/text-testkit';
import type { LoadProgress } from '@rayo/train';
import { llamaToGguf, parseLlamaConfig, writeGgufFile } from '@rayo/train';
import { tinyLlamaConfig, tinyLlamaWeights, writeTinyLlama } from '@rayo/train-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ggufVocabulary } from '../gguf/ggufVocabulary.js';
import { readHuggingFaceTokenizer } from '../tokenizer/huggingFaceFolder.js';
import { TextModel } from './textModel.js';

let backend: Backend;
const dirs: string[] = [];
const folder = async (options: Parameters<typeof writeTinyTextModel>[0] = {}) => {
  const dir = await writeTinyTextModel(options);
  dirs.push(dir);
  return dir;
};

beforeAll(async () => {
  backend = await createBackend('cpu');
});
afterAll(async () => {
  backend.dispose();
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function collect(iterable: AsyncIterable<string>): Promise<string[]> {
  const out: string[] = [];
  for await (const delta of iterable) out.push(delta);
  return out;
}

/** The token ids the underlying model generates, up to (not including) EOS. */
async function tokensOf(model: TextModel, prompt: readonly number[], options: Record<string, unknown>) {
  const ids: number[] = [];
  for await (const id of model.model.generate(prompt, {
    maxNewTokens: 24,
    stop: [...model.tokenizer.eosTokenIds],
    ...options,
  }))
    ids.push(id);
  return ids;
}

describe('TextModel from a Hugging Face folder', () => {
  it('streams the text of the tokens the model generates, with stats', async () => {
    const progress: LoadProgress[] = [];
    const model = await TextModel.load(backend, await folder(), { onProgress: (p) => progress.push(p) });
    try {
      expect(model.model.maxSequence).toBe(256);
      // Nothing loaded first, then one report per tensor on the device, the last with everything loaded.
      expect(progress.map((p) => p.tensorsLoaded)).toEqual(Array.from({ length: 22 }, (_, i) => i));
      expect(progress.at(-1)).toEqual({
        tensorsLoaded: 21,
        tensorsTotal: 21,
        bytesLoaded: progress[0]!.bytesTotal,
        bytesTotal: progress[0]!.bytesTotal,
      });
      const prompt = 'The cat sat';
      const ids = await tokensOf(model, model.tokenizer.encode(prompt), {});
      expect(ids.length).toBeGreaterThan(0);
      const generation = model.generateText(prompt, { maxNewTokens: 24 });
      expect(generation.stats).toBeUndefined();
      const deltas = await collect(generation);
      expect(deltas.join('')).toBe(model.tokenizer.decode(ids, { skipSpecialTokens: true }));
      expect(generation.text).toBe(deltas.join(''));
      expect(generation.promptIds).toEqual(model.tokenizer.encode(prompt));
      expect(generation.promptIds[0]).toBe(model.tokenizer.bosTokenId);
      const stats = generation.stats!;
      expect(stats.promptTokens).toBe(prompt.length + 1);
      expect(stats.generatedTokens).toBe(ids.length);
      expect(stats.finishReason).toBe(ids.length < 24 ? 'eos' : 'length');
      expect(stats.timeToFirstTokenMs).toBeGreaterThanOrEqual(0);
      expect(stats.totalMs).toBeGreaterThanOrEqual(stats.timeToFirstTokenMs);
      expect(() => generation[Symbol.asyncIterator]()).toThrow(/iterated once/);
    } finally {
      model.dispose();
    }
  });

  it('ends at a stop string (left out), at maxNewTokens, and at an EOS id of generation_config.json', async () => {
    const dir = await folder();
    let model = await TextModel.load(backend, dir);
    const prompt = 'Hello';
    const full = model.tokenizer.decode(await tokensOf(model, model.tokenizer.encode(prompt), {}), {
      skipSpecialTokens: true,
    });
    expect(full.length).toBeGreaterThan(6);
    const stop = full.slice(3, 5);
    const stopped = model.generateText(prompt, { maxNewTokens: 24, stop: [stop, 'never seen'] });
    expect((await collect(stopped)).join('')).toBe(full.slice(0, full.indexOf(stop)));
    expect(stopped.stats?.finishReason).toBe('stop');
    const short = model.generateText(prompt, { maxNewTokens: 4 });
    expect((await collect(short)).join('')).toBe(full.slice(0, 4));
    expect(short.stats).toMatchObject({ generatedTokens: 4, finishReason: 'length' });
    model.dispose();

    const eosChar = full[5]!;
    await writeFile(
      join(dir, 'generation_config.json'),
      JSON.stringify({ eos_token_id: [1, model.tokenizer.tokenToId(eosChar)] }),
    );
    model = await TextModel.load(backend, dir);
    try {
      const ended = model.generateText(prompt, { maxNewTokens: 24 });
      expect((await collect(ended)).join('')).toBe(full.slice(0, full.indexOf(eosChar)));
      expect(ended.stats?.finishReason).toBe('eos');
    } finally {
      model.dispose();
    }
  });

  it("samples with generation_config.json's defaults unless told otherwise", async () => {
    const sampling = { do_sample: true, temperature: 0.9, top_k: 20, top_p: 0.95 };
    const model = await TextModel.load(backend, await folder({ generationConfig: sampling }));
    try {
      const prompt = model.tokenizer.encode('Once');
      const expected = await tokensOf(model, prompt, { temperature: 0.9, topK: 20, topP: 0.95, seed: 7 });
      const text = (await collect(model.generateText('Once', { maxNewTokens: 24, seed: 7 }))).join('');
      expect(text).toBe(model.tokenizer.decode(expected, { skipSpecialTokens: true }));
      const greedy = await tokensOf(model, prompt, {});
      const asked = (await collect(model.generateText('Once', { maxNewTokens: 24, temperature: 0 }))).join(
        '',
      );
      expect(asked).toBe(model.tokenizer.decode(greedy, { skipSpecialTokens: true }));
    } finally {
      model.dispose();
    }
  });

  it('renders messages with the chat template; a model without one refuses them', async () => {
    const model = await TextModel.load(backend, await folder());
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ];
    try {
      const generation = model.generateText(messages, { maxNewTokens: 3 });
      expect(model.tokenizer.decode(generation.promptIds)).toBe('<s>system: Be brief.\nuser: Hi\nassistant:');
      await collect(generation);
      expect(TINY_CHAT_TEMPLATE).toContain('add_generation_prompt');
    } finally {
      model.dispose();
    }
    const bare = await TextModel.load(backend, await folder({ chatTemplate: null }));
    try {
      expect(() => bare.generateText(messages)).toThrow(InvalidArgumentError);
      expect(() => bare.generateText(messages)).toThrow(/no chat template.*pass a plain prompt/);
      expect((await collect(bare.generateText('Hi', { maxNewTokens: 2 }))).length).toBeGreaterThan(0);
    } finally {
      bare.dispose();
    }
  });

  it('stops between tokens when aborted, and the iteration throws the reason', async () => {
    const model = await TextModel.load(backend, await folder());
    try {
      const controller = new AbortController();
      const generation = model.generateText('Hello', { maxNewTokens: 24, signal: controller.signal });
      const seen: string[] = [];
      await expect(
        (async () => {
          for await (const delta of generation) {
            seen.push(delta);
            controller.abort();
          }
        })(),
      ).rejects.toMatchObject({ name: 'AbortError' });
      expect(seen).toHaveLength(1);
      expect(generation.stats).toMatchObject({ finishReason: 'aborted', generatedTokens: 1 });
      // The model is free again.
      expect((await collect(model.generateText('Hello', { maxNewTokens: 2 }))).length).toBeGreaterThan(0);
    } finally {
      model.dispose();
    }
  });

  it('keeps a default length inside the cache, and names a prompt or length that does not fit', async () => {
    const model = await TextModel.load(backend, await folder(), { maxSequence: 12 });
    try {
      const generation = model.generateText('Hello');
      await collect(generation);
      expect(generation.stats!.generatedTokens).toBeLessThanOrEqual(12 - 6 + 1);
      expect(() => model.generateText('x'.repeat(20))).toThrow(
        /prompt does not fit.*maxSequence \(12\).*21 tokens/,
      );
      await expect(collect(model.generateText('Hello', { maxNewTokens: 50 }))).rejects.toThrow(
        /maxNewTokens/,
      );
    } finally {
      model.dispose();
    }
  });

  it('names a missing tokenizer before reading any weight, and a path that is not a model', async () => {
    const dir = await folder({ withoutTokenizer: true });
    await expect(TextModel.load(backend, dir)).rejects.toThrow(/tokenizer\.json.*no tokenizer\.json/);
    await expect(TextModel.load(backend, join(dir, 'nope'))).rejects.toThrow(/does not exist.*\.gguf file/);
    await expect(TextModel.load(backend, join(dir, 'config.json'))).rejects.toThrow(
      /neither a folder nor a \.gguf/,
    );
    await expect(TextModel.load(backend, dir, { maxSequence: 0 })).rejects.toThrow(
      /maxSequence.*integer >= 1/,
    );
  });
});

describe('TextModel from a GGUF file', () => {
  it('generates the text of the same weights and vocabulary from a Hugging Face folder', async () => {
    const config = tinyLlamaConfig({ vocab_size: 32000, max_position_embeddings: 64 });
    const weights = tinyLlamaWeights(config, 5);
    const dir = await writeTinyLlama(config, weights);
    dirs.push(dir);
    const source = await readHuggingFaceTokenizer(MISTRAL.dir);
    await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(source.tokenizer));
    await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify(source.config));
    const path = join(dir, 'model.gguf');
    await writeGgufFile(
      path,
      llamaToGguf(parseLlamaConfig(config), weights, { metadata: ggufVocabulary(source) }),
    );
    const fromFolder = await TextModel.load(backend, dir);
    const progress: LoadProgress[] = [];
    const fromGguf = await TextModel.load(backend, path, { onProgress: (p) => progress.push(p) });
    expect(progress.map((p) => p.tensorsLoaded)).toEqual(Array.from({ length: 22 }, (_, i) => i));
    expect(progress.at(-1)).toMatchObject({ tensorsLoaded: 21, tensorsTotal: 21 });
    expect(progress.at(-1)!.bytesLoaded).toBe(progress.at(-1)!.bytesTotal);
    try {
      expect(fromGguf.model.maxSequence).toBe(64);
      const prompt = 'Once upon a time';
      const a = (await collect(fromFolder.generateText(prompt, { maxNewTokens: 12 }))).join('');
      const b = (await collect(fromGguf.generateText(prompt, { maxNewTokens: 12 }))).join('');
      expect(b).toBe(a);
      expect(a.length).toBeGreaterThan(0);
      await expect(TextModel.load(backend, path, { weightFormat: 'q8' })).rejects.toThrow(
        /weightFormat.*\.gguf/,
      );
    } finally {
      fromFolder.dispose();
      fromGguf.dispose();
    }
  });
});
