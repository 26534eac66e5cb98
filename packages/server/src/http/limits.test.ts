import type { Backend } from '@rayo/core';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type TinyFixture, tinyFixture } from '../../testing/tinyFixture.js';
import { startTinyServer, type TinyServer } from '../../testing/tinyServer.js';

// Bad requests, a full server and clients that leave, against one slot whose
// steps the tests hold and release (GatedEngine), so that "busy" does not
// depend on how fast the model decodes.

let fixture: TinyFixture;
let backend: Backend;
let dir: string;

beforeAll(async () => {
  fixture = await tinyFixture();
  ({ backend, dir } = fixture);
});

afterAll(async () => {
  await fixture?.dispose();
});

async function referenceText(prompt: string, maxNewTokens: number): Promise<string> {
  return (await fixture.generated(prompt, { maxNewTokens })).text;
}

/** POSTs `body` (a string as it is, anything else as JSON) and returns the status and the parsed answer. */
async function post(url: string, route: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${url}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as { error?: Record<string, unknown> } };
}

/** A sample of the metrics text, by name and labels as written. */
async function metric(url: string, sample: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  if (line === undefined) throw new Error(`no metric ${sample} in:\n${text}`);
  return Number(line.slice(sample.length + 1));
}

describe('malformed requests', () => {
  let tiny: TinyServer;
  beforeAll(async () => {
    tiny = await startTinyServer(backend, dir, 1, { maxPromptTokens: 40, maxTokens: 64, maxBodyBytes: 4096 });
  });
  afterAll(() => tiny?.close());

  const chat = { model: 'tiny', messages: [{ role: 'user', content: 'hi' }] };
  it.each([
    ['not JSON', '/v1/chat/completions', '{"model":', 'body', 'invalid_json'],
    ['not an object', '/v1/completions', '[1, 2]', 'body', 'invalid_json'],
    ['no model', '/v1/chat/completions', { messages: chat.messages }, 'model', 'missing_parameter'],
    ['no messages', '/v1/chat/completions', { model: 'tiny' }, 'messages', 'invalid_value'],
    ['no prompt', '/v1/completions', { model: 'tiny' }, 'prompt', 'missing_parameter'],
    [
      'a bad role',
      '/v1/chat/completions',
      { ...chat, messages: [{ role: 'robot', content: 'x' }] },
      'messages[0].role',
      'invalid_value',
    ],
    [
      'an image part',
      '/v1/chat/completions',
      { ...chat, messages: [{ role: 'user', content: [{ type: 'image_url' }] }] },
      'messages[0].content[0]',
      'invalid_value',
    ],
    ['n = 2', '/v1/chat/completions', { ...chat, n: 2 }, 'n', 'unsupported_value'],
    [
      'a penalty',
      '/v1/completions',
      { model: 'tiny', prompt: 'x', presence_penalty: 0.5 },
      'presence_penalty',
      'unsupported_value',
    ],
    [
      'an unknown parameter',
      '/v1/chat/completions',
      { ...chat, tools: [] },
      'tools',
      'unsupported_parameter',
    ],
    ['temperature 5', '/v1/chat/completions', { ...chat, temperature: 5 }, 'temperature', 'invalid_value'],
    ['top_p 0', '/v1/completions', { model: 'tiny', prompt: 'x', top_p: 0 }, 'top_p', 'invalid_value'],
    [
      'a fractional seed',
      '/v1/completions',
      { model: 'tiny', prompt: 'x', seed: 1.5 },
      'seed',
      'invalid_value',
    ],
    [
      'max_tokens 0',
      '/v1/completions',
      { model: 'tiny', prompt: 'x', max_tokens: 0 },
      'max_tokens',
      'invalid_value',
    ],
    [
      'max_tokens over the limit',
      '/v1/completions',
      { model: 'tiny', prompt: 'x', max_tokens: 65 },
      'max_tokens',
      'invalid_value',
    ],
    [
      'five stops',
      '/v1/completions',
      { model: 'tiny', prompt: 'x', stop: ['a', 'b', 'c', 'd', 'e'] },
      'stop',
      'invalid_value',
    ],
    [
      'an empty stop',
      '/v1/completions',
      { model: 'tiny', prompt: 'x', stop: [''] },
      'stop[0]',
      'invalid_value',
    ],
    ['two prompts', '/v1/completions', { model: 'tiny', prompt: ['a', 'b'] }, 'prompt', 'invalid_value'],
    [
      'a token id past the vocabulary',
      '/v1/completions',
      { model: 'tiny', prompt: [1, 5000] },
      'prompt[1]',
      'invalid_value',
    ],
    [
      'a prompt over maxPromptTokens',
      '/v1/completions',
      { model: 'tiny', prompt: 'y'.repeat(41) },
      'prompt',
      'context_length_exceeded',
    ],
    [
      'stream_options without stream',
      '/v1/completions',
      { model: 'tiny', prompt: 'x', stream_options: { include_usage: true } },
      'stream_options',
      'invalid_value',
    ],
  ])('%s → 400 naming the parameter', async (_, route, body, param, code) => {
    const answer = await post(tiny.url, route, body);
    expect(answer.status).toBe(400);
    expect(answer.body.error).toEqual({
      message: expect.stringContaining(param === 'body' ? '' : `'${param}'`),
      type: 'invalid_request_error',
      param,
      code,
    });
  });

  it('a prompt and max_tokens past the context → 400 context_length_exceeded', async () => {
    const prompt = 'z'.repeat(39);
    const answer = await post(tiny.url, '/v1/completions', { model: 'tiny', prompt, max_tokens: 64 });
    expect(answer.status).toBe(200);
    const server = await startTinyServer(backend, dir, 1, { maxPromptTokens: 150 });
    try {
      const over = await post(server.url, '/v1/completions', {
        model: 'tiny',
        prompt: 'z'.repeat(120),
        max_tokens: 64,
      });
      expect(over.status).toBe(400);
      expect(over.body.error).toMatchObject({ param: 'max_tokens', code: 'context_length_exceeded' });
    } finally {
      await server.close();
    }
  });

  it('an unknown model → 404, a body over maxBodyBytes → 413, a wrong method → 405', async () => {
    const other = await post(tiny.url, '/v1/chat/completions', { ...chat, model: 'gpt-4o' });
    expect(other.status).toBe(404);
    expect(other.body.error).toMatchObject({
      type: 'not_found_error',
      param: 'model',
      code: 'model_not_found',
    });
    const big = await post(tiny.url, '/v1/completions', { model: 'tiny', prompt: 'x'.repeat(5000) });
    expect(big.status).toBe(413);
    expect(big.body.error).toMatchObject({ param: 'body', code: 'request_too_large' });
    const get = await fetch(`${tiny.url}/v1/completions`);
    expect(get.status).toBe(405);
    const none = await fetch(`${tiny.url}/v2/anything`);
    expect(none.status).toBe(404);
  });

  it('the openai client surfaces the error as a BadRequestError', async () => {
    const error = await tiny.client.chat.completions
      .create({ model: 'tiny', messages: chat.messages as never, n: 3 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('n');
  });
});

/** A server of one slot, busy: its steps held, one request admitted and waiting on them. */
async function busyServer(limits: Parameters<typeof startTinyServer>[3], prompt: string, maxTokens: number) {
  const tiny = await startTinyServer(backend, dir, 1, limits);
  tiny.engine.hold();
  const running = tiny.client.completions.create({ model: 'tiny', prompt, max_tokens: maxTokens });
  await vi.waitFor(() => expect(tiny.server.scheduler.active).toBe(1));
  return { tiny, running };
}

describe('a full server', () => {
  it('queues up to maxQueue, refuses more with 429, and runs the queued ones once the slot frees', async () => {
    const { tiny, running } = await busyServer({ maxQueue: 1 }, 'first', 8);
    try {
      const queued = tiny.client.completions.create({ model: 'tiny', prompt: 'second', max_tokens: 8 });
      await vi.waitFor(() => expect(tiny.server.scheduler.queued).toBe(1));
      const refused = await tiny.client.completions
        .create({ model: 'tiny', prompt: 'third', max_tokens: 8 })
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
      expect((refused as InstanceType<typeof OpenAI.APIError>).code).toBe('queue_full');
      expect(await metric(tiny.url, 'rayo_requests_refused_total{reason="queue-full"}')).toBe(1);
      tiny.engine.allow();
      const [first, second] = await Promise.all([running, queued]);
      expect(first.choices[0]!.text).toBe(await referenceText('first', 8));
      expect(second.choices[0]!.text).toBe(await referenceText('second', 8));
    } finally {
      await tiny.close();
    }
  });

  it('answers 503 to a request still queued after queueTimeoutMs', async () => {
    const { tiny, running } = await busyServer({ queueTimeoutMs: 20 }, 'busy', 4);
    try {
      const late = await tiny.client.chat.completions
        .create({ model: 'tiny', messages: [{ role: 'user', content: 'late' }], stream: true })
        .catch((e: unknown) => e);
      expect(late).toBeInstanceOf(OpenAI.InternalServerError);
      expect((late as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
      expect((late as InstanceType<typeof OpenAI.APIError>).code).toBe('queue_timeout');
      tiny.engine.allow();
      expect((await running).choices[0]!.text).toBe(await referenceText('busy', 4));
    } finally {
      await tiny.close();
    }
  });

  it('never admits more than maxConcurrent at once', async () => {
    const tiny = await startTinyServer(backend, dir, 3, { maxConcurrent: 2 });
    try {
      const prompts = ['a', 'bb', 'ccc', 'dddd', 'eeeee'];
      const answers = await Promise.all(
        prompts.map((prompt) => tiny.client.completions.create({ model: 'tiny', prompt, max_tokens: 6 })),
      );
      expect(tiny.engine.widest).toBe(2);
      for (const [i, a] of answers.entries())
        expect(a.choices[0]!.text).toBe(await referenceText(prompts[i]!, 6));
    } finally {
      await tiny.close();
    }
  });
});

describe('a client that leaves', () => {
  it('cancels its sequence mid-stream and frees the slot for the next request', async () => {
    const tiny = await startTinyServer(backend, dir, 1);
    try {
      tiny.engine.hold();
      tiny.engine.allow(1);
      const stream = await tiny.stream('a long story', 100);
      let seen = '';
      for await (const chunk of stream) {
        seen += chunk.choices[0]!.text;
        if (seen.length === 0) continue;
        // The sequence is in its second step, which waits: the cancel comes mid-step.
        await vi.waitFor(() => expect(tiny.engine.waiting).toBe(true));
        break; // closes the connection
      }
      await vi.waitFor(() => expect(tiny.server.metrics.endings.cancelled).toBe(1));
      // Its room comes back as the step it is in returns.
      expect(tiny.engine.usage().sequences).toBe(1);
      tiny.engine.allow();
      await tiny.server.scheduler.idle();
      expect(tiny.engine.usage()).toMatchObject({ sequences: 0, cacheRows: 0 });
      expect(await metric(tiny.url, 'rayo_active_sequences')).toBe(0);
      expect(await metric(tiny.url, 'rayo_kv_cache_rows_in_use')).toBe(0);
      // The token of the step it was cancelled in is dropped.
      expect(tiny.server.metrics.generatedTokens).toBe(1);
      // The slot is free and its model clean: the next request gets what it would alone.
      const next = await tiny.client.completions.create({ model: 'tiny', prompt: 'after', max_tokens: 12 });
      expect(next.choices[0]!.text).toBe(await referenceText('after', 12));
    } finally {
      await tiny.close();
    }
  });

  it('cancels a queued request without it ever running', async () => {
    const { tiny, running } = await busyServer({}, 'holds the slot', 5);
    try {
      const controller = new AbortController();
      const leaving = tiny.client.completions
        .create({ model: 'tiny', prompt: 'gives up', max_tokens: 5 }, { signal: controller.signal })
        .catch((e: unknown) => e);
      await vi.waitFor(() => expect(tiny.server.scheduler.queued).toBe(1));
      controller.abort();
      await vi.waitFor(() => expect(tiny.server.scheduler.queued).toBe(0));
      expect(await leaving).toBeInstanceOf(OpenAI.APIUserAbortError);
      tiny.engine.allow();
      await running;
      expect(tiny.server.metrics.endings).toMatchObject({ cancelled: 1 });
      expect(tiny.server.metrics.endings['stop-token'] + tiny.server.metrics.endings.length).toBe(1);
      // Only the request that ran counts its prompt.
      const ran = await fixture.generated('holds the slot', { maxNewTokens: 5 });
      expect(tiny.server.metrics.promptTokens).toBe(ran.promptTokens);
      expect(tiny.engine.steps).toBeLessThanOrEqual(5);
    } finally {
      await tiny.close();
    }
  });
});

describe('a bounded load', () => {
  it('completes every request with the text it would get alone and leaves nothing allocated', async () => {
    const before = backend.memory().liveTensors;
    const tiny = await startTinyServer(backend, dir, 2, { maxQueue: 64 });
    try {
      // Both slots record their decode step once; later requests allocate nothing that stays.
      await Promise.all(
        ['warm', 'up', 'both', 'slots'].map((prompt) =>
          tiny.client.completions.create({ model: 'tiny', prompt, max_tokens: 4 }),
        ),
      );
      const warm = backend.memory().liveTensors;
      const count = 24;
      const requests = Array.from({ length: count }, (_, i) => ({
        prompt: `request ${i}:`,
        max_tokens: 5 + (i % 7),
        stream: i % 3 === 0,
      }));
      const texts = await Promise.all(
        requests.map(async ({ prompt, max_tokens, stream }) => {
          if (!stream) {
            const r = await tiny.client.completions.create({ model: 'tiny', prompt, max_tokens });
            return r.choices[0]!.text;
          }
          let text = '';
          const s = await tiny.stream(prompt, max_tokens);
          for await (const chunk of s) text += chunk.choices[0]!.text;
          return text;
        }),
      );
      for (const [i, r] of requests.entries())
        expect(texts[i]).toBe(await referenceText(r.prompt, r.max_tokens));
      await tiny.server.scheduler.idle();
      const ended = tiny.server.metrics.endings;
      expect(ended['stop-token'] + ended.length).toBe(count + 4);
      expect(ended.cancelled + ended.failed).toBe(0);
      expect(tiny.engine.usage()).toMatchObject({ sequences: 0, cacheRows: 0 });
      expect(await metric(tiny.url, 'rayo_queue_depth')).toBe(0);
      expect(await metric(tiny.url, 'rayo_http_responses_total{route="/v1/completions",status="200"}')).toBe(
        count + 4,
      );
      expect(backend.memory().liveTensors).toBe(warm);
    } finally {
      await tiny.close();
    }
    expect(backend.memory().liveTensors).toBe(before);
  });
});
