import { ModelServer, ModelSlotsEngine, type ServerLimits } from '@rayo/server';
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

/**
 * `rayo serve`: an OpenAI-compatible server over `--slots` copies of the
 * model, until Ctrl+C (which refuses what waits, cancels what runs, and
 * frees the models).
 */
export async function serveCommand(args: readonly string[], io: CliIo): Promise<number> {
  const values = parseCommand('serve', args, {
    host: { type: 'string' },
    port: { type: 'string' },
    'model-name': { type: 'string' },
    slots: { type: 'string' },
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
  const slots = integerFlag('serve', '--slots', values.slots, 1) ?? 1;
  const limits = limitsOf(values, slots, options.maxNewTokens);
  const modelName = values['model-name'];
  if (modelName === '') usageError('serve', '--model-name', 'a non-empty id', '""');
  const { backend, models } = await openModel(options, io, slots);
  let server: ModelServer | undefined;
  try {
    server = new ModelServer({
      model: models[0]!,
      engine: new ModelSlotsEngine(models.map((m) => m.model)),
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
    io.stderr.write(
      `rayo: serving '${server.modelId}' on ${backend.name} (${slots} slot${slots === 1 ? '' : 's'}) at http://${shown}:${address.port}/v1\n`,
    );
    await stopped;
    io.stderr.write('rayo: stopping\n');
    return 0;
  } finally {
    await server?.close();
    for (const m of models) m.dispose();
    backend.dispose();
  }
}
