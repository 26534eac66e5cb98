import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

// The API reference of `pnpm run docs` (typedoc.json): converted without writing
// HTML, its warnings (a broken link, a comment TSDoc cannot read, an entry
// point that is gone) treated as errors.
const run = promisify(execFile);
const root = dirname(import.meta.dirname);
// Its CLI module itself: the `typedoc` bin only forks a second Node process to run it.
const typedoc = join(
  dirname(createRequire(import.meta.url).resolve('typedoc/package.json')),
  'dist',
  'cli.js',
);
// vitest.config.ts sets it from the machine's load.
const timeoutScale = Number(process.env.RAYO_TIMEOUT_SCALE) || 1;

it(
  'builds the API reference from the TSDoc comments without a warning',
  async () => {
    // typedoc.json as it is, less TypeScript's type check of each package's
    // program: the typecheck task of `pnpm test` checks the same files, and here
    // it was three quarters of typedoc's time. Links and comments are still read.
    // Each program holds the package's library files only (tsconfig.build.json
    // leaves its tests out, which document nothing), with the packages it
    // imports still read from their sources, as tsconfig.json reads them.
    const dir = await mkdtemp(join(tmpdir(), 'rayo-typedoc-'));
    const options = join(dir, 'typedoc.json');
    await writeFile(
      options,
      JSON.stringify({
        extends: [join(root, 'typedoc.json')],
        packageOptions: {
          skipErrorChecking: true,
          tsconfig: 'tsconfig.build.json',
          compilerOptions: { customConditions: ['@rayo/source'] },
        },
      }),
    );
    try {
      const result = await run(
        process.execPath,
        // A larger young generation: typedoc's ten programs spent a sixth of their time collecting garbage.
        ['--max-semi-space-size=64', typedoc, '--options', options, '--emit', 'none', '--logLevel', 'Warn'],
        {
          cwd: root,
        },
      ).then(
        ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
        (error: { code?: number; stdout?: string; stderr?: string }) => ({
          code: error.code ?? 1,
          output: `${error.stdout ?? ''}${error.stderr ?? ''}`,
        }),
      );
      expect(result.output).toBe('');
      expect(result.code).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
  300_000 * timeoutScale,
);
