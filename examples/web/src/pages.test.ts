import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Backend, createBackend } from '@rayo/core';
import { type ChatMessage, TextModel } from '@rayo/text';
import { writeTinyTextModel } from '@rayo/text-testkit';
import { type RangeServer, serveRanges } from '@rayo/train-testkit';
import type { WorkerLoadProgress } from '@rayo/web';
import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, expect, it, onTestFailed } from 'vitest';
import { describeInChromium, launchChromium } from '../../../packages/wgpu/browser/chromium.js';
// @ts-expect-error: the build script is plain JavaScript, without declarations.
import { bundleChat, bundleDemo, CHAT_HTML, INDEX_HTML } from '../build.mjs';

// Both pages of this example in one headless Chromium on SwiftShader's WebGPU
// adapter, served by one local server (a browser start and the bundling of the
// pages' scripts are seconds each on a loaded machine, so they happen once):
// - The demo page in ?quick mode: the device line, the benchmark table and
//   chart, and the sampled names must all appear, and a screenshot of the
//   page is kept. What is checked is the page's elements, never its pixels
//   or its timings.
// - The chat page: a tiny Llama with a character tokenizer, written here and
//   served with byte ranges from 127.0.0.1, is loaded into the page's worker
//   with progress, answers as the same model does in Node (greedy), is read
//   from the browser's cache on the second visit (no model request), can be
//   stopped mid-answer, and evicted.
const DEMO_TIMEOUT_MS = 8 * 60_000;
const CHAT_TIMEOUT_MS = 4 * 60_000 * Number(process.env.RAYO_TIMEOUT_SCALE ?? 1);
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

it("shows the chat page's own code in the README of @rayo/web", async () => {
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
    timeout: CHAT_TIMEOUT_MS,
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

describeInChromium('the pages in Chromium', (chromium) => {
  let browser: Browser;
  let served: RangeServer;
  beforeAll(async () => {
    const [demo, chat] = (await Promise.all([bundleDemo(), bundleChat()])) as [
      string,
      Record<string, string>,
    ];
    served = await serveRanges(dir, {
      pages: {
        '/': { type: 'text/html', body: await readFile(INDEX_HTML, 'utf8') },
        '/main.js': { type: 'text/javascript', body: demo },
        '/chat.html': { type: 'text/html', body: await readFile(CHAT_HTML, 'utf8') },
        ...Object.fromEntries(
          Object.entries(chat).map(([name, body]) => [`/${name}`, { type: 'text/javascript', body }]),
        ),
      },
    });
    browser = await launchChromium(chromium(), Math.max(DEMO_TIMEOUT_MS, CHAT_TIMEOUT_MS));
  });
  afterAll(async () => {
    await browser?.close();
    await served?.close();
  });

  it(
    'the demo page shows the device, a checked benchmark with its chart, and names sampled from a model trained in the page',
    async () => {
      const page = await browser.newPage();
      try {
        await page.setViewport({ width: 1000, height: 800 });
        const pageErrors: string[] = [];
        page.on('pageerror', (error) => pageErrors.push(String(error)));
        await page.goto(`${served.url}?quick`, { waitUntil: 'load' });
        // Done when names are listed, or when the page reports an error.
        await page.waitForFunction(
          () => document.querySelector('#names li') !== null || document.getElementById('error') !== null,
          { timeout: DEMO_TIMEOUT_MS, polling: 250 },
        );
        const shown = await page.evaluate(() => ({
          error: document.getElementById('error')?.textContent ?? undefined,
          device: document.getElementById('device')!.textContent ?? '',
          deviceClass: document.getElementById('device')!.className,
          benchStatus: document.getElementById('bench-status')!.className,
          rows: [...document.querySelectorAll('#bench-table tbody tr')].map((tr) =>
            [...tr.querySelectorAll('td')].map((td) => td.textContent ?? ''),
          ),
          bars: document.querySelectorAll('#bench-chart svg rect').length,
          charts: document.querySelectorAll('#bench-chart svg').length,
          namesStatus: document.getElementById('names-status')!.textContent ?? '',
          names: [...document.querySelectorAll('#names li')].map((li) => li.textContent ?? ''),
        }));
        const screenshot = join(await mkdtemp(join(tmpdir(), 'rayo-demo-')), 'demo.png');
        await writeFile(screenshot, await page.screenshot({ fullPage: true }));
        console.log(
          `demo page on ${shown.device}\n  ${shown.rows.map((r) => r.join(' | ')).join('\n  ')}\n` +
            `  ${shown.namesStatus}\n  names: ${shown.names.join(', ')}\n  screenshot: ${screenshot}`,
        );
        expect(pageErrors).toEqual([]);
        expect(shown.error).toBeUndefined();
        expect(shown.deviceClass).toBe('');
        expect(shown.device).toMatch(/\S/);
        expect(shown.rows).toHaveLength(4);
        for (const [id, checked] of shown.rows) expect(checked, id).toBe('matches');
        expect(shown.benchStatus).toBe('');
        expect(shown.bars).toBe(4);
        expect(shown.charts).toBe(2);
        expect(shown.names).toHaveLength(4);
      } finally {
        await page.close();
      }
    },
    DEMO_TIMEOUT_MS + 60_000,
  );

  it(
    'the chat page loads a model from a URL into its worker with progress, answers as Node does, caches it, stops mid-answer and evicts it',
    async () => {
      const short = await answerInNode(HELLO, 24);
      const long = await answerInNode(HELLO, 200);
      expect(short.text.length).toBeGreaterThan(0);
      // Only the Stop button can end this answer early.
      expect(long.stats.finishReason).toBe('length');

      const modelUrl = `${served.url}files/`;
      const modelRequests = () => served.requests.filter((r) => r.path.startsWith('/files/'));
      const page = await browser.newPage();
      try {
        const pageErrors: string[] = [];
        page.on('pageerror', (error) => pageErrors.push(String(error)));
        // What the page and its worker log, for a failure's report.
        const logged: string[] = [];
        page.on('console', (message) => logged.push(`${message.type()}: ${message.text()}`));
        page.on('workercreated', (worker) =>
          worker.on('console', (message) => logged.push(`worker ${message.type()}: ${message.text()}`)),
        );
        onTestFailed(() => console.log(`the chat page logged:\n${logged.join('\n')}`));
        await page.goto(`${served.url}chat.html?model=${encodeURIComponent(modelUrl)}`, {
          waitUntil: 'load',
        });

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
        await page.close();
      }
    },
    CHAT_TIMEOUT_MS + 60_000,
  );
});
