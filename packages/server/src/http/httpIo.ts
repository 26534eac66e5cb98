import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError } from '../api/apiError.js';

/** Reads a request's body as JSON, refusing one over `maxBytes` (413) or not JSON (400). */
export async function readJsonBody(
  request: IncomingMessage,
  maxBytes: number,
  operation: string,
): Promise<unknown> {
  const tooLarge = (actual: string) =>
    new ApiError(413, 'invalid_request_error', 'request_too_large', 'the request body is too large', {
      operation,
      argument: 'body',
      expected: `at most ${maxBytes} bytes (maxBodyBytes)`,
      actual,
    });
  const declared = Number(request.headers['content-length']);
  if (declared > maxBytes) throw tooLarge(`${declared} bytes`);
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    if (bytes > maxBytes) throw tooLarge(`more than ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new ApiError(400, 'invalid_request_error', 'invalid_json', 'the request body is not JSON', {
      operation,
      argument: 'body',
      expected: 'a JSON object',
      actual: (error as Error).message,
    });
  }
}

/** Sends `body` as JSON with `status`. */
export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  response.end(text);
}

/** Starts a server-sent event stream. */
export function startEvents(response: ServerResponse): void {
  response.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  response.flushHeaders();
}

/** One event: `data: <json>` (or the literal `[DONE]`) and a blank line. */
export function sendEvent(response: ServerResponse, data: unknown): void {
  // A client that left gets nothing more (its sequence is being cancelled).
  if (response.destroyed) return;
  response.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
}
