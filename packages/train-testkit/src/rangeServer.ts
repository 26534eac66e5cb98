import { readFile, stat } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, normalize } from 'node:path';

/** One request the server answered: the path, the Range header, the status and the body bytes sent. */
export interface ServedRequest {
  readonly path: string;
  readonly range: string | undefined;
  readonly status: number;
  readonly bytes: number;
}

export interface RangeServerOptions {
  /** Extra responses by URL path (a page, its script), served whole with their content type. */
  readonly pages?: Readonly<Record<string, { readonly type: string; readonly body: string }>>;
  /** Paths whose range responses lose their last byte (a server that ends a body early). */
  readonly shortPaths?: readonly string[];
  /** Headers added to every response. */
  readonly headers?: IncomingHttpHeaders;
}

/** A static file server on 127.0.0.1 with byte ranges, recording every request. */
export interface RangeServer {
  readonly server: Server;
  /** `http://127.0.0.1:<port>/`. */
  readonly url: string;
  readonly requests: ServedRequest[];
  close(): Promise<void>;
}

/**
 * Serves the files of `dir` under `/files/` as a static server does for
 * model files: `Range: bytes=a-b` answered with 206 and Content-Range (416
 * outside the file), no Range with the whole file (200), anything missing
 * with 404. Each response body is read from disk as it is asked for.
 */
export async function serveRanges(dir: string, options: RangeServerOptions = {}): Promise<RangeServer> {
  const requests: ServedRequest[] = [];
  const short = new Set(options.shortPaths ?? []);
  const server = createServer((request, response) => {
    void (async () => {
      const path = new URL(request.url ?? '/', 'http://localhost').pathname;
      const range = request.headers.range;
      const answer = (status: number, headers: Record<string, string>, body: Uint8Array | string = '') => {
        const bytes = typeof body === 'string' ? Buffer.from(body) : body;
        requests.push({ path, range, status, bytes: bytes.length });
        response.writeHead(status, { ...options.headers, ...headers }).end(bytes);
      };
      const page = options.pages?.[path];
      if (page) return answer(200, { 'content-type': page.type }, page.body);
      const file = path.startsWith('/files/') ? normalize(decodeURIComponent(path.slice(7))) : undefined;
      const info =
        file && !file.startsWith('..') ? await stat(join(dir, file)).catch(() => undefined) : undefined;
      if (!file || !info?.isFile()) return answer(404, {});
      const size = info.size;
      const type = { 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes' };
      const match = /^bytes=(\d+)-(\d+)$/.exec(range ?? '');
      if (!range) return answer(200, type, await readFile(join(dir, file)));
      if (!match || Number(match[1]) >= size || Number(match[2]) < Number(match[1])) {
        return answer(416, { ...type, 'content-range': `bytes */${size}` });
      }
      const start = Number(match[1]);
      const end = Math.min(Number(match[2]), size - 1);
      const { open } = await import('node:fs/promises');
      const handle = await open(join(dir, file));
      try {
        const body = new Uint8Array(end - start + 1);
        await handle.read(body, 0, body.length, start);
        // A short response still declares the full range, as a broken connection would leave it.
        const sent = short.has(path) ? body.subarray(0, body.length - 1) : body;
        return answer(206, { ...type, 'content-range': `bytes ${start}-${end}/${size}` }, sent);
      } finally {
        await handle.close();
      }
    })().catch((error: unknown) => {
      response.destroy(error instanceof Error ? error : new Error(String(error)));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    server,
    url: `http://127.0.0.1:${port}/`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
