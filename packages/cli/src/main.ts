import { RayoError } from '@rayo/core';
import { chatCommand } from './commands/chat.js';
import { generateCommand } from './commands/generate.js';
import { serveCommand } from './commands/serve.js';
import { type CliIo, processIo } from './io.js';
import { CHAT_USAGE, GENERATE_USAGE, MAIN_USAGE, SERVE_USAGE } from './usage.js';
import { UsageError } from './usageError.js';

const COMMANDS: Readonly<
  Record<string, { run: (args: readonly string[], io: CliIo) => Promise<number>; usage: string }>
> = {
  generate: { run: generateCommand, usage: GENERATE_USAGE },
  chat: { run: chatCommand, usage: CHAT_USAGE },
  serve: { run: serveCommand, usage: SERVE_USAGE },
};

/**
 * Runs the `rayo` command line and returns its exit status: 0 when done,
 * 1 for an error while running (the message on stderr; with `--json`, also
 * as `{ error, message }` on stdout), 2 for a command line it cannot run.
 */
export async function main(args: readonly string[], io: CliIo = processIo()): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const topic = name === 'help' ? rest[0] : undefined;
    const command = topic !== undefined ? COMMANDS[topic] : undefined;
    if (topic !== undefined && !command) {
      io.stderr.write(`rayo: no command '${topic}'\n\n${MAIN_USAGE}\n`);
      return 2;
    }
    (name === undefined ? io.stderr : io.stdout).write(`${command?.usage ?? MAIN_USAGE}\n`);
    return name === undefined ? 2 : 0;
  }
  const command = COMMANDS[name];
  if (!command) {
    io.stderr.write(`rayo: no command '${name}'\n\n${MAIN_USAGE}\n`);
    return 2;
  }
  try {
    return await command.run(rest, io);
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr.write(`rayo: ${error.message}\nRun 'rayo ${name} --help' for its flags.\n`);
      return 2;
    }
    const message = error instanceof Error ? error.message : String(error);
    if (rest.includes('--json')) {
      io.stdout.write(
        `${JSON.stringify({ error: error instanceof Error ? error.name : 'Error', message })}\n`,
      );
    }
    io.stderr.write(`rayo: ${message}\n`);
    if (!(error instanceof RayoError) && error instanceof Error && error.stack)
      io.stderr.write(`${error.stack}\n`);
    return 1;
  }
}
