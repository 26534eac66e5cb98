// The Node side of the browser conformance harness: bundles page.ts with
// esbuild, serves it from a local HTTP server and runs it in headless Chromium
// (the system's, never a downloaded one) through the DevTools protocol.
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { launchChromium, serveFiles } from './chromium.js';
import type { BrowserConformanceReport, BrowserConformanceRun } from './page.js';

export type { BrowserConformanceReport, BrowserConformanceRun } from './page.js';

/** The page script: page.ts and everything it imports, sources included, for the browser. */
export async function bundlePage(): Promise<string> {
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
  readonly executablePath: string;
  /** Only checks whose name or group contains this text. */
  readonly filter?: string | undefined;
  /**
   * One valid case of every kernel × variant and every other check
   * (`sampleConformance`) instead of the whole suite; ignored with a filter.
   */
  readonly sample?: boolean;
  /** Called with each check's result as the page reports it. */
  readonly onCheck?: (group: string, name: string, error: string | undefined) => void;
  /** How long the whole run may take (default 20 minutes: SwiftShader is slow on a few cores). */
  readonly timeoutMs?: number;
}

/** Runs the wgpu conformance suite (or its sample) in headless Chromium on its navigator.gpu. */
export async function runBrowserConformance(
  options: BrowserConformanceOptions,
): Promise<BrowserConformanceReport> {
  const timeoutMs = options.timeoutMs ?? 20 * 60_000;
  const { server, url } = await serveFiles({
    '/': { type: 'text/html', body: PAGE_HTML },
    '/conformance.js': { type: 'text/javascript', body: await bundlePage() },
  });
  const browser = await launchChromium(options.executablePath, timeoutMs);
  try {
    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(String(error)));
    await page.exposeFunction('reportCheck', (group: string, name: string, error: string | undefined) =>
      options.onCheck?.(group, name, error),
    );
    await page.goto(url, { waitUntil: 'load' });
    await page
      .waitForFunction(() => 'runConformance' in globalThis, { timeout: 60_000 })
      .catch((error: unknown) => {
        throw new Error(`the conformance page did not load: ${pageErrors.join('; ') || String(error)}`);
      });
    return await page.evaluate(
      (run) =>
        (
          globalThis as unknown as {
            runConformance(run: BrowserConformanceRun): Promise<BrowserConformanceReport>;
          }
        ).runConformance(run),
      { filter: options.filter, sample: options.sample ?? false } satisfies BrowserConformanceRun,
    );
  } finally {
    await browser.close();
    server.close();
  }
}
