// Headless Chromium for rayo's browser tests: the system's Chromium (never a
// downloaded one) with WebGPU on SwiftShader, and a local server for the page.
import { accessSync, constants } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { delimiter, join } from 'node:path';
import { type Browser, launch } from 'puppeteer-core';
import { describe, it } from 'vitest';

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

/** A file the local server answers with: its content type and body. */
export interface ServedFile {
  readonly type: string;
  readonly body: string;
}

/** Serves `files` (by URL path, e.g. `/` and `/page.js`) on 127.0.0.1 at a free port; anything else is a 404. */
export async function serveFiles(
  files: Readonly<Record<string, ServedFile>>,
): Promise<{ server: Server; url: string }> {
  const server = createServer((request, response) => {
    const file = files[new URL(request.url ?? '/', 'http://localhost').pathname];
    if (file) response.writeHead(200, { 'content-type': file.type }).end(file.body);
    else response.writeHead(404).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}/` };
}

/** Headless Chromium with WebGPU on SwiftShader; `timeoutMs` bounds each DevTools call. */
export function launchChromium(executablePath: string, timeoutMs: number): Promise<Browser> {
  return launch({ executablePath, headless: true, args: CHROMIUM_ARGS, protocolTimeout: timeoutMs });
}

/**
 * Registers `body` as the suite `title`, given the Chromium to drive. Where
 * there is none, under CI it fails (the tests then throw); elsewhere the
 * suite is reported as visibly skipped.
 */
export function describeInChromium(title: string, body: (chromium: () => string) => void): void {
  const found = findChromium();
  if (!found && process.env.CI !== 'true') {
    describe.skip(`${title} — no chromium here (set CHROMIUM_PATH or install chromium)`, () => {
      it('needs chromium', () => {});
    });
    return;
  }
  describe(title, () =>
    body(() => {
      if (!found) throw new Error('no chromium: install it (on PATH) or set CHROMIUM_PATH to it');
      return found;
    }),
  );
}
