import { RayoError } from '@rayo/core';
import type { ChatMessage, GenerationStats } from '@rayo/text';
import type {
  LoadedModelInfo,
  MessageEndpoint,
  SentError,
  WorkerGenerateOptions,
  WorkerLoadOptions,
  WorkerLoadProgress,
  WorkerReply,
} from './protocol.js';

export interface WorkerLoadCall extends WorkerLoadOptions {
  /** Called as the load goes: bytes copied in, tensors on the device, then the warmup. */
  readonly onProgress?: (progress: WorkerLoadProgress) => void;
}

/** The text of one generation in the worker, as it comes: one stream (a second for-await goes on from where the first stopped). */
export interface WorkerGeneration extends AsyncIterable<string> {
  /** The generation's stats once it has ended (finishReason 'aborted' after an abort). */
  readonly stats: Promise<GenerationStats | undefined>;
  /** Stops the generation after the token being made; the iteration then ends. */
  abort(): void;
}

/** The worker's error again on this side: a RayoError with the worker's message, operation and argument. */
function received(sent: SentError): RayoError {
  const error = new RayoError(sent.message);
  Object.defineProperties(error, {
    name: { value: sent.name },
    operation: { value: sent.operation },
    argument: { value: sent.argument },
    expected: { value: sent.expected },
    actual: { value: sent.actual },
  });
  return error;
}

type Handler = (reply: WorkerReply) => void;

/** The error event of a `Worker` (a MessagePort has none). */
interface WorkerEvents {
  addEventListener?(type: 'error', listener: (event: { message?: unknown }) => void): void;
}

/**
 * A text model in a Web Worker (one that runs `serveTextModel`, as
 * `@rayo/web/worker` does), driven from the page: `load(url)`,
 * `generateText` as a stream of text pieces, `abort`, `dispose`. The page
 * never blocks on the model; everything crosses as postMessage.
 */
export class TextModelWorker {
  readonly #endpoint: MessageEndpoint & { terminate?: () => void };
  readonly #handlers = new Map<number, Handler>();
  #next = 1;
  #generating: number | undefined;

  constructor(endpoint: MessageEndpoint & { terminate?: () => void }) {
    this.#endpoint = endpoint;
    endpoint.addEventListener('message', (event) => {
      const reply = event.data as WorkerReply;
      this.#handlers.get(reply.id)?.(reply);
    });
    // A Worker whose script fails (it did not load, or threw outside a request) answers nothing more:
    // every call waiting on it fails with what the browser said.
    const failed = (event: { message?: unknown }) => {
      const error: SentError = {
        name: 'RayoError',
        message: `TextModelWorker: the model worker failed: ${String(event.message ?? 'its script did not load')}`,
        operation: 'TextModelWorker',
      };
      for (const [id, handler] of [...this.#handlers]) handler({ type: 'error', id, error });
    };
    (endpoint as unknown as WorkerEvents).addEventListener?.('error', failed);
  }

  #send(request: Record<string, unknown>, handler: Handler): number {
    const id = this.#next++;
    this.#handlers.set(id, handler);
    this.#endpoint.postMessage({ ...request, id });
    return id;
  }

  /**
   * Loads the model at `url` (a Hugging Face folder URL or a `.gguf` URL,
   * relative to the page allowed) into the worker, replacing any model
   * there; resolves once it is warmed up.
   */
  load(url: string, options: WorkerLoadCall = {}): Promise<LoadedModelInfo> {
    const base = (globalThis as { location?: { href: string } }).location?.href;
    const absolute = new URL(url, base).href;
    const { onProgress, ...rest } = options;
    return new Promise((resolve, reject) => {
      const id = this.#send({ type: 'load', url: absolute, options: rest }, (reply) => {
        if (reply.type === 'progress') onProgress?.(reply.progress);
        else {
          this.#handlers.delete(id);
          if (reply.type === 'loaded') resolve(reply.info);
          else if (reply.type === 'error') reject(received(reply.error));
        }
      });
    });
  }

  /**
   * Generates text after `prompt` (a string, or chat messages rendered with
   * the model's chat template) in the worker; the pieces come as they are
   * decoded. A worker error ends the iteration by throwing it.
   */
  generateText(
    prompt: string | readonly ChatMessage[],
    options: WorkerGenerateOptions = {},
  ): WorkerGeneration {
    const pieces: string[] = [];
    let ended = false;
    let failure: RayoError | undefined;
    let wake: (() => void) | undefined;
    let settle: (stats: GenerationStats | undefined) => void = () => {};
    const stats = new Promise<GenerationStats | undefined>((resolve) => {
      settle = resolve;
    });
    const id = this.#send({ type: 'generate', prompt, options }, (reply) => {
      if (reply.type === 'piece') pieces.push(reply.text);
      else if (reply.type === 'done' || reply.type === 'error') {
        this.#handlers.delete(id);
        if (this.#generating === id) this.#generating = undefined;
        ended = true;
        if (reply.type === 'error') failure = received(reply.error);
        settle(reply.type === 'done' ? reply.stats : undefined);
      }
      wake?.();
    });
    this.#generating = id;
    async function* streamPieces(): AsyncGenerator<string, void, undefined> {
      for (;;) {
        const piece = pieces.shift();
        if (piece !== undefined) {
          yield piece;
          continue;
        }
        if (ended) {
          if (failure) throw failure;
          return;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      }
    }
    // One stream of pieces: a second for-await goes on where the first left off.
    const pieceStream = streamPieces();
    return {
      stats,
      abort: () => this.#endpoint.postMessage({ type: 'abort', id }),
      [Symbol.asyncIterator]: () => pieceStream,
    };
  }

  /** Aborts the running generation, if any (its iteration then ends, finishReason 'aborted'). */
  abort(): void {
    if (this.#generating !== undefined) this.#endpoint.postMessage({ type: 'abort', id: this.#generating });
  }

  /** Frees the model and the device in the worker, then terminates the worker (where it is a Worker). */
  dispose(): Promise<void> {
    this.abort();
    return new Promise((resolve) => {
      const id = this.#send({ type: 'dispose' }, () => {
        this.#handlers.delete(id);
        this.#endpoint.terminate?.();
        resolve();
      });
    });
  }
}
