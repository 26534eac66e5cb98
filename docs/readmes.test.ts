import { execFile } from 'node:child_process';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

// The code of the READMEs: every ```js block parses as plain JavaScript on
// this Node (no `using`, no types, no non-null `!`), and every ```js run
// block runs, against the packages' builds as a user's program would.
const run = promisify(execFile);
const root = dirname(import.meta.dirname);
// Under the root's node_modules, so that the blocks' imports resolve as the root's.
const scratch = join(root, 'node_modules', '.cache', 'rayo-readmes');

interface Block {
  readonly readme: string;
  readonly line: number;
  readonly run: boolean;
  readonly code: string;
}

async function readmes(): Promise<string[]> {
  const packages = await readdir(join(root, 'packages'));
  const examples = await readdir(join(root, 'examples'), { withFileTypes: true });
  return [
    join(root, 'README.md'),
    ...packages.map((p) => join(root, 'packages', p, 'README.md')),
    ...examples.filter((e) => e.isDirectory()).map((e) => join(root, 'examples', e.name, 'README.md')),
    join(root, 'examples', 'README.md'),
  ];
}

async function blocks(): Promise<Block[]> {
  const found: Block[] = [];
  for (const path of await readmes()) {
    const text = await readFile(path, 'utf8').catch(() => undefined);
    if (text === undefined) continue;
    for (const match of text.matchAll(/^( *)```js( run)?\n([\s\S]*?)^\1```/gm)) {
      const indent = match[1]!.length;
      found.push({
        readme: relative(root, path),
        line: text.slice(0, match.index).split('\n').length,
        run: match[2] !== undefined,
        code: match[3]!.replace(new RegExp(`^ {0,${indent}}`, 'gm'), ''),
      });
    }
  }
  return found;
}

const all = await blocks();
afterAll(() => rm(scratch, { recursive: true, force: true }));

describe('the READMEs', () => {
  it('have JavaScript examples', () => {
    expect(all.filter((b) => b.run).length).toBeGreaterThanOrEqual(4);
  });

  it.each(all.map((b) => [`${b.readme}:${b.line}`, b] as const))(
    '%s is plain JavaScript (and runs, where marked)',
    async (name, block) => {
      await mkdir(scratch, { recursive: true });
      const file = join(scratch, `${name.replace(/[^\w]+/g, '-')}.mjs`);
      await writeFile(file, block.code);
      const check = await run(process.execPath, ['--check', file]).then(
        () => '',
        (error: { stderr?: string }) => error.stderr ?? 'failed',
      );
      expect(check, `${name} does not parse as JavaScript`).toBe('');
      if (block.run) await run(process.execPath, [file], { cwd: root });
    },
    120_000,
  );
});
