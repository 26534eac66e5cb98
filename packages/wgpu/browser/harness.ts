// The Node side of the browser conformance harness: bundles page.ts with
// esbuild, serves it from a local HTTP server and runs it in headless Chromium
// (the system's, never a downloaded one) through the DevTools protocol.
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import type { Browser, Page } from 'puppeteer-core';
import { launchChromium, serveFiles } from './chromium.js';
import type { BrowserConformanceReport, BrowserConformanceRun } from './page.js';

export type { BrowserConformanceReport, BrowserConformanceRun } from './page.js';

let bundled: Promise<string> | undefined;

/**
 * The page script: page.ts and everything it imports, sources included, for
 * the browser; bundled once a process (the sources do not change under a test run).
 */
export function bundlePage(): Promise<string> {
  bundled ??= bundle();
  return bundled;
}

async function bundle(): Promise<string> {
  const result = await build({
    entryPoints: [fileURLToPath(new URL('./page.ts', import.meta.url))],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: 'es2023',
    // Workspace packages from their sources, as the tests see them; the
    // browser files of their `#` imports, so neither Dawn nor node: modules
    // are in the page (nothing is marked external).
    conditions: ['@rayo/source'],
    logLevel: 'silent',
  });
  return result.outputFiles[0]!.text;
}

const PAGE_HTML =
  '<!doctype html><meta charset="utf-8"><title>rayo conformance</title><script type="module" src="/conformance.js"></script>';

export interface BrowserConformanceOptions {
  /** The Chromium to launch, unless `browser` is given. */
  readonly executablePath: string;
  /** A Chromium already launched (`launchChromium`) to run in, in a page of its own; left open. */
  readonly browser?: Browser;
  /** Only checks whose name or group contains this text. */
  readonly filter?: string | undefined;
  /**
   * One valid case of every kernel and every other check
   * (`sampleConformance(…, 'kernel')`) instead of the whole suite; ignored with a filter.
   */
  readonly sample?: boolean;
  /** Called with each check's result as the page reports it. */
  readonly onCheck?: (group: string, name: string, error: string | undefined) => void;
  /**
   * How long the page may go without finishing a check before the run is
   * given up (default 10 minutes). The run as a whole has no limit: on a
   * loaded machine it takes as long as the machine needs, and only a page
   * that stops making progress fails.
   */
  readonly stallMs?: number;
}

const DEFAULT_STALL_MS = 10 * 60_000;

/** A promise with its resolve and reject (Node 20 has no Promise.withResolvers). */
function settleable<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Settled while the page still loads, it is awaited later: not unhandled.
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/** Runs the wgpu conformance suite (or its sample) in headless Chromium on its navigator.gpu. */
export async function runBrowserConformance(
  options: BrowserConformanceOptions,
): Promise<BrowserConformanceReport> {
  const stallMs = options.stallMs ?? DEFAULT_STALL_MS;
  const { server, url } = await serveFiles({
    '/': { type: 'text/html', body: PAGE_HTML },
    '/conformance.js': { type: 'text/javascript', body: await bundlePage() },
  });
  // Each DevTools call is short (the run reports back through exposed
  // functions), so the protocol's limit need only cover a slow page load.
  const browser =
    options.browser ?? (await launchChromium(options.executablePath, Math.max(stallMs, 60_000)));
  let opened: Page | undefined;
  let finished = false;
  const result = settleable<BrowserConformanceReport>();
  const pageErrors: string[] = [];
  let checksDone = 0;
  let lastCheck = 'none yet';
  const stalled = () => {
    const errors = pageErrors.length > 0 ? `; page errors: ${pageErrors.join('; ')}` : '';
    result.reject(
      new Error(
        `the browser conformance made no progress for ${stallMs / 1000} s after ${checksDone} checks (the last: ${lastCheck})${errors}`,
      ),
    );
  };
  let watchdog = setTimeout(stalled, stallMs);
  const disconnected = () => result.reject(new Error(`Chromium went away after ${checksDone} checks`));
  browser.once('disconnected', disconnected);

  const start = async () => {
    const page = await browser.newPage();
    opened = page;
    // Given up while the page opened: closed below, or here when it opened after that.
    if (finished && options.browser) await page.close();
    page.on('pageerror', (error) => pageErrors.push(String(error)));
    await page.exposeFunction('reportCheck', (group: string, name: string, error: string | undefined) => {
      checksDone++;
      lastCheck = `${group} › ${name}`;
      clearTimeout(watchdog);
      watchdog = setTimeout(stalled, stallMs);
      options.onCheck?.(group, name, error);
    });
    await page.exposeFunction('reportDone', (report: BrowserConformanceReport) => result.resolve(report));
    await page.exposeFunction('reportFailure', (message: string) =>
      result.reject(new Error(`the conformance page failed after ${checksDone} checks: ${message}`)),
    );
    await page.goto(url, { waitUntil: 'load' });
    await page
      .waitForFunction(() => 'startConformance' in globalThis, { timeout: Math.max(stallMs, 60_000) })
      .catch((error: unknown) => {
        throw new Error(`the conformance page did not load: ${pageErrors.join('; ') || String(error)}`);
      });
    // Starts the run and returns at once: the results come back through the exposed functions.
    await page.evaluate(
      (run) =>
        (globalThis as unknown as { startConformance(run: BrowserConformanceRun): void }).startConformance(
          run,
        ),
      { filter: options.filter, sample: options.sample ?? false } satisfies BrowserConformanceRun,
    );
  };
  try {
    // The watchdog also runs while the page loads: whichever comes first decides.
    const started = start();
    started.catch(() => {});
    return await Promise.race([started.then(() => result.promise), result.promise]);
  } finally {
    finished = true;
    clearTimeout(watchdog);
    browser.off('disconnected', disconnected);
    if (options.browser) await opened?.close().catch(() => {});
    else await browser.close();
    server.close();
  }
}
