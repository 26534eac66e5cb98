import { rm } from 'node:fs/promises';
import { type Backend, createBackend } from '@rayo/core';
import { type ChatMessage, type GenerateTextOptions, TextModel } from '@rayo/text';
import { writeTinyTextModel } from '@rayo/text-testkit';
import { TINY_MAX_SEQUENCE } from './tinyServer.js';

/** What `TextModel.generateText` gives alone: the oracle of the server's replies. */
export interface ReferenceGeneration {
  readonly text: string;
  /** OpenAI's finish reason for it. */
  readonly finish: 'stop' | 'length';
  readonly promptTokens: number;
  readonly generatedTokens: number;
}

/** The cpu backend, a tiny model folder, and a reference copy of the model. */
export interface TinyFixture {
  readonly backend: Backend;
  readonly dir: string;
  generated(
    prompt: string | readonly ChatMessage[],
    options: GenerateTextOptions,
  ): Promise<ReferenceGeneration>;
  /** Frees the reference and the backend, and removes the folder. */
  dispose(): Promise<void>;
}

export async function tinyFixture(): Promise<TinyFixture> {
  const backend = await createBackend('cpu');
  const dir = await writeTinyTextModel();
  const reference = await TextModel.load(backend, dir, { maxSequence: TINY_MAX_SEQUENCE });
  return {
    backend,
    dir,
    async generated(prompt, options) {
      const generation = reference.generateText(prompt, options);
      for await (const _ of generation);
      const stats = generation.stats!;
      return {
        text: generation.text,
        finish: stats.finishReason === 'length' ? 'length' : 'stop',
        promptTokens: stats.promptTokens,
        generatedTokens: stats.generatedTokens,
      };
    },
    async dispose() {
      reference.dispose();
      backend.dispose();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
