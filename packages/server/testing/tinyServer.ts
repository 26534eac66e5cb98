import type { Backend } from '@rayo/core';
import { TextModel } from '@rayo/text';
import OpenAI from 'openai';
import type { DecodeEngine } from '../src/engine/decodeEngine.js';
import { ModelSlotsEngine, type SlotSequence } from '../src/engine/modelSlotsEngine.js';
import { ModelServer } from '../src/http/modelServer.js';
import type { ServerLimits } from '../src/http/serverLimits.js';
import { GatedEngine } from './gatedEngine.js';

/** The cache rows of the tests' models: room for every prompt and reply they ask. */
export const TINY_MAX_SEQUENCE = 160;

export interface TinyServer {
  readonly server: ModelServer;
  readonly engine: GatedEngine<SlotSequence>;
  readonly client: OpenAI;
  readonly url: string;
  readonly models: readonly TextModel[];
  /** A streamed text completion of `prompt` from the served model. */
  stream(prompt: string, maxTokens: number): ReturnType<typeof streamed>;
  /** Closes the server and frees the models. */
  close(): Promise<void>;
}

function streamed(client: OpenAI, prompt: string, maxTokens: number) {
  return client.completions.create({ model: 'tiny', prompt, max_tokens: maxTokens, stream: true });
}

/** A server on 127.0.0.1 (a free port) over `slots` copies of the model in `dir`, its steps gated. */
export async function startTinyServer(
  backend: Backend,
  dir: string,
  slots: number,
  limits: Partial<ServerLimits> = {},
): Promise<TinyServer> {
  const models: TextModel[] = [];
  for (let i = 0; i < slots; i++)
    models.push(await TextModel.load(backend, dir, { maxSequence: TINY_MAX_SEQUENCE }));
  const engine = new GatedEngine(new ModelSlotsEngine(models.map((m) => m.model)));
  const server = new ModelServer({
    model: models[0]!,
    engine: engine as DecodeEngine,
    modelId: 'tiny',
    limits,
  });
  const address = await server.listen(0, '127.0.0.1');
  const url = `http://127.0.0.1:${address.port}`;
  // No retries: a 429 or 503 is what some tests look for.
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  return {
    server,
    engine,
    client,
    url,
    models,
    stream: (prompt, maxTokens) => streamed(client, prompt, maxTokens),
    async close() {
      engine.allow();
      await server.close();
      for (const m of models) m.dispose();
    },
  };
}
