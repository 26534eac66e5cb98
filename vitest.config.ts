import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const root = dirname(fileURLToPath(import.meta.url));
const packagesDir = join(root, 'packages');

interface PackageJson {
  name: string;
  exports?: Record<string, { '@rayo/source'?: string }>;
}

// Tests import workspace packages from their sources (the "@rayo/source" export
// of each package), so `vitest` never needs a build first.
const alias = readdirSync(packagesDir).flatMap((dir) => {
  const pkg = JSON.parse(readFileSync(join(packagesDir, dir, 'package.json'), 'utf8')) as PackageJson;
  return Object.entries(pkg.exports ?? {}).flatMap(([subpath, target]) => {
    const source = target['@rayo/source'];
    if (!source) return [];
    const specifier = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
    const escaped = specifier.replace(/[/.]/g, '\\$&');
    return [{ find: new RegExp(`^${escaped}$`), replacement: resolve(packagesDir, dir, source) }];
  });
});

export default defineConfig({
  resolve: { alias },
  test: {
    // Lavapipe shares the CPU with everything else: on a loaded 2-core machine
    // a few-second test can take much longer, and a timeout is not a result.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    projects: readdirSync(packagesDir).map((dir) => ({
      extends: true as const,
      test: { name: dir, root: join(packagesDir, dir), include: ['src/**/*.test.ts'] },
    })),
  },
});
