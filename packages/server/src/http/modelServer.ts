import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename } from 'node:path';
import type { TextModel } from '@rayo/text';
import { ApiError } from '../api/apiError.js';
import type { DecodeEngine } from '../engine/decodeEngine.js';
import { ModelSlotsEngine } from '../engine/modelSlotsEngine.js';
import { ServerMetrics } from '../metrics/serverMetrics.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { type CompletionContext, serveCompletion } from './completionRoute.js';
import { toApiError } from './errorMapping.js';
import { sendJson } from './httpIo.js';
import { type ServerLimits, serverLimits } from './serverLimits.js';

/** The routes, for the metrics' labels (any other path counts as `other`). */
const ROUTES = new Set(['/v1/chat/completions', '/v1/completions', '/v1/models', '/health', '/metrics']);

export interface ModelServerOptions {
  /** The tokenizer, chat template and generation defaults; its `model` is the engine's default. */
  readonly model: TextModel;
  /** The decoder the scheduler steps (default: one slot, `model.model`). */
  readonly engine?: DecodeEngine;
  /** The id clients name in `model` (default: the model's folder or file name). */
  readonly modelId?: string;
  readonly limits?: Partial<ServerLimits>;
}

/**
 * An OpenAI-compatible server over a `Scheduler`: chat and text completions
 * (whole, or streamed as server-sent events), `GET /v1/models`,
 * `GET /health` and `GET /metrics`. `listen` serves it on `node:http`;
 * `handle` answers one request of any Node HTTP server.
 */
export class ModelServer {
  readonly model: TextModel;
  readonly modelId: string;
  readonly scheduler: Scheduler;
  readonly metrics = new ServerMetrics();
  readonly limits: ServerLimits;
  readonly #created = Math.floor(Date.now() / 1000);
  readonly #context: CompletionContext;
  #http: Server | undefined;
  #closing = false;

  constructor(options: ModelServerOptions) {
    this.model = options.model;
    this.modelId = options.modelId ?? (basename(options.model.path).replace(/\.gguf$/i, '') || 'rayo');
    const engine = options.engine ?? new ModelSlotsEngine([options.model.model]);
    this.limits = serverLimits(options.limits ?? {}, engine.usage().maxSequences, engine.maxSequence);
    this.scheduler = new Scheduler(engine, this.limits, this.metrics);
    this.#context = {
      model: this.model,
      modelId: this.modelId,
      scheduler: this.scheduler,
      limits: this.limits,
    };
  }

  /** Serves on `host:port` (port 0: any free one); resolves with the address taken. */
  listen(port = 0, host = '127.0.0.1'): Promise<AddressInfo> {
    const http = createServer((req, res) => void this.handle(req, res));
    this.#http = http;
    return new Promise((resolve, reject) => {
      http.once('error', reject);
      http.listen(port, host, () => {
        http.off('error', reject);
        resolve(http.address() as AddressInfo);
      });
    });
  }

  /**
   * Stops taking requests: queued ones get 503, running ones are cancelled
   * (their streams end with an error event), and the listening socket closes.
   */
  async close(): Promise<void> {
    this.#closing = true;
    await this.scheduler.close();
    const http = this.#http;
    if (!http) return;
    await new Promise<void>((resolve) => {
      http.close(() => resolve());
      http.closeAllConnections();
    });
  }

  /** Answers one HTTP request. */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const operation = `${req.method} ${path}`;
    res.once('finish', () => this.metrics.responded(ROUTES.has(path) ? path : 'other', res.statusCode));
    try {
      await this.#route(req, res, path, operation);
    } catch (error) {
      const apiError = toApiError(error, operation);
      if (res.headersSent || res.destroyed) return;
      const headers: Record<string, string> = {};
      if (apiError.status === 429 || apiError.status === 503) headers['retry-after'] = '1';
      // An unread body would stall the connection: a refused request closes it.
      if (!req.complete) headers.connection = 'close';
      sendJson(res, apiError.status, apiError.body(), headers);
    }
  }

  async #route(req: IncomingMessage, res: ServerResponse, path: string, operation: string): Promise<void> {
    const routes: Record<string, { method: string; run: () => Promise<void> | void }> = {
      '/v1/chat/completions': { method: 'POST', run: () => serveCompletion(this.#context, 'chat', req, res) },
      '/v1/completions': { method: 'POST', run: () => serveCompletion(this.#context, 'text', req, res) },
      '/v1/models': {
        method: 'GET',
        run: () =>
          sendJson(res, 200, {
            object: 'list',
            data: [{ id: this.modelId, object: 'model', created: this.#created, owned_by: 'rayo' }],
          }),
      },
      '/health': {
        method: 'GET',
        run: () => sendJson(res, this.#closing ? 503 : 200, { status: this.#closing ? 'closing' : 'ok' }),
      },
      '/metrics': {
        method: 'GET',
        run: () => {
          const text = this.metrics.render({
            queued: this.scheduler.queued,
            active: this.scheduler.active,
            engine: this.scheduler.engine.usage(),
          });
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
          res.end(text);
        },
      },
    };
    const route = routes[path];
    if (!route) {
      throw new ApiError(404, 'not_found_error', 'unknown_route', `no route ${path}`, {
        operation,
        argument: 'path',
        expected: Object.keys(routes).join(', '),
        actual: path,
      });
    }
    if (req.method !== route.method) {
      throw new ApiError(
        405,
        'invalid_request_error',
        'method_not_allowed',
        `${path} takes ${route.method}`,
        {
          operation,
          argument: 'method',
          expected: route.method,
          actual: req.method ?? 'none',
        },
      );
    }
    await route.run();
  }
}
