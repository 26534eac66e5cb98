import { type Backend, RayoError } from '@rayo/core';
import { namesGguf, TextModel } from '@rayo/text';
import { type FetchFunction, type OpenFile, urlFileOpener } from '@rayo/train';
import type { PipelineCache } from '@rayo/wgpu';
import { ModelCache } from './modelCache.js';
import { type OpfsPreparedWeights, PreparedDataError } from './preparedStore.js';
import type {
  LoadedModelInfo,
  MessageEndpoint,
  SentError,
  WorkerLoadProgress,
  WorkerReply,
  WorkerRequest,
} from './protocol.js';

export interface ServeTextModelOptions {
  /** The backend the model runs on, made at the first load (in a browser worker: `createWgpuBackend`). */
  readonly createBackend: () => Promise<Backend>;
  /** The model cache (default: `ModelCache.open()`, this origin's private file system). */
  readonly openCache?: () => Promise<ModelCache>;
  /** The fetch the files are read with (default: the global one). */
  readonly fetch?: FetchFunction;
}

/** What a backend that compiles pipelines (wgpu's) offers to compile them ahead. */
type PrecompilingPipelines = Pick<PipelineCache, 'compiledShaders' | 'precompile'>;

/** The backend's pipeline cache where it can compile ahead (wgpu), else undefined (cpu). */
function pipelinesOf(backend: Backend): PrecompilingPipelines | undefined {
  const pipelines = (backend as { pipelines?: Partial<PrecompilingPipelines> }).pipelines;
  return typeof pipelines?.precompile === 'function' && typeof pipelines.compiledShaders === 'function'
    ? (pipelines as PrecompilingPipelines)
    : undefined;
}

/** Longest the generation loop runs without letting messages (an abort) in, in ms. */
const YIELD_EVERY_MS = 10;

function sendable(error: unknown): SentError {
  if (error instanceof RayoError) {
    return {
      name: error.name,
      message: error.message,
      ...(error.operation !== undefined ? { operation: error.operation } : {}),
      ...(error.argument !== undefined ? { argument: error.argument } : {}),
      ...(error.expected !== undefined ? { expected: error.expected } : {}),
      ...(error.actual !== undefined ? { actual: error.actual } : {}),
    };
  }
  return error instanceof Error
    ? { name: error.name, message: error.message }
    : { name: 'Error', message: String(error) };
}

/**
 * Compiles every kernel a first answer needs while the model loads: a short
 * prompt (matrix products over several tokens) then decode steps, greedy and
 * sampled (their token pickers differ). The cache is reset by the next
 * generation.
 */
async function warmUp(model: TextModel): Promise<void> {
  const prompt = [0, 1, 2].map((id) => id % model.model.config.vocabSize);
  for (const temperature of [0, 1]) {
    for await (const _ of model.model.generate(prompt, { maxNewTokens: 3, temperature, stop: [] })) {
      // Only the compiles are wanted.
    }
  }
}

/**
 * Serves one text model to a page over `endpoint` (in a worker: `self`):
 * `load` reads a model from a URL (through the model cache unless asked
 * not to) and warms it up, `generate` streams text pieces, `abort` stops the
 * running generation between tokens (it then ends with finishReason
 * 'aborted'), `dispose` frees the model and the backend. Returns a function
 * that stops listening.
 */
