import { TextModel } from '@rayo/text';
import type { PagedLlama } from '@rayo/train';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TinyFixture, tinyFixture } from '../../testing/tinyFixture.js';
import { TINY_MAX_SEQUENCE } from '../../testing/tinyServer.js';
import { BatchedEngine } from '../engine/batchedEngine.js';
import { ModelServer } from './modelServer.js';

// The server over the batched engine on 127.0.0.1, as an OpenAI client sees
// it: streams decoded together, each reply the text TextModel.generateText
// gives alone, and the page metrics.

let fixture: TinyFixture;
let model: TextModel;
let paged: PagedLlama;
let server: ModelServer;
let url: string;

beforeAll(async () => {
  fixture = await tinyFixture();
  model = await TextModel.load(fixture.backend, fixture.dir, { maxSequence: TINY_MAX_SEQUENCE });
  paged = model.model.pagedCache({ pages: 48, pageSize: 8, maxBatch: 4 });
  server = new ModelServer({
    model,
    engine: new BatchedEngine(paged, { prefillTokens: 16 }),
    modelId: 'tiny',
  });
  url = `http://127.0.0.1:${(await server.listen(0, '127.0.0.1')).port}`;
});

afterAll(async () => {
  await server?.close();
  paged?.dispose();
  model?.dispose();
  await fixture?.dispose();
});

async function metrics(): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return new Map(
    text
      .split('\n')
      .filter((l) => l.startsWith('rayo_'))
      .map((l) => [l.slice(0, l.lastIndexOf(' ')), Number(l.slice(l.lastIndexOf(' ') + 1))]),
  );
}

describe('a server over the batched engine', () => {
  it('streams several replies at once, each as generateText gives it alone, and shows its pages', async () => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const prompts = ['one', 'a longer prompt of many characters, two', 'three', 'four and more', 'five'];
    const replies = await Promise.all(
      prompts.map(async (prompt, i) => {
        const stream = await client.completions.create({
          model: 'tiny',
          prompt,
          max_tokens: 10 + 3 * i,
          stream: true,
          ...(i === 2 ? { temperature: 0.9, seed: 4 } : {}),
        });
        let text = '';
        for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
        return text;
      }),
    );
    for (const [i, prompt] of prompts.entries()) {
      const options = { maxNewTokens: 10 + 3 * i, ...(i === 2 ? { temperature: 0.9, seed: 4 } : {}) };
      expect(replies[i]).toBe((await fixture.generated(prompt, options)).text);
    }
    await server.scheduler.idle();
    const m = await metrics();
    expect(m.get('rayo_engine_max_sequences')).toBe(4);
    expect(m.get('rayo_kv_cache_pages_in_use')).toBe(0);
    expect(m.get('rayo_kv_cache_pages_free')).toBe(48);
    expect(m.get('rayo_kv_cache_page_rows')).toBe(8);
    expect(m.get('rayo_kv_cache_rows')).toBe(48 * 8);
    expect(m.get('rayo_preemptions_total')).toBe(0);
  });
});
