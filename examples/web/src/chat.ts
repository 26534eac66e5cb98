// The chat page: a model from a URL, loaded into a Web Worker with progress,
// answering with streamed text; the cached models listed, each evictable.
import type { ChatMessage } from '@rayo/text';
import { ModelCache, TextModelWorker, type WorkerLoadProgress } from '@rayo/web';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

/** Every progress report of the loads, for the page's test (it checks that they only grow). */
const progressLog: WorkerLoadProgress[] = [];
(globalThis as { chatProgress?: WorkerLoadProgress[] }).chatProgress = progressLog;

function megabytes(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MB`;
}

function showProgress(p: WorkerLoadProgress): void {
  progressLog.push(p);
  const bar = $<HTMLProgressElement>('load-progress');
  const status = $('load-status');
  if (p.stage === 'download') {
    status.textContent = `downloading into the cache: ${megabytes(p.bytesReceived)}`;
  } else if (p.stage === 'weights') {
    bar.max = Math.max(p.bytesTotal, 1);
    bar.value = p.bytesLoaded;
    status.textContent = `weights on the device: ${p.tensorsLoaded} of ${p.tensorsTotal} tensors, ${megabytes(p.bytesLoaded)} of ${megabytes(p.bytesTotal)}`;
  } else if (p.stage === 'compile') {
    status.textContent = `compiling the kernels of the last visit ahead: ${p.compiled} of ${p.total}`;
  } else {
    status.textContent = 'compiling the kernels (one token through the model) …';
  }
}

function showError(error: unknown): void {
  const el = $('error') ?? document.body.appendChild(document.createElement('p'));
  el.id = 'error';
  el.className = 'error';
  el.textContent = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function setChatEnabled(enabled: boolean): void {
  for (const id of ['prompt', 'send']) $<HTMLInputElement>(id).disabled = !enabled;
}

// #region browser-path
// The model lives in a worker (a bundle of `@rayo/web/worker`); the page talks to it.
const worker = new TextModelWorker(
  new Worker(new URL('./chat-worker.js', import.meta.url), { type: 'module' }),
);

async function loadModel(url: string): Promise<boolean> {
  const info = await worker.load(url, { onProgress: showProgress });
  $('load-status').textContent =
    `loaded ${info.url} on ${info.backend} (${info.weightDtype}, context ${info.maxSequence})` +
    (info.fromCache ? ', from the cache: no model request' : ', now cached') +
    (info.precompiled ? `; ${info.precompiled} kernels compiled ahead` : '');
  return info.chatTemplate;
}

async function answer(prompt: string | ChatMessage[], maxNewTokens: number, into: HTMLElement) {
  const generation = worker.generateText(prompt, { maxNewTokens });
  $('stop').onclick = () => generation.abort();
  for await (const piece of generation) into.textContent += piece;
  return generation.stats;
}
// #endregion

const history: ChatMessage[] = [];
let chatTemplate = false;

async function refreshCached(): Promise<void> {
  const cache = await ModelCache.open();
  const list = $('cached');
  list.replaceChildren();
  for (const model of await cache.list()) {
    const item = document.createElement('li');
    item.textContent = `${model.url} — ${model.files.length} files, ${megabytes(model.bytes)} `;
    const evict = document.createElement('button');
    evict.textContent = 'evict';
    evict.onclick = () => {
      cache.evict(model.url).then(refreshCached).catch(showError);
    };
    item.append(evict);
    list.append(item);
  }
  list.dataset.count = String(list.children.length);
}

$('load-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const status = $('load-status');
  status.dataset.state = 'loading';
  setChatEnabled(false);
  history.length = 0;
  $('messages').replaceChildren();
  loadModel($<HTMLInputElement>('model-url').value)
    .then(async (template) => {
      chatTemplate = template;
      status.dataset.state = 'loaded';
      setChatEnabled(true);
      await refreshCached();
    })
    .catch((error: unknown) => {
      status.dataset.state = 'error';
      showError(error);
    });
});

$('chat-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = $<HTMLInputElement>('prompt');
  const text = input.value;
  input.value = '';
  const said = document.createElement('p');
  said.className = 'user';
  said.textContent = text;
  const reply = document.createElement('p');
  reply.className = 'assistant';
  $('messages').append(said, reply);
  history.push({ role: 'user', content: text });
  setChatEnabled(false);
  $<HTMLButtonElement>('stop').disabled = false;
  $('speed').textContent = 'generating …';
  const maxNewTokens = Number($<HTMLInputElement>('max-tokens').value);
  // A model without a chat template is given the text alone.
  answer(chatTemplate ? history : text, maxNewTokens, reply)
    .then((stats) => {
      history.push({ role: 'assistant', content: reply.textContent ?? '' });
      if (stats) {
        reply.dataset.finish = stats.finishReason;
        reply.dataset.tokens = String(stats.generatedTokens);
        $('speed').textContent =
          `${stats.generatedTokens} tokens, ${stats.tokensPerSecond.toFixed(1)} tokens/s after the first ` +
          `(first token after ${stats.timeToFirstTokenMs.toFixed(0)} ms; ended: ${stats.finishReason})`;
      }
    })
    .catch(showError)
    .finally(() => {
      setChatEnabled(true);
      $<HTMLButtonElement>('stop').disabled = true;
    });
});

const given = new URLSearchParams(location.search).get('model');
if (given) $<HTMLInputElement>('model-url').value = given;
refreshCached().catch(showError);
