import { MessageChannel, type MessagePort } from 'node:worker_threads';
import type { Backend } from '@rayo/core';
import { type GenerationStats, TextModel } from '@rayo/text';
import {
  type LoadedModelInfo,
  type MessageEndpoint,
  ModelCache,
  type OpfsDirectory,
  serveTextModel,
  TextModelWorker,
  type WorkerReply,
} from '@rayo/web';
import { median } from '../median.js';
import { type NodeBlobReads, nodeOpfsDirectory } from './nodeOpfs.js';

// The two ways web-bench runs one model: the browser path (serveTextModel
// and TextModelWorker over a MessageChannel, the files read from a URL into
// @rayo/web's model cache over a folder on disk) and TextModel.load from the
// file, each timed the same way: the time to the first text piece and the
// time per token after it, as the caller of each API sees them.

/** One timed generation. */
export interface GenerationTiming {
  readonly text: string;
  readonly promptTokens: number;
  readonly generatedTokens: number;
  /** From the call to the first text piece, in ms. */
  readonly ttftMs: number;
  /** From the first piece to the end, per token after the first, in ms. */
  readonly msPerToken: number;
  /** What the model itself measured (`GenerationStats`), for comparison. */
  readonly stats?: GenerationStats;
  /**
   * The browser path only: the same two times from when the worker side
   * posted the first piece and the end, as a page on another thread (a real
   * Worker's) would receive them; here both sides share one thread, so a
   * message waits for the worker side to yield.
   */
  readonly posted?: { readonly ttftMs: number; readonly msPerToken: number };
}

/** The first generation after the load and the medians of those after it. */
export interface GenerationRuns {
  readonly first: GenerationTiming;
  readonly runs: readonly GenerationTiming[];
  readonly ttftMs: number;
  readonly msPerToken: number;
  /** Medians of the worker side's times (browser path). */
  readonly posted?: { readonly ttftMs: number; readonly msPerToken: number };
}

/** A generation as either API gives it: the text pieces, then the stats. */
interface Generating {
  readonly pieces: AsyncIterable<string>;
  readonly stats: () => Promise<GenerationStats | undefined>;
  /** When the worker side posted the first piece and the end (browser path). */
  readonly posted?: () => { readonly firstPieceAt?: number; readonly doneAt?: number };
}

export interface GenerationSettings {
  readonly prompt: string;
  readonly newTokens: number;
  /** Timed generations after the first. */
  readonly repeats: number;
}

async function timeGeneration(start: () => Generating): Promise<GenerationTiming> {
  const started = performance.now();
  const generating = start();
  let first: number | undefined;
  let text = '';
  for await (const piece of generating.pieces) {
    first ??= performance.now();
    text += piece;
  }
  const end = performance.now();
  const stats = await generating.stats();
  const tokens = stats?.generatedTokens ?? 0;
  const perToken = (from: number | undefined, to: number | undefined) =>
    tokens > 1 && from !== undefined && to !== undefined ? (to - from) / (tokens - 1) : Number.NaN;
  const posted = generating.posted?.();
  return {
    text,
    promptTokens: stats?.promptTokens ?? 0,
    generatedTokens: tokens,
    ttftMs: (first ?? end) - started,
    msPerToken: perToken(first, end),
    ...(stats ? { stats } : {}),
    ...(posted?.firstPieceAt !== undefined
      ? {
          posted: {
            ttftMs: posted.firstPieceAt - started,
            msPerToken: perToken(posted.firstPieceAt, posted.doneAt),
          },
        }
      : {}),
  };
}

/** Greedy generations of `settings.prompt`: the first after the load, then `repeats` more (medians). */
async function generations(start: () => Generating, settings: GenerationSettings): Promise<GenerationRuns> {
  const first = await timeGeneration(start);
  const runs: GenerationTiming[] = [];
  for (let i = 0; i < settings.repeats; i++) runs.push(await timeGeneration(start));
  const timed = runs.length > 0 ? runs : [first];
  const posted = timed.flatMap((r) => (r.posted ? [r.posted] : []));
  return {
    first,
    runs,
    ttftMs: median(timed.map((r) => r.ttftMs)),
    msPerToken: median(timed.map((r) => r.msPerToken)),
    ...(posted.length === timed.length
      ? {
          posted: {
            ttftMs: median(posted.map((p) => p.ttftMs)),
            msPerToken: median(posted.map((p) => p.msPerToken)),
          },
        }
      : {}),
  };
}

