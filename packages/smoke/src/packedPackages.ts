import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inject } from 'vitest';
import type { TestProject } from 'vitest/node';
import { runOk } from './commands.js';

// Every published package packed once for all of this package's test files
// (vitest's global setup of the smoke project): `pnpm pack` is the slow part
// of each, and they all test the same tarballs.

const WORKSPACE = fileURLToPath(new URL('../../../', import.meta.url));

declare module 'vitest' {
  export interface ProvidedContext {
    /** Tarball paths of the published packages, by package name (`@rayo/core`, …). */
    packedTarballs: Record<string, string>;
  }
}

/** The published (not private) workspace packages: their folder under packages/ and their name. */
export function publishedPackages(): { dir: string; name: string }[] {
  return readdirSync(join(WORKSPACE, 'packages')).flatMap((dir) => {
    const manifest = JSON.parse(readFileSync(join(WORKSPACE, 'packages', dir, 'package.json'), 'utf8')) as {
      name: string;
      private?: boolean;
    };
    return manifest.private === true ? [] : [{ dir, name: manifest.name }];
  });
}

let root: string | undefined;

/** vitest's global setup: packs the published packages and provides their tarballs to the test files. */
export async function setup(project: TestProject): Promise<void> {
  const published = publishedPackages();
  // What is packed is what `pnpm build` last built (`pnpm test` builds first).
  // Building here would rewrite dist/ under the tests of other packages.
  for (const { dir, name } of published) {
    const built = join(WORKSPACE, 'packages', dir, 'dist', 'index.js');
    if (!existsSync(built)) throw new Error(`${name} is not built (no ${built}): run \`pnpm build\` first`);
  }
  root = await mkdtemp(join(tmpdir(), 'rayo-packed-'));
  const filters = published.flatMap(({ name }) => ['--filter', name]);
  await runOk('pnpm', ['-r', ...filters, 'pack', '--pack-destination', root], { cwd: WORKSPACE });
  const files = await readdir(root);
  const tarballs = Object.fromEntries(
    published.map(({ name }) => {
      const file = files.find((f) => f.startsWith(`${name.slice(1).replace('/', '-')}-`));
      if (!file) throw new Error(`pnpm pack made no tarball of ${name} (made ${files.join(', ')})`);
      return [name, join(root!, file)];
    }),
  );
  project.provide('packedTarballs', tarballs);
}

export async function teardown(): Promise<void> {
  if (root) await rm(root, { recursive: true, force: true });
}

/** In a test file: the tarball `setup` packed of the published package `name`. */
export function packedTarball(name: string): string {
  const tarball = inject('packedTarballs')[name];
  if (!tarball) throw new Error(`${name} was not packed: it is not a published workspace package`);
  return tarball;
}
