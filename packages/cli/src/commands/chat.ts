import { createInterface } from 'node:readline';
import { InvalidArgumentError, RayoError } from '@rayo/core';
import type { ChatMessage } from '@rayo/text';
import type { CliIo } from '../io.js';
import { openModel } from '../openModel.js';
import { modelOptions, parseCommand } from '../options.js';
import { formatStats, notAppliedNotices } from '../stats.js';
import { CHAT_USAGE } from '../usage.js';
import { generationOptions } from './generate.js';

/** `rayo chat`: a conversation on stdin/stdout, rendered by the model's chat template. */
export async function chatCommand(args: readonly string[], io: CliIo): Promise<number> {
  const values = parseCommand('chat', args, {});
  if (values.help) {
    io.stdout.write(`${CHAT_USAGE}\n`);
    return 0;
  }
  const options = modelOptions('chat', values);
  const { backend, model } = await openModel(options, io);
  try {
    if (!model.tokenizer.hasChatTemplate()) {
      throw new InvalidArgumentError(`${model.path} has no chat template, so it cannot chat`, {
        operation: 'rayo chat',
        argument: '--model',
        expected:
          "a model with a chat_template (tokenizer_config.json, chat_template.jinja or GGUF 'tokenizer.chat_template')",
        actual: `none; continue a plain prompt with: rayo generate --model ${options.model} --prompt TEXT`,
      });
    }
    if (!options.quiet)
      for (const notice of notAppliedNotices(model.generationDefaults.notApplied))
        io.stderr.write(`${notice}\n`);
    const system: ChatMessage[] =
      options.system !== undefined ? [{ role: 'system', content: options.system }] : [];
    let messages: ChatMessage[] = [...system];
    let replies = 0;
    const interactive = (io.stdin as { isTTY?: boolean }).isTTY === true;
    const rl = createInterface({ input: io.stdin, output: io.stdout, terminal: interactive });
    if (interactive)
      io.stderr.write('Type a message; /reset starts over, /exit leaves, Ctrl+C stops a reply.\n');
    let controller: AbortController | undefined;
    const interrupt = () => {
      if (controller) controller.abort();
      else rl.close();
    };
    rl.on('SIGINT', interrupt);
    const unsubscribe = io.onInterrupt(interrupt);
    // The iterator exists before the first prompt, so that a close (Ctrl+C at the prompt) ends it.
    const lines = rl[Symbol.asyncIterator]();
    const prompt = () => {
      if (interactive) rl.prompt();
    };
    try {
      prompt();
      for (let next = await lines.next(); !next.done; next = await lines.next()) {
        const raw = next.value;
        const line = raw.trim();
        if (line === '/exit') break;
        if (line === '/reset') {
          messages = [...system];
          io.stderr.write('(conversation cleared)\n');
          prompt();
          continue;
        }
        if (line === '') {
          prompt();
          continue;
        }
        const turn: ChatMessage[] = [...messages, { role: 'user', content: line }];
        // Each reply samples with the next seed, so that a sampled reply is not the last one again.
        const seed = (options.seed ?? 0) + replies++;
        controller = new AbortController();
        try {
          const generation = model.generateText(turn, {
            ...generationOptions(options),
            seed,
            signal: controller.signal,
          });
          try {
            for await (const delta of generation) io.stdout.write(delta);
          } catch (error) {
            if ((error as Error)?.name !== 'AbortError') throw error;
            io.stdout.write(' …');
          }
          io.stdout.write('\n');
          messages = [...turn, { role: 'assistant', content: generation.text }];
          if (!options.quiet && generation.stats) io.stderr.write(`${formatStats(generation.stats)}\n`);
        } catch (error) {
          // The turn is dropped (a conversation longer than the cache, say); the chat goes on.
          if (!(error instanceof RayoError)) throw error;
          io.stderr.write(`rayo: ${error.message}\n`);
          if (/does not fit/.test(error.message))
            io.stderr.write('(type /reset to start a new conversation)\n');
        } finally {
          controller = undefined;
        }
        prompt();
      }
    } finally {
      unsubscribe();
      rl.close();
    }
    return 0;
  } finally {
    model.dispose();
    backend.dispose();
  }
}
