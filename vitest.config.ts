import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const root = dirname(fileURLToPath(import.meta.url));

/**
 * How much longer than on an idle machine tests may take: RAYO_TIMEOUT_SCALE
 * when set, else the load per core when vitest starts (at least 1, at most
 * 10). Timeouts only guard against hangs, so they grow with the load; the
 * factor is passed on to the test processes, whose own long timeouts (the
 * browser suite's, typedoc's) read it.
 */
function loadTimeoutScale(): number {
  const set = process.env.RAYO_TIMEOUT_SCALE;
  if (set !== undefined && set !== '') {
    const value = Number(set);
    if (!(value >= 1)) throw new Error(`RAYO_TIMEOUT_SCALE: expected a number ≥ 1, got '${set}'`);
    return value;
  }
  return Math.min(10, Math.max(1, Math.ceil(loadavg()[0]! / availableParallelism())));
}
const timeoutScale = loadTimeoutScale();
process.env.RAYO_TIMEOUT_SCALE = String(timeoutScale);

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
// CI's two cores instead of running alone at the end (the default order, by
// size for files without timings, would start the small conformance files
// last). Longest first, as measured on a 2-core machine: lavapipe's
// conformance suite in its two halves (one for each core while Mesa's shader
// cache is cold), the PTX interpreter, the two pages and the browser suite
// (which mostly wait on Chromium compiling shaders in SwiftShader, on more
// than one core), ptxas, the cpu reference, typedoc and the packed packages.
const LONGEST_FIRST = [
  'wgpu/src/conformance.test.ts',
  'wgpu/src/conformanceFusedAttention.test.ts',
  'cuda-ptx/src/emulated.test.ts',
  'examples/web/src/pages.test.ts',
  'wgpu/src/browser.test.ts',
  'cuda-ptx/src/kernels/fused.test.ts',
  'cuda-ptx/src/kernels/matmul.test.ts',
  'cuda-ptx/src/kernels/decoding.test.ts',
  'cuda-ptx/src/kernels/rowKernelsPtxas.test.ts',
  'workloads/src/decode/ggufCheck.test.ts',
  'cuda-ptx/src/kernels/quantized.test.ts',
  'cuda-ptx/src/kernels/quantizedGemv.test.ts',
  'smoke/src/packaging.test.ts',
  'docs/api.test.ts',
  'conformance/src/cpuBackend.test.ts',
  'workloads/src/examples/names/names.test.ts',
  'cuda-ptx/src/kernels/causalAttention.test.ts',
  'workloads/src/soak/callSoak.test.ts',
  'examples/examples.test.ts',
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
    // A worker imports the workspace's sources once for all the files it
    // runs, not once per file: the per-file imports were ~140 s of a 2-core
    // run. Test files therefore restore what they change of shared state
    // (process.env, spies) and dispose the backends they create.
    isolate: false,
    // Lavapipe, the PTX interpreter and Chromium share the CPU with everything
    // else: on a loaded machine a test takes longer by about the load per
    // core, and a timeout is not a result (see timeoutScale).
    testTimeout: 60_000 * timeoutScale,
    hookTimeout: 60_000 * timeoutScale,
    projects: [
      ...readdirSync(packagesDir).map((dir) => ({
        extends: true as const,
        test: {
          name: dir,
          root: join(packagesDir, dir),
          include: ['src/**/*.test.ts'],
          // The packaging tests share one `pnpm pack` of the published packages.
          ...(dir === 'smoke' ? { globalSetup: ['src/packedPackages.ts'] } : {}),
        },
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