const greedy = (settings: GenerationSettings) => ({ maxNewTokens: settings.newTokens, temperature: 0 });

/** A prompt of `words` of a fixed passage, as long as fits in `tokens` tokens of `model`'s tokenizer. */
export function promptOfTokens(model: TextModel, tokens: number): string {
  const words = PASSAGE.split(' ');
  const text = (n: number) => Array.from({ length: n }, (_, i) => words[i % words.length]).join(' ');
  let n = 1;
  while (model.encodePrompt(text(n + 1)).length <= tokens && n < 64 * tokens) n++;
  return text(n);
}

const PASSAGE =
  'The river rose slowly through the night, and by morning the low fields along the valley ' +
  'were under a sheet of brown water. Farmers moved their animals to the hills, children ' +
  'watched from the bridge, and the old mill, which had stood for two hundred years, creaked ' +
  'as the current pressed against its wheel. Nobody in the village could remember a flood ' +
  'like it, though the records kept in the church spoke of one in the spring of 1784.';

export interface DirectRun {
  readonly device: string;
  readonly loadSeconds: number;
  readonly prompt: string;
  readonly generation: GenerationRuns;
}

/** `TextModel.load` from the file on `backend`, then the timed generations of a prompt of `promptTokens`. */
export async function runDirect(
  backend: Backend,
  path: string,
  promptTokens: number,
  settings: Omit<GenerationSettings, 'prompt'>,
): Promise<DirectRun> {
  const started = performance.now();
  const model = await TextModel.load(backend, path);
  try {
    const loadSeconds = (performance.now() - started) / 1000;
    const prompt = promptOfTokens(model, promptTokens);
    const all = { ...settings, prompt };
    const generation = await generations(() => {
      const g = model.generateText(prompt, greedy(all));
      return { pieces: g, stats: async () => g.stats };
    }, all);
    return { device: backend.info.device, loadSeconds, prompt, generation };
  } finally {
    model.dispose();
  }
}

/**
 * One load through the worker API, in s from the call: the whole load until
 * the page side has its answer, the stages when the worker side reported them.
 */
export interface WorkerLoadTiming {
  readonly seconds: number;
  readonly fromCache: boolean;
  readonly precompiled: number;
  /** The header read and the tokenizer begun (built in steps beside the weights): the first progress of the weights. */
  readonly openSeconds?: number;
  /** The last byte copied into the cache (first load only). */
  readonly downloadSeconds?: number;
  readonly bytesDownloaded: number;
  /** The last tensor on the device. */
  readonly weightsSeconds?: number;
  /** The weights' stored bytes, as the load counts them. */
  readonly weightBytes: number;
  /** The warmup (kernels compiled by a short generation), from its start to the end of the load. */
  readonly warmupSeconds?: number;
  /** Quantized tensors uploaded as the cache kept them, and repacked and kept (see `LoadedModelInfo`). */
  readonly prepared: LoadedModelInfo['prepared'];
}

/** Called with each reply as the worker side posts it, and when. */
type PostObserver = (reply: WorkerReply, at: number) => void;

/**
 * Loads `url`, timing the stages by when the worker side reported them (as
 * a page on another thread would receive them) and the whole load by when
 * the page side got its answer.
 */
async function timedLoad(
  client: TextModelWorker,
  url: string,
  observe: (observer: PostObserver) => void,
): Promise<WorkerLoadTiming> {
  const started = performance.now();
  const since = (at: number) => (at - started) / 1000;
  let openSeconds: number | undefined;
  let downloadSeconds: number | undefined;
  let bytesDownloaded = 0;
  let weightsSeconds: number | undefined;
  let weightBytes = 0;
  let warmupAt: number | undefined;
  observe((reply, at) => {
    if (reply.type !== 'progress') return;
    const p = reply.progress;
    if (p.stage === 'download') {
      downloadSeconds = since(at);
      bytesDownloaded = p.bytesReceived;
    } else if (p.stage === 'weights') {
      if (p.tensorsLoaded === 0) openSeconds = since(at);
      if (p.tensorsLoaded === p.tensorsTotal) {
        weightsSeconds = since(at);
        weightBytes = p.bytesTotal;
      }
    } else if (p.stage === 'warmup') warmupAt = since(at);
  });
  const info = await client.load(url);
  const seconds = since(performance.now());
  return {
    seconds,
    fromCache: info.fromCache,
    precompiled: info.precompiled,
    ...(openSeconds !== undefined ? { openSeconds } : {}),
    ...(downloadSeconds !== undefined ? { downloadSeconds } : {}),
    bytesDownloaded,
    ...(weightsSeconds !== undefined ? { weightsSeconds } : {}),
    weightBytes,
    ...(warmupAt !== undefined ? { warmupSeconds: seconds - warmupAt } : {}),
    prepared: info.prepared,
  };
}

