// The Node side of the browser conformance harness: bundles page.ts with
// esbuild, serves it from a local HTTP server and runs it in headless Chromium
// (the system's, never a downloaded one) through the DevTools protocol.
import { accessSync, constants } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { launch } from 'puppeteer-core';
import type { BrowserConformanceReport } from './page.js';

export type { BrowserConformanceReport } from './page.js';

const CHROMIUM_NAMES = ['chromium', 'chromium-browser', 'google-chrome-stable', 'google-chrome'];

/** The Chromium to drive: $CHROMIUM_PATH, else the first of the usual names on $PATH. */
export function findChromium(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const candidates = env.CHROMIUM_PATH
    ? [env.CHROMIUM_PATH]
    : (env.PATH ?? '').split(delimiter).flatMap((dir) => CHROMIUM_NAMES.map((name) => join(dir, name)));
  return candidates.find((path) => {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

// WebGPU on SwiftShader, Chromium's CPU Vulkan: the same adapter on every
// machine, with or without a GPU. --no-sandbox because CI runs as root;
// puppeteer's headless: true adds --headless=new.
export const CHROMIUM_ARGS = ['--no-sandbox', '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader'];

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

async function serve(script: string): Promise<{ server: Server; url: string }> {
  const server = createServer((request, response) => {
    if (request.url === '/') {
      response.writeHead(200, { 'content-type': 'text/html' }).end(PAGE_HTML);
    } else if (request.url === '/conformance.js') {
      response.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
    } else {
      response.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}/` };
}

export interface BrowserConformanceOptions {
  readonly executablePath: string;
  /** Only checks whose name or group contains this text. */
  readonly filter?: string;
  /** Called with each check's result as the page reports it. */
  readonly onCheck?: (group: string, name: string, error: string | undefined) => void;
  /** How long the whole run may take (default 20 minutes: SwiftShader is slow on a few cores). */
  readonly timeoutMs?: number;
}

/** Runs the wgpu conformance suite in headless Chromium on its navigator.gpu. */
export async function runBrowserConformance(
  options: BrowserConformanceOptions,
): Promise<BrowserConformanceReport> {
  const timeoutMs = options.timeoutMs ?? 20 * 60_000;
  const { server, url } = await serve(await bundlePage());
  const browser = await launch({
    executablePath: options.executablePath,
    headless: true,
    args: CHROMIUM_ARGS,
    protocolTimeout: timeoutMs,
  });
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
      (filter) =>
        (
          globalThis as unknown as { runConformance(filter?: string): Promise<BrowserConformanceReport> }
        ).runConformance(filter),
      options.filter,
    );
  } finally {
    await browser.close();
    server.close();
  }
}
