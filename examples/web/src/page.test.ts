import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { describeInChromium, launchChromium, serveFiles } from '../../../packages/wgpu/browser/chromium.js';
// @ts-expect-error: the build script is plain JavaScript, without declarations.
import { bundleDemo, INDEX_HTML } from '../build.mjs';

// The demo page in ?quick mode in headless Chromium on SwiftShader's WebGPU
// adapter: the device line, the benchmark table and chart, and the sampled
// names must all appear, and a screenshot of the page is kept. What is
// checked is the page's elements, never its pixels or its timings.
const PAGE_TIMEOUT_MS = 8 * 60_000;

describeInChromium('the demo page', (chromium) => {
  it(
    'shows the device, a checked benchmark with its chart, and names sampled from a model trained in the page',
    async () => {
      const { server, url } = await serveFiles({
        '/': { type: 'text/html', body: await readFile(INDEX_HTML, 'utf8') },
        '/main.js': { type: 'text/javascript', body: (await bundleDemo()) as string },
      });
      const browser = await launchChromium(chromium(), PAGE_TIMEOUT_MS);
      try {
        const page = await browser.newPage();
        await page.setViewport({ width: 1000, height: 800 });
        const pageErrors: string[] = [];
        page.on('pageerror', (error) => pageErrors.push(String(error)));
        await page.goto(`${url}?quick`, { waitUntil: 'load' });
        // Done when names are listed, or when the page reports an error.
        await page.waitForFunction(
          () => document.querySelector('#names li') !== null || document.getElementById('error') !== null,
          { timeout: PAGE_TIMEOUT_MS, polling: 250 },
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
        const dir = await mkdtemp(join(tmpdir(), 'rayo-demo-'));
        const screenshot = join(dir, 'demo.png');
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
        await browser.close();
        server.close();
      }
    },
    PAGE_TIMEOUT_MS + 60_000,
  );
});