export interface WorkerRun {
  readonly firstLoad: WorkerLoadTiming;
  /** The median of the loads from the cache (the lower middle one of an even count). */
  readonly cachedLoad: WorkerLoadTiming;
  /** Seconds of every load from the cache, in the order they ran. */
  readonly cachedLoads: readonly number[];
  /** Bytes of the model's files in the cache after the first load. */
  readonly cachedBytes: number;
  readonly generation: GenerationRuns;
}

function endpoint(port: MessagePort): MessageEndpoint {
  port.start();
  return port as unknown as MessageEndpoint;
}

/** `port` for the worker side, telling `observer()` of each reply as it is posted. */
function observedEndpoint(port: MessagePort, observer: () => PostObserver | undefined): MessageEndpoint {
  const inner = endpoint(port);
  return {
    postMessage(message) {
      observer()?.(message as WorkerReply, performance.now());
      inner.postMessage(message);
    },
    addEventListener: (type, listener) => inner.addEventListener(type, listener),
    removeEventListener: (type, listener) => inner.removeEventListener(type, listener),
  };
}

/**
 * A page's visit: a worker side (`serveTextModel` on a backend of its own)
 * and a `TextModelWorker` joined by a MessageChannel, with the model cache
 * in `root`; `body` gets the client and a way to watch the replies as the
 * worker side posts them. The model and its device are freed after.
 */
async function visit<T>(
  createBackend: () => Promise<Backend>,
  root: OpfsDirectory,
  body: (client: TextModelWorker, observe: (observer: PostObserver) => void) => Promise<T>,
): Promise<T> {
  const { port1, port2 } = new MessageChannel();
  let observer: PostObserver | undefined;
  const stop = serveTextModel(
    observedEndpoint(port2, () => observer),
    { createBackend, openCache: () => ModelCache.open(root) },
  );
  const client = new TextModelWorker(endpoint(port1));
  try {
    return await body(client, (next) => {
      observer = next;
    });
  } finally {
    await client.dispose();
    stop();
    port1.close();
    port2.close();
  }
}

/**
 * The browser path in Node, as visits of a page to the model at `url`
 * with the model cache in `cacheDir` (empty at the start; its files' Blobs
 * read as `reads` says): the first loads it from the URL into the cache;
 * each of the next `cachedLoads`, on a new backend as a new page has, loads
 * it from the cache (the shaders the first compiled are compiled ahead),
 * and the last times the generations.
 */
export async function runWorker(
  createBackend: () => Promise<Backend>,
  url: string,
  cacheDir: string,
  settings: GenerationSettings,
  reads: NodeBlobReads = 'fs',
  cachedLoads = 1,
): Promise<WorkerRun> {
  const root = await nodeOpfsDirectory(cacheDir, reads);
  const firstLoad = await visit(createBackend, root, (client, observe) => timedLoad(client, url, observe));
  const cached = await (await ModelCache.open(root)).list();
  const loads: WorkerLoadTiming[] = [];
  for (let i = 1; i < cachedLoads; i++) {
    loads.push(await visit(createBackend, root, (client, observe) => timedLoad(client, url, observe)));
  }
  return visit(createBackend, root, async (client, observe) => {
    loads.push(await timedLoad(client, url, observe));
    const byTime = [...loads].sort((a, b) => a.seconds - b.seconds);
    const cachedLoad = byTime[Math.floor((byTime.length - 1) / 2)]!;
    const generation = await generations(() => {
      const posted: { firstPieceAt?: number; doneAt?: number } = {};
      observe((reply, at) => {
        if (reply.type === 'piece') posted.firstPieceAt ??= at;
        else if (reply.type === 'done') posted.doneAt = at;
      });
      const g = client.generateText(settings.prompt, greedy(settings));
      return { pieces: g, stats: () => g.stats, posted: () => posted };
    }, settings);
    return {
      firstLoad,
      cachedLoad,
      cachedLoads: loads.map((l) => l.seconds),
      cachedBytes: cached[0]?.bytes ?? 0,
      generation,
    };
  });
}
