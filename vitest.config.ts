import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const root = dirname(fileURLToPath(import.meta.url));
const packagesDir = join(root, 'packages');
const examplesDir = join(root, 'examples');

interface PackageJson {
  name: string;
  exports?: Record<string, { '@rayo/source'?: string }>;
  imports?: Record<string, { node?: { '@rayo/source'?: string } }>;
}

const manifests = readdirSync(packagesDir).map((dir) => ({
  dir,
  pkg: JSON.parse(readFileSync(join(packagesDir, dir, 'package.json'), 'utf8')) as PackageJson,
}));

// Tests import workspace packages from their sources (the "@rayo/source" export
// of each package), so `vitest` never needs a build first.
const alias = manifests.flatMap(({ dir, pkg }) => {
  return Object.entries(pkg.exports ?? {}).flatMap(([subpath, target]) => {
    const source = target['@rayo/source'];
    if (!source) return [];
    const specifier = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
    const escaped = specifier.replace(/[/.]/g, '\\$&');
    return [{ find: new RegExp(`^${escaped}$`), replacement: resolve(packagesDir, dir, source) }];
  });
});
// A package's own `#name` imports pick a file by the `node` or `browser`
// condition; tests run in Node, so they get the Node one, from its source.
// (`#` names are unique across the workspace.)
for (const { dir, pkg } of manifests) {
  for (const [name, target] of Object.entries(pkg.imports ?? {})) {
    const source = target.node?.['@rayo/source'];
    if (source) alias.push({ find: new RegExp(`^${name}$`), replacement: resolve(packagesDir, dir, source) });
  }
}

// The longest files start first, so that they overlap the many short ones on
// CI's two cores instead of running alone at the end: the browser suite is a
// small file that spends minutes compiling shaders in SwiftShader, which the
// default order (by size, for files without timings) would leave for last.
const LONGEST_FIRST = [
  'wgpu/src/browser.test.ts',
  'cuda-ptx/src/emulated.test.ts',
  'examples/web/src/page.test.ts',
  'docs/api.test.ts',
];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = LONGEST_FIRST.findIndex((tail) => f.moduleId.endsWith(tail));
      return i === -1 ? LONGEST_FIRST.length : i;
    };
    return sorted
      .map((f, i) => ({ f, i }))
      .sort((x, y) => rank(x.f) - rank(y.f) || x.i - y.i)
      .map(({ f }) => f);
  }
}

export default defineConfig({
  resolve: { alias },
  test: {
    sequence: { sequencer: LongestFirst },
    // At least two workers: vitest's default (one less than the cores) is a
    // single worker on CI's 2 cores, which ran every file one after another
    // while the longest ones mostly waited on Chromium, typedoc or pnpm.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // Lavapipe shares the CPU with everything else: on a loaded 2-core machine
    // a few-second test can take much longer, and a timeout is not a result.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    projects: [
      ...readdirSync(packagesDir).map((dir) => ({
        extends: true as const,
        test: { name: dir, root: join(packagesDir, dir), include: ['src/**/*.test.ts'] },
      })),
      // The API reference, built as `pnpm run docs` builds it (docs/api.test.ts).
      { extends: true as const, test: { name: 'docs', root: join(root, 'docs'), include: ['*.test.ts'] } },
      // The examples run as a user runs them: from the packages' builds.
      {
        extends: true as const,
        test: {
          name: 'examples',
          root: examplesDir,
          include: ['**/*.test.ts'],
          exclude: ['**/node_modules/**'],
        },
      },
    ],
  },
});
