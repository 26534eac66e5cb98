import type { ChatMessage, GenerateTextOptions } from '@rayo/text';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TinyFixture, tinyFixture } from '../../testing/tinyFixture.js';
import { startTinyServer, TINY_MAX_SEQUENCE, type TinyServer } from '../../testing/tinyServer.js';

// The server as an OpenAI client sees it, on a tiny random Llama with a
// character tokenizer (cpu backend); every text is checked against
// TextModel.generateText on another copy of the model.

let fixture: TinyFixture;
let tiny: TinyServer;

beforeAll(async () => {
  fixture = await tinyFixture();
  tiny = await startTinyServer(fixture.backend, fixture.dir, 2);
});

afterAll(async () => {
  await tiny?.close();
  await fixture?.dispose();
});

const expected = (prompt: string | readonly ChatMessage[], options: GenerateTextOptions) =>
  fixture.generated(prompt, options);

const chat = (content: string) => [
  { role: 'system' as const, content: 'Be brief.' },
  { role: 'user' as const, content },
];

describe('chat completions', () => {
  it('answers as TextModel.generateText does, with usage', async () => {
    const want = await expected(chat('Hello there'), { maxNewTokens: 24 });
    expect(want.text).not.toBe('');
    const got = await tiny.client.chat.completions.create({
      model: 'tiny',
      messages: chat('Hello there'),
      max_tokens: 24,
    });
    expect(got.object).toBe('chat.completion');
    expect(got.model).toBe('tiny');
    expect(got.choices).toHaveLength(1);
    expect(got.choices[0]!.message).toEqual({ role: 'assistant', content: want.text });
    expect(got.choices[0]!.finish_reason).toBe(want.finish);
    expect(got.usage).toEqual({
      prompt_tokens: want.promptTokens,
      completion_tokens: want.generatedTokens,
      total_tokens: want.promptTokens + want.generatedTokens,
    });
  });

  it('streams chunks that add up to the same text, then the finish reason and the usage', async () => {
    const want = await expected(chat('Stream it'), { maxNewTokens: 30 });
    const stream = await tiny.client.chat.completions.create({
      model: 'tiny',
      messages: chat('Stream it'),
      max_tokens: 30,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.object).toBe('chat.completion.chunk');
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const withChoices = chunks.filter((c) => c.choices.length > 0);
    const text = withChoices.map((c) => c.choices[0]!.delta.content ?? '').join('');
    expect(text).toBe(want.text);
    expect(withChoices.at(-1)!.choices[0]!.finish_reason).toBe(want.finish);
    expect(withChoices.slice(0, -1).every((c) => c.choices[0]!.finish_reason === null)).toBe(true);
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage?.completion_tokens).toBe(want.generatedTokens);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it('samples with the request’s temperature, top_p and seed, as the model does', async () => {
    const options = { maxNewTokens: 20, temperature: 0.9, topP: 0.95, seed: 11 };
    const want = await expected(chat('Pick'), options);
    const ask = () =>
      tiny.client.chat.completions.create({
        model: 'tiny',
        messages: chat('Pick'),
        max_tokens: 20,
        temperature: 0.9,
        top_p: 0.95,
        seed: 11,
      });
    const [first, second] = [await ask(), await ask()];
    expect(first.choices[0]!.message.content).toBe(want.text);
    expect(second.choices[0]!.message.content).toBe(want.text);
  });
});

describe('text completions', () => {
  it('continues a prompt, whole and streamed', async () => {
    const want = await expected('Once upon a time', { maxNewTokens: 40 });
    const whole = await tiny.client.completions.create({
      model: 'tiny',
      prompt: 'Once upon a time',
      max_tokens: 40,
    });
    expect(whole.object).toBe('text_completion');
    expect(whole.choices[0]!.text).toBe(want.text);
    expect(whole.choices[0]!.finish_reason).toBe(want.finish);
    expect(whole.usage?.prompt_tokens).toBe(want.promptTokens);
    const stream = await tiny.stream('Once upon a time', 40);
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]!.text;
      finish = chunk.choices[0]!.finish_reason ?? finish;
    }
    expect(text).toBe(want.text);
    expect(finish).toBe(want.finish);
  });

  it('takes a prompt of token ids', async () => {
    const ids = tiny.models[0]!.encodePrompt('token ids');
    const want = await expected('token ids', { maxNewTokens: 12 });
    const got = await tiny.client.completions.create({ model: 'tiny', prompt: ids, max_tokens: 12 });
    expect(got.choices[0]!.text).toBe(want.text);
  });

  it('ends before a stop sequence, whole and streamed', async () => {
    const prompt = 'The stop test:';
    const free = await expected(prompt, { maxNewTokens: 60 });
    expect(free.text.length).toBeGreaterThan(12);
    // A stop string from the middle of the free text: the reply ends before its first appearance.
    const stop = free.text.slice(8, 10);
    const want = await expected(prompt, { maxNewTokens: 60, stop: [stop, 'never seen'] });
    expect(want.text).toBe(free.text.slice(0, free.text.indexOf(stop)));
    const whole = await tiny.client.completions.create({
      model: 'tiny',
      prompt,
      max_tokens: 60,
      stop: [stop, 'never seen'],
    });
    expect(whole.choices[0]!.text).toBe(want.text);
    expect(whole.choices[0]!.finish_reason).toBe('stop');
    const stream = await tiny.client.chat.completions.create({
      model: 'tiny',
      messages: chat(prompt),
      max_tokens: 60,
      stop,
      stream: true,
    });
    const wantChat = await expected(chat(prompt), { maxNewTokens: 60, stop: [stop] });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe(wantChat.text);
  });
});

describe('several clients at once', () => {
  it('get the tokens each would get alone (greedy)', async () => {
    const prompts = Array.from({ length: 7 }, (_, i) => `Client ${i} asks ${'?'.repeat(i)}`);
    const alone = [];
    for (const p of prompts)
      alone.push(await expected(p, { maxNewTokens: 10 + 3 * (prompts.indexOf(p) % 4) }));
    const together = await Promise.all(
      prompts.map((p, i) =>
        tiny.client.completions.create({ model: 'tiny', prompt: p, max_tokens: 10 + 3 * (i % 4) }),
      ),
    );
    expect(together.map((r) => r.choices[0]!.text)).toEqual(alone.map((a) => a.text));
    expect(together.map((r) => r.usage?.completion_tokens)).toEqual(alone.map((a) => a.generatedTokens));
    // Both slots decoded in one step at some point: the requests did overlap.
    expect(tiny.engine.widest).toBe(2);
  });
});

describe('the other routes', () => {
  it('lists the model, answers health and renders metrics', async () => {
    const models = await tiny.client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['tiny']);
    const health = await fetch(`${tiny.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    const metrics = await fetch(`${tiny.url}/metrics`);
    expect(metrics.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await metrics.text();
    for (const name of [
      'rayo_queue_depth 0',
      'rayo_active_sequences 0',
      'rayo_engine_max_sequences 2',
      `rayo_kv_cache_rows ${2 * TINY_MAX_SEQUENCE}`,
      'rayo_kv_cache_rows_in_use 0',
      '# TYPE rayo_time_to_first_token_seconds summary',
      'rayo_time_to_first_token_seconds{quantile="0.5"}',
      'rayo_tokens_per_second',
    ])
      expect(text).toContain(name);
    const generated = Number(/^rayo_generated_tokens_total (\d+)$/m.exec(text)?.[1]);
    expect(generated).toBe(tiny.server.metrics.generatedTokens);
    expect(generated).toBeGreaterThan(0);
  });
});
