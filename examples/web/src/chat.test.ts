import { readFile, rm } from 'node:fs/promises';
import { type Backend, createBackend } from '@rayo/core';
import { type ChatMessage, TextModel } from '@rayo/text';
import { writeTinyTextModel } from '@rayo/text-testkit';
import { serveRanges } from '@rayo/train-testkit';
import type { WorkerLoadProgress } from '@rayo/web';
import type { Page } from 'puppeteer-core';
import { afterAll, beforeAll, expect, it, onTestFailed } from 'vitest';
import { describeInChromium, launchChromium } from '../../../packages/wgpu/browser/chromium.js';
// @ts-expect-error: the build script is plain JavaScript, without declarations.
import { bundleChat, CHAT_HTML } from '../build.mjs';

// The chat page in headless Chromium on SwiftShader: a tiny Llama with a
// character tokenizer, written here and served with byte ranges from
// 127.0.0.1, is loaded into the page's worker with progress, answers as the
// same model does in Node (greedy), is read from the browser's cache on the
// second visit (no model request), can be stopped mid-answer, and evicted.
const PAGE_TIMEOUT_MS = 4 * 60_000 * Number(process.env.RAYO_TIMEOUT_SCALE ?? 1);
const REGION = /\/\/ #region browser-path\n([\s\S]*?)\/\/ #endregion/;

let dir: string;
let backend: Backend;
const HELLO: ChatMessage[] = [{ role: 'user', content: 'Hello' }];

beforeAll(async () => {
  dir = await writeTinyTextModel({ seed: 5 });
  backend = await createBackend('cpu');
});
afterAll(async () => {
  backend.dispose();
  await rm(dir, { recursive: true, force: true });
});

it("shows the page's own code in the README of @rayo/web", async () => {
  const page = await readFile(new URL('./chat.ts', import.meta.url), 'utf8');
  const readme = await readFile(new URL('../../../packages/web/README.md', import.meta.url), 'utf8');
  const region = REGION.exec(page)?.[1];
  expect(region).toBeDefined();
  expect(readme).toContain(region!.trim());
});

/** The model's answer to `messages` in Node on the cpu reference, greedy. */
async function answerInNode(messages: ChatMessage[], maxNewTokens: number) {
  const model = await TextModel.load(backend, dir);
  try {
    const generation = model.generateText(messages, { maxNewTokens });
    let text = '';
    for await (const piece of generation) text += piece;
    return { text, stats: generation.stats! };
  } finally {
    model.dispose();
  }
}

async function waitFor(page: Page, condition: string): Promise<void> {
  await page.waitForFunction(`(${condition}) || document.getElementById('error') !== null`, {
    timeout: PAGE_TIMEOUT_MS,
    polling: 100,
  });
  const error = await page.evaluate(() => document.getElementById('error')?.textContent);
  expect(error).toBeUndefined();
}

async function load(page: Page): Promise<string> {
  await page.click('#load');
  await waitFor(page, "document.getElementById('load-status').dataset.state === 'loaded'");
  return page.$eval('#load-status', (el) => el.textContent ?? '');
}

/** Sends `text` with at most `maxTokens` tokens; `stopAfterFirstPiece` clicks Stop once text arrives. */
async function send(page: Page, text: string, maxTokens: number, stopAfterFirstPiece = false) {
  await page.$eval('#max-tokens', (el, n) => ((el as HTMLInputElement).value = String(n)), maxTokens);
  await page.type('#prompt', text);
  await page.click('#send');
  if (stopAfterFirstPiece) {
    await waitFor(
      page,
      "(document.querySelector('#messages .assistant:last-child')?.textContent ?? '') !== ''",
    );
    await page.click('#stop');
  }
  await waitFor(page, "document.querySelector('#messages .assistant:last-child[data-finish]') !== null");
  return page.$eval('#messages .assistant:last-child', (el) => ({
    text: el.textContent ?? '',
    finish: (el as HTMLElement).dataset.finish,
    tokens: Number((el as HTMLElement).dataset.tokens),
  }));
}

