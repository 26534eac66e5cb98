import type { ChatMessage, GenerateTextOptions } from '@rayo/text';
import type { CliIo } from '../io.js';
import { openModel } from '../openModel.js';
import { type ModelOptions, modelOptions, parseCommand } from '../options.js';
import { formatStats, notAppliedNotices } from '../stats.js';
import { GENERATE_USAGE } from '../usage.js';
import { usageError } from '../usageError.js';

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  let text = '';
  for await (const chunk of stream)
    text += typeof chunk === 'string' ? chunk : new TextDecoder().decode(chunk as Uint8Array);
  return text;
}

/** The sampling flags as `generateText` options. */
export function generationOptions(options: ModelOptions): GenerateTextOptions {
  return {
    ...(options.maxNewTokens !== undefined ? { maxNewTokens: options.maxNewTokens } : {}),
    ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
    ...(options.topK !== undefined ? { topK: options.topK } : {}),
    ...(options.topP !== undefined ? { topP: options.topP } : {}),
    ...(options.seed !== undefined ? { seed: options.seed } : {}),
    ...(options.stop.length > 0 ? { stop: options.stop } : {}),
  };
}

/** `rayo generate`: continues a prompt, streaming the text to stdout (or one JSON object with --json). */
export async function generateCommand(args: readonly string[], io: CliIo): Promise<number> {
  const values = parseCommand('generate', args, {
    prompt: { type: 'string', short: 'p' },
    chat: { type: 'boolean' },
    json: { type: 'boolean' },
  });
  if (values.help) {
    io.stdout.write(`${GENERATE_USAGE}\n`);
    return 0;
  }
  const options = modelOptions('generate', values);
  if (typeof values.prompt !== 'string')
    usageError('generate', '--prompt', "the prompt's text, or '-' for stdin", 'nothing');
  if (options.system !== undefined && !values.chat)
    usageError('generate', '--system', 'given with --chat', 'without --chat');
  const text = values.prompt === '-' ? await readAll(io.stdin) : values.prompt;
  const json = values.json === true;
  const { backend, model } = await openModel(options, io);
  try {
    if (!options.quiet)
      for (const notice of notAppliedNotices(model.generationDefaults.notApplied))
        io.stderr.write(`${notice}\n`);
    const prompt: string | ChatMessage[] = values.chat
      ? [
          ...(options.system !== undefined ? [{ role: 'system', content: options.system }] : []),
          { role: 'user', content: text },
        ]
      : text;
    const generation = model.generateText(prompt, generationOptions(options));
    for await (const delta of generation) if (!json) io.stdout.write(delta);
    const stats = generation.stats!;
    if (json) {
      io.stdout.write(
        `${JSON.stringify({
          model: options.model,
          backend: backend.name,
          device: backend.info.device,
          prompt: text,
          text: generation.text,
          ...stats,
        })}\n`,
      );
    } else {
      io.stdout.write('\n');
      if (!options.quiet) io.stderr.write(`${formatStats(stats)}\n`);
    }
    return 0;
  } finally {
    model.dispose();
    backend.dispose();
  }
}
