import {
  BatchedEngine,
  type DecodeEngine,
  ModelServer,
  ModelSlotsEngine,
  type ServerLimits,
} from '@rayo/server';
import type { TextModel } from '@rayo/text';
import type { PagedLlama } from '@rayo/train';
import type { CliIo } from '../io.js';
import { openModel } from '../openModel.js';
import { integerFlag, modelOptions, parseCommand } from '../options.js';
import { SERVE_USAGE } from '../usage.js';
import { usageError } from '../usageError.js';

/** Model flags that are per request in a server, so refused on its command line. */
const PER_REQUEST = ['temperature', 'top-k', 'top-p', 'seed', 'stop', 'system'] as const;

/** The server's limits from its flags; absent flags keep the server's defaults. */
function limitsOf(
  values: Record<string, unknown>,
  slots: number,
  defaultMaxTokens: number | undefined,
): Partial<ServerLimits> {
  const flag = (name: string, least: number) => integerFlag('serve', `--${name}`, values[name], least);
  const timeout = flag('queue-timeout', 1);
  const limits: Partial<Record<keyof ServerLimits, number | undefined>> = {
    maxConcurrent: flag('max-concurrent', 1) ?? slots,
    maxQueue: flag('max-queue', 0),
    queueTimeoutMs: timeout !== undefined ? timeout * 1000 : undefined,
    maxPromptTokens: flag('max-prompt-tokens', 1),
    maxTokens: flag('max-tokens', 1),
    defaultMaxTokens,
  };
  return Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined));
}

/** Rows of a KV cache page of `--batch` unless `--page-size` says otherwise. */
const DEFAULT_PAGE_SIZE = 16;

/** How `--batch` serves: most sequences per step, and the page pool. */
interface BatchFlags {
  readonly batch: number;
  readonly pages: number | undefined;
  readonly pageSize: number;
}

function batchFlags(values: Record<string, unknown>): BatchFlags | undefined {
  const flag = (name: string, least: number) => integerFlag('serve', `--${name}`, values[name], least);
  const batch = flag('batch', 1);
  const pages = flag('kv-pages', 1);
  const pageSize = flag('page-size', 1);
  if (batch === undefined) {
    const stray = pages !== undefined ? '--kv-pages' : pageSize !== undefined ? '--page-size' : undefined;
    if (stray)
      usageError('serve', stray, 'given with --batch (it sizes the batched engine)', 'without --batch');
    return undefined;
  }
  if (batch > 256) usageError('serve', '--batch', 'at most 256 sequences', String(batch));
  if (values.slots !== undefined)
    usageError('serve', '--slots', 'absent with --batch (one copy of the model)', 'given');
  return { batch, pages, pageSize: pageSize ?? DEFAULT_PAGE_SIZE };
}

/**
 * The engine: `--batch` sequences in one step over the one model and a paged
 * KV cache (by default pages for every sequence at full length), else one
 * sequence per copy of the model.
 */
function engineOf(
  models: readonly TextModel[],
  batch: BatchFlags | undefined,
): { engine: DecodeEngine; paged: PagedLlama | undefined } {
  if (!batch) return { engine: new ModelSlotsEngine(models.map((m) => m.model)), paged: undefined };
  const model = models[0]!.model;
  const pages = batch.pages ?? Math.ceil((batch.batch * model.maxSequence) / batch.pageSize);
  const paged = model.pagedCache({ pages, pageSize: batch.pageSize, maxBatch: batch.batch });
  return { engine: new BatchedEngine(paged) as DecodeEngine, paged };
}

/**
 * `rayo serve`: an OpenAI-compatible server over `--slots` copies of the
 * model, or `--batch` sequences decoded together over one, until Ctrl+C
 * (which refuses what waits, cancels what runs, and frees the models).
 */
export async function serveCommand(args: readonly string[], io: CliIo): Promise<number> {
  const values = parseCommand('serve', args, {
    host: { type: 'string' },
    port: { type: 'string' },
    'model-name': { type: 'string' },
    slots: { type: 'string' },
    batch: { type: 'string' },
    'kv-pages': { type: 'string' },
    'page-size': { type: 'string' },
    'max-concurrent': { type: 'string' },
    'max-queue': { type: 'string' },
    'queue-timeout': { type: 'string' },
    'max-prompt-tokens': { type: 'string' },
    'max-tokens': { type: 'string' },
  });
  if (values.help) {
    io.stdout.write(`${SERVE_USAGE}\n`);
    return 0;
  }
  for (const name of PER_REQUEST) {
    if (values[name] !== undefined)
      usageError('serve', `--${name}`, 'absent: a server takes it per request (the request body)', 'given');
  }
  const options = modelOptions('serve', values);
  const host = typeof values.host === 'string' ? values.host : '127.0.0.1';
  if (host === '') usageError('serve', '--host', 'an address to listen on', '""');
  const port = integerFlag('serve', '--port', values.port, 0) ?? 8080;
  if (port > 65535) usageError('serve', '--port', 'a port in [0, 65535]', String(port));
  const batch = batchFlags(values);
  const slots = integerFlag('serve', '--slots', values.slots, 1) ?? 1;
  const limits = limitsOf(values, batch?.batch ?? slots, options.maxNewTokens);
  const modelName = values['model-name'];
  if (modelName === '') usageError('serve', '--model-name', 'a non-empty id', '""');
  const { backend, models } = await openModel(options, io, batch ? 1 : slots);
  let server: ModelServer | undefined;
  let paged: PagedLlama | undefined;
  try {
    const made = engineOf(models, batch);
    paged = made.paged;
    server = new ModelServer({
      model: models[0]!,
      engine: made.engine,
      ...(typeof modelName === 'string' ? { modelId: modelName } : {}),
      limits,
    });
    const stopped = new Promise<void>((resolve) => {
      const unsubscribe = io.onInterrupt(() => {
        unsubscribe();
        resolve();
      });
    });
    const address = await server.listen(port, host);
    const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    const how = batch
      ? `batches of up to ${batch.batch}, ${paged!.pool.pages} pages of ${batch.pageSize} rows`
      : `${slots} slot${slots === 1 ? '' : 's'}`;
    io.stderr.write(
      `rayo: serving '${server.modelId}' on ${backend.name} (${how}) at http://${shown}:${address.port}/v1\n`,
    );
    await stopped;
    io.stderr.write('rayo: stopping\n');
    return 0;
  } finally {
    await server?.close();
    paged?.dispose();
    for (const m of models) m.dispose();
    backend.dispose();
  }
}