describeInChromium('the chat page', (chromium) => {
  it(
    'loads a model from a URL into its worker with progress, answers as Node does, caches it, stops mid-answer and evicts it',
    async () => {
      const short = await answerInNode(HELLO, 24);
      const long = await answerInNode(HELLO, 200);
      expect(short.text.length).toBeGreaterThan(0);
      // Only the Stop button can end this answer early.
      expect(long.stats.finishReason).toBe('length');

      const scripts = (await bundleChat()) as Record<string, string>;
      const served = await serveRanges(dir, {
        pages: {
          '/': { type: 'text/html', body: await readFile(CHAT_HTML, 'utf8') },
          ...Object.fromEntries(
            Object.entries(scripts).map(([name, body]) => [`/${name}`, { type: 'text/javascript', body }]),
          ),
        },
      });
      const modelUrl = `${served.url}files/`;
      const modelRequests = () => served.requests.filter((r) => r.path.startsWith('/files/'));
      const browser = await launchChromium(chromium(), PAGE_TIMEOUT_MS);
      try {
        const page = await browser.newPage();
        const pageErrors: string[] = [];
        page.on('pageerror', (error) => pageErrors.push(String(error)));
        // What the page and its worker log, for a failure's report.
        const logged: string[] = [];
        page.on('console', (message) => logged.push(`${message.type()}: ${message.text()}`));
        page.on('workercreated', (worker) =>
          worker.on('console', (message) => logged.push(`worker ${message.type()}: ${message.text()}`)),
        );
        onTestFailed(() => console.log(`the chat page logged:\n${logged.join('\n')}`));
        await page.goto(`${served.url}?model=${encodeURIComponent(modelUrl)}`, { waitUntil: 'load' });

        // First visit: files fetched by ranges, with progress that only grows.
        expect(await load(page)).toMatch(/now cached/);
        const fetched = modelRequests();
        expect(fetched.map((r) => r.path)).toContain('/files/model.safetensors');
        for (const r of fetched) expect(r.range, r.path).toMatch(/^bytes=\d+-\d+$/);
        const progress = (await page.evaluate('globalThis.chatProgress')) as WorkerLoadProgress[];
        const downloads = progress.flatMap((p) => (p.stage === 'download' ? [p.bytesReceived] : []));
        expect(downloads.length).toBeGreaterThan(0);
        for (let i = 1; i < downloads.length; i++) expect(downloads[i]).toBeGreaterThan(downloads[i - 1]!);
        const tensors = progress.flatMap((p) => (p.stage === 'weights' ? [p.tensorsLoaded] : []));
        expect(tensors).toEqual(Array.from({ length: 22 }, (_, i) => i));
        expect(progress.at(-1)).toEqual({ stage: 'warmup' });

        // Greedy on the page's WebGPU device: the tokens the cpu reference picks in Node.
        const answer = await send(page, 'Hello', 24);
        expect(answer.text).toBe(short.text);
        expect(answer.finish).toBe(short.stats.finishReason);
        expect(await page.$eval('#speed', (el) => el.textContent)).toMatch(/tokens\/s/);

        // Second visit: everything from the origin-private file system.
        await page.reload({ waitUntil: 'load' });
        // No model request, and the kernels of the first visit compiled ahead while the weights loaded.
        expect(await load(page)).toMatch(/from the cache: no model request; [1-9]\d* kernels compiled ahead/);
        expect(modelRequests()).toHaveLength(fetched.length);

        // Stopped after its first piece, the answer ends early.
        const stopped = await send(page, 'Hello', 200, true);
        expect(stopped.finish).toBe('aborted');
        expect(stopped.tokens).toBeLessThan(200);
        expect(long.text.startsWith(stopped.text)).toBe(true);

        // The cache lists the model; evicting it empties the list.
        expect(await page.$eval('#cached', (el) => (el as HTMLElement).dataset.count)).toBe('1');
        await page.click('#cached button');
        await waitFor(page, "document.getElementById('cached').dataset.count === '0'");
        expect(pageErrors).toEqual([]);
      } finally {
        await browser.close();
        await served.close();
      }
    },
    PAGE_TIMEOUT_MS + 60_000,
  );
});
