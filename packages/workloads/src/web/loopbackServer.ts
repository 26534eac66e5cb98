import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename, join } from 'node:path';

// The files of one folder over HTTP on the loopback interface, as a static
// file host serves a model to a page: GET with a `Range: bytes=a-b` header
// answers 206 with that range streamed from disk, GET without one answers
// the whole file, a name outside the folder or absent answers 404.

export interface LoopbackServer {
  /** The folder's URL, ending in `/`. */
  readonly url: string;
  /** Body bytes sent so far. */
  readonly bytesSent: () => number;
  readonly requests: () => number;
  close(): Promise<void>;
}

/** Bytes read from disk per chunk of a response. */
const READ_CHUNK = 1 << 20;

/** Serves the files directly in `dir` at `http://127.0.0.1:<port>/<name>`. */
export async function serveFolder(dir: string): Promise<LoopbackServer> {
  let sent = 0;
  let requests = 0;
  const server = createServer((request, response) => {
    requests++;
    const name = decodeURIComponent(new URL(request.url ?? '/', 'http://127.0.0.1').pathname.slice(1));
    const path = join(dir, name);
    void (async () => {
      const info =
        name === basename(name) && name !== '' ? await stat(path).catch(() => undefined) : undefined;
      if (request.method !== 'GET' || !info?.isFile()) {
        response.writeHead(info ? 405 : 404).end();
        return;
      }
      const size = info.size;
      const match = /^bytes=(\d+)-(\d*)$/.exec(request.headers.range ?? '');
      const start = match ? Number(match[1]) : 0;
      const end = match?.[2] ? Math.min(Number(match[2]), size - 1) : size - 1;
      if (match && (start >= size || end < start)) {
        response.writeHead(416, { 'content-range': `bytes */${size}` }).end();
        return;
      }
      response.writeHead(match ? 206 : 200, {
        'content-type': 'application/octet-stream',
        'accept-ranges': 'bytes',
        'content-length': String(end - start + 1),
        ...(match ? { 'content-range': `bytes ${start}-${end}/${size}` } : {}),
      });
      createReadStream(path, { start, end, highWaterMark: READ_CHUNK })
        .on('data', (chunk) => {
          sent += chunk.length;
        })
        .on('error', (error) => response.destroy(error))
        .pipe(response);
    })().catch((error: unknown) =>
      response.destroy(error instanceof Error ? error : new Error(String(error))),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    bytesSent: () => sent,
    requests: () => requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
