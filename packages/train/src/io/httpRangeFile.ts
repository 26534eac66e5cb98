import { InvalidArgumentError, RayoError } from '@rayo/core';
import type { OpenFile, RandomAccessFile } from '../checkpoint/randomAccessFile.js';
import { FileSystemError } from './fileError.js';

/** The `fetch` a URL source calls: the global one, or any with its signature (to count requests, say). */
export type FetchFunction = (input: string, init?: RequestInit) => Promise<Response>;

export interface UrlFileOptions {
  /** Default: the global `fetch` (Node ≥ 18, browsers, workers). */
  readonly fetch?: FetchFunction;
  /** Called with the body bytes received so far by every file this opener opened: a download's progress. */
  readonly onBytes?: (bytesReceived: number) => void;
  /** Aborts every request of this opener (a read then throws the signal's reason). */
  readonly signal?: AbortSignal;
}

const OPEN = 'openUrlFile';
const READ = 'readUrlFile';

/** The total size a `Content-Range: bytes a-b/total` (or `bytes * /total`) header gives, or undefined. */
function totalOfContentRange(header: string | null): number | undefined {
  const match = /^bytes (?:\d+-\d+|\*)\/(\d+)$/.exec(header?.trim() ?? '');
  return match ? Number(match[1]) : undefined;
}

function statusError(url: string, response: Response, expected: string, api: string): RayoError {
  const actual = `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}`;
  // A missing file reads as Node's ENOENT, so that optional files (an index, a chat template) read as absent.
  if (response.status === 404 || response.status === 410) {
    return new FileSystemError('no file at the URL', 'ENOENT', {
      operation: api,
      argument: url,
      expected,
      actual,
    });
  }
  return new RayoError('the server refused the request', { operation: api, argument: url, expected, actual });
}

async function request(
  fetchFn: FetchFunction,
  url: string,
  range: string,
  signal: AbortSignal | undefined,
  api: string,
): Promise<Response> {
  try {
    return await fetchFn(url, { headers: { range }, ...(signal ? { signal } : {}) });
  } catch (error) {
    if (signal?.aborted) throw signal.reason;
    throw new RayoError('the request failed', {
      operation: api,
      argument: url,
      expected: `a response to Range: ${range}`,
      actual: error instanceof Error ? error.message : String(error),
      cause: error,
    });
  }
}

/**
 * Opens files over HTTP(S) as random-access files: the size from a one-byte
 * range request, then every read its own `Range` request, streamed straight
 * into the caller's buffer (a file is never held whole; the loaders' reads
 * are at most `maxReadBytes`). A server that answers a range with the whole
 * file (200) is refused rather than downloaded; a 404 is a `FileSystemError`
 * with code `ENOENT` naming the URL, and a response shorter or longer than
 * the range asked is a RayoError naming the URL.
 */
export function urlFileOpener(options: UrlFileOptions = {}): OpenFile {
  const fetchFn: FetchFunction = options.fetch ?? ((input, init) => fetch(input, init));
  const signal = options.signal;
  let received = 0;
  const counted = (bytes: number) => {
    received += bytes;
    options.onBytes?.(received);
  };
  return async (url) => {
    if (typeof url !== 'string' || !/^https?:\/\//i.test(url)) {
      throw new InvalidArgumentError('not an http(s) URL', {
        operation: OPEN,
        argument: 'url',
        expected: 'an absolute http:// or https:// URL',
        actual: JSON.stringify(url),
      });
    }
    const response = await request(fetchFn, url, 'bytes=0-0', signal, OPEN);
    let size: number | undefined;
    if (response.status === 206) {
      size = totalOfContentRange(response.headers.get('content-range'));
      await response.arrayBuffer();
    } else if (response.status === 416) {
      // An empty file has no byte 0: the server says its size as `bytes */0`.
      size = totalOfContentRange(response.headers.get('content-range'));
      await response.body?.cancel();
    } else {
      await response.body?.cancel();
      throw response.status === 200
        ? new RayoError('the server does not serve byte ranges', {
            operation: OPEN,
            argument: url,
            expected: 'HTTP 206 to a Range request (a model file is read in pieces, never whole)',
            actual: 'HTTP 200 (the whole file)',
          })
        : statusError(url, response, 'HTTP 206 to a Range request', OPEN);
    }
    if (size === undefined) {
      throw new RayoError('the server gave no readable file size', {
        operation: OPEN,
        argument: url,
        expected: 'a Content-Range header `bytes a-b/size`',
        actual: JSON.stringify(response.headers.get('content-range')),
      });
    }
    return urlFile(url, size, fetchFn, signal, counted);
  };
}

function urlFile(
  url: string,
  size: number,
  fetchFn: FetchFunction,
  signal: AbortSignal | undefined,
  counted: (bytes: number) => void,
): RandomAccessFile {
  let closed = false;
  return {
    name: url,
    size,
    async read(into, position) {
      const end = position + into.length;
      if (closed || position < 0 || end > size) {
        throw new RayoError(closed ? 'read after close' : 'read outside the file', {
          operation: READ,
          argument: url,
          expected: closed ? 'an open file' : `a range within ${size} bytes`,
          actual: `[${position}, ${end})`,
        });
      }
      if (into.length === 0) return;
      const range = `bytes=${position}-${end - 1}`;
      const response = await request(fetchFn, url, range, signal, READ);
      const start = /^bytes (\d+)-/.exec(response.headers.get('content-range') ?? '')?.[1];
      if (response.status !== 206 || Number(start) !== position || !response.body) {
        await response.body?.cancel();
        throw response.status === 206
          ? new RayoError('the server answered another range', {
              operation: READ,
              argument: url,
              expected: `Content-Range from ${position}`,
              actual: JSON.stringify(response.headers.get('content-range')),
            })
          : statusError(url, response, `HTTP 206 for ${range}`, READ);
      }
      const reader = response.body.getReader();
      let done = 0;
      try {
        for (;;) {
          const chunk = await reader.read();
          if (chunk.done) break;
          if (done + chunk.value.length > into.length) {
            throw new RayoError('the server sent more than the range asked', {
              operation: READ,
              argument: url,
              expected: `${into.length} bytes at ${position}`,
              actual: `more than ${into.length}`,
            });
          }
          into.set(chunk.value, done);
          done += chunk.value.length;
          counted(chunk.value.length);
        }
      } catch (error) {
        await reader.cancel().catch(() => {});
        if (signal?.aborted) throw signal.reason;
        if (error instanceof RayoError) throw error;
        throw new RayoError('the response broke off', {
          operation: READ,
          argument: url,
          expected: `${into.length} bytes at ${position}`,
          actual: `${done} bytes, then ${error instanceof Error ? error.message : String(error)}`,
          cause: error,
        });
      }
      if (done !== into.length) {
        throw new RayoError('the response ended early', {
          operation: READ,
          argument: url,
          expected: `${into.length} bytes at ${position}`,
          actual: `${done}`,
        });
      }
    },
    async close() {
      closed = true;
    },
  };
}

/** `urlFileOpener()` with the global fetch: files over HTTP(S) read by ranges. */
export const openUrlFile: OpenFile = (url) => urlFileOpener()(url);

/** `name` in the folder `dir`: a path or a URL, joined with one `/`. */
export function joinModelPath(dir: string, name: string): string {
  return dir.endsWith('/') ? `${dir}${name}` : `${dir}/${name}`;
}
