import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

// The API reference of `pnpm run docs` (typedoc.json): converted without writing
// HTML, its warnings (a broken link, a comment TSDoc cannot read, an entry
// point that is gone) treated as errors.
const run = promisify(execFile);
// vitest.config.ts sets it from the machine's load.
const timeoutScale = Number(process.env.RAYO_TIMEOUT_SCALE) || 1;
const root = dirname(import.meta.dirname);
const typedoc = join(
  dirname(createRequire(import.meta.url).resolve('typedoc/package.json')),
  'bin',
  'typedoc',
);

it(
  'builds the API reference from the TSDoc comments without a warning',
  async () => {
    const result = await run(process.execPath, [typedoc, '--emit', 'none', '--logLevel', 'Warn'], {
      cwd: root,
    }).then(
      ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
      (error: { code?: number; stdout?: string; stderr?: string }) => ({
        code: error.code ?? 1,
        output: `${error.stdout ?? ''}${error.stderr ?? ''}`,
      }),
    );
    expect(result.output).toBe('');
    expect(result.code).toBe(0);
  },
  300_000 * timeoutScale,
);