export function serveTextModel(endpoint: MessageEndpoint, options: ServeTextModelOptions): () => void {
  let backend: Backend | undefined;
  let model: TextModel | undefined;
  let running: { readonly id: number; readonly controller: AbortController } | undefined;
  // Loads and disposes run one after another; generation and aborts come between.
  let queue: Promise<void> = Promise.resolve();
  const post = (reply: WorkerReply) => endpoint.postMessage(reply);

  async function load(id: number, url: string, request: Extract<WorkerRequest, { type: 'load' }>['options']) {
    if (running) throw busy('load');
    model?.dispose();
    model = undefined;
    let requests = 0;
    const fetchFn = options.fetch ?? ((input, init) => fetch(input, init));
    const counted: FetchFunction = (input, init) => {
      requests++;
      return fetchFn(input, init);
    };
    const progress = (p: WorkerLoadProgress) => post({ type: 'progress', id, progress: p });
    const fileOptions = {
      fetch: counted,
      onBytes: (bytesReceived: number) => progress({ stage: 'download', bytesReceived }),
    };
    const cache =
      request.cache === false ? undefined : await (options.openCache ?? (() => ModelCache.open()))();
    const openFile: OpenFile = cache ? await cache.opener(url, fileOptions) : urlFileOpener(fileOptions);
    // A GGUF file's quantized tensors are kept in their device layout beside the cached file; the first ones
    // are read (on the file system's threads) while the device is made.
    let prepared = cache && namesGguf(url) ? await cache.prepared(url) : undefined;
    backend ??= await options.createBackend();
    // Kept tensors are checked on the device once uploaded where it can (wgpu): the host only reads them.
    prepared?.checkOnDevice(backend);
    const pipelines = pipelinesOf(backend);
    // The shaders of the model's last load compile on the device while the weights are read and uploaded.
    const known = pipelines && cache ? await cache.shaders(url) : undefined;
    const precompiling =
      pipelines && known
        ? pipelines.precompile(known, (compiled, total) => progress({ stage: 'compile', compiled, total }))
        : Promise.resolve(0);
    // Awaited after the load; a rejection meanwhile is not unhandled.
    precompiling.catch(() => {});
    const device = backend;
    const loadWith = (prepared: OpfsPreparedWeights | undefined) =>
      TextModel.load(device, url, {
        openFile,
        ...(request.maxSequence !== undefined ? { maxSequence: request.maxSequence } : {}),
        ...(request.weightDtype !== undefined ? { weightDtype: request.weightDtype } : {}),
        ...(request.kvCacheDtype !== undefined ? { kvCacheDtype: request.kvCacheDtype } : {}),
        ...(prepared ? { prepared } : {}),
        onProgress: (p) => progress({ stage: 'weights', ...p }),
      });
    let rebuilt = false;
    let loaded: TextModel;
    try {
      loaded = await loadWith(prepared);
    } catch (error) {
      if (!(cache && error instanceof PreparedDataError)) throw error;
      // Damaged kept tensors are never uploaded: dropped, and made anew from the cached file.
      await cache.removePrepared(url);
      prepared = await cache.prepared(url);
      prepared?.checkOnDevice(device);
      rebuilt = true;
      loaded = await loadWith(prepared);
    }
    let precompiled: number;
    try {
      precompiled = await precompiling;
      // The warm-up only compiles kernels: where every shader of the model's last load (its warm-up and
      // generations) compiled ahead, it has nothing left to do.
      const compiledAhead = known !== undefined && known.length > 0;
      if (request.warmup !== false && !compiledAhead) {
        progress({ stage: 'warmup' });
        await warmUp(loaded);
      }
      if (pipelines && cache) await cache.saveShaders(url, pipelines.compiledShaders());
    } catch (error) {
      loaded.dispose();
      throw error;
    }
    model = loaded;
    const info: LoadedModelInfo = {
      url,
      vocabSize: loaded.model.config.vocabSize,
      maxSequence: loaded.model.maxSequence,
      weightDtype: loaded.model.weightDtype,
      backend: backend.name,
      fromCache: requests === 0,
      chatTemplate: loaded.tokenizer.chatTemplates.size > 0,
      precompiled,
      prepared: { reused: prepared?.reused ?? 0, written: prepared?.written ?? 0, rebuilt },
    };
    post({ type: 'loaded', id, info });
  }

  function busy(api: string): RayoError {
    return new RayoError('the model worker is generating', {
      operation: api,
      expected: 'no generation running (abort it, or wait for its end)',
      actual: `generation ${running?.id} running`,
    });
  }

  async function generate(request: Extract<WorkerRequest, { type: 'generate' }>) {
    const { id } = request;
    if (!model) {
      throw new RayoError('no model is loaded', {
        operation: 'generateText',
        expected: 'a load() that has finished',
        actual: 'no model',
      });
    }
    if (running) throw busy('generateText');
    const controller = new AbortController();
    running = { id, controller };
    const generation = model.generateText(request.prompt, { ...request.options, signal: controller.signal });
    try {
      let yielded = performance.now();
      for await (const text of generation) {
        post({ type: 'piece', id, text });
        if (performance.now() - yielded > YIELD_EVERY_MS) {
          // Lets a waiting message (an abort) be handled between tokens.
          await new Promise((resolve) => setTimeout(resolve, 0));
          yielded = performance.now();
        }
      }
      post({ type: 'done', id, stats: generation.stats });
    } catch (error) {
      if (!controller.signal.aborted) throw error;
      post({ type: 'done', id, stats: generation.stats });
    } finally {
      running = undefined;
    }
  }

  function dispose() {
    running?.controller.abort(new Error('the model was disposed'));
    model?.dispose();
    model = undefined;
    backend?.dispose();
    backend = undefined;
  }

  const listener = (event: { data: unknown }) => {
    const request = event.data as WorkerRequest;
    const failed = (error: unknown) => post({ type: 'error', id: request.id, error: sendable(error) });
    switch (request.type) {
      case 'load':
        queue = queue.then(() => load(request.id, request.url, request.options).catch(failed));
        return;
      case 'generate':
        generate(request).catch(failed);
        return;
      case 'abort':
        if (running?.id === request.id) running.controller.abort(new Error('aborted by the page'));
        return;
      case 'dispose':
        queue = queue.then(() => {
          dispose();
          post({ type: 'disposed', id: request.id });
        });
        return;
      default:
        failed(
          new RayoError('not a request of the model worker', {
            operation: 'serveTextModel',
            expected: "type 'load' | 'generate' | 'abort' | 'dispose'",
            actual: JSON.stringify((request as { type?: unknown }).type),
          }),
        );
    }
  };
  endpoint.addEventListener('message', listener);
  return () => endpoint.removeEventListener('message', listener);
}
