import { readdirSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { run, withoutPackageManagerEnvironment } from './commands.js';
import { packedTarball } from './packedPackages.js';
import { tarballFiles } from './tarball.js';

// What each published package ships is library code: packed once for the
// smoke tests (as last built: packedPackages.ts), no test, test kit, test
// double, fixture or tool is in a tarball, and no packed module imports a package its manifest
// does not declare (vitest, a test kit). Test kits and tools live in private
// workspace packages.

const WORKSPACE = fileURLToPath(new URL('../../../', import.meta.url));
interface Manifest {
  readonly name: string;
  readonly private?: boolean;
  readonly exports?: Record<string, unknown>;
  readonly imports?: Record<string, unknown>;
  readonly bin?: Record<string, string>;
  readonly dependencies?: Record<string, string>;
  readonly peerDependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
  readonly devDependencies?: Record<string, string>;
  readonly scripts?: Record<string, string>;
}

const workspacePackages = readdirSync(join(WORKSPACE, 'packages')).map((dir) => ({
  dir,
  manifest: JSON.parse(readFileSync(join(WORKSPACE, 'packages', dir, 'package.json'), 'utf8')) as Manifest,
}));
const PUBLISHED = workspacePackages.filter((p) => p.manifest.private !== true);

/**
 * A `testing/` folder a package publishes on purpose: @rayo/core's conformance
 * suite (`@rayo/core/testing`, run by the `rayo-conformance` bin), which
 * backend authors run against their backends.
 */
const PUBLIC_TESTING_ENTRIES: Readonly<Record<string, { readonly subpath: string; readonly dir: string }>> = {
  '@rayo/core': { subpath: './testing', dir: 'dist/testing/' },
};

/** Why a packed path is not library code, or undefined when it may be. */
function notLibraryCode(name: string, path: string): string | undefined {
  const segments = path.split('/');
  const file = segments.at(-1)!;
  if (/\.(test|spec)\./.test(file)) return 'a test';
  if (/\.testkit\./.test(file)) return 'a test kit';
  if (/fake|mock|stub|emulated|interpreter/i.test(file)) return 'a test double';
  if (segments.includes('tools')) return 'a tool';
  const fixtures = segments.find((s) => ['__tests__', 'test', 'tests', 'testdata', 'fixtures'].includes(s));
  if (fixtures) return `in a ${fixtures}/ folder`;
  const published = PUBLIC_TESTING_ENTRIES[name];
  if (segments.includes('testing') && !(published && path.startsWith(published.dir))) return 'a test helper';
  return undefined;
}

/** The files an `exports` or `imports` map points at, outside the workspace's source condition. */
function entryFiles(map: unknown): string[] {
  if (typeof map === 'string') return [map];
  if (map === null || typeof map !== 'object') return [];
  return Object.entries(map).flatMap(([key, value]) => (key === '@rayo/source' ? [] : entryFiles(value)));
}

/** The bare package names a compiled module or declaration file imports. */
function importedPackages(code: string): string[] {
  const specifiers = [
    // Statements at the start of a line, as tsc writes them (not text inside a string).
    ...code.matchAll(/^(?:import|export)\b[^;]*?\bfrom\s*['"]([^'"]+)['"]/gms),
    ...code.matchAll(/^import\s*['"]([^'"]+)['"]/gm),
    ...code.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
    ...code.matchAll(/\brequire\(\s*['"]([^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return specifiers
    .filter((s) => !/^(\.|\/|#|node:)/.test(s) && !builtinModules.includes(s))
    .map((s) =>
      s
        .split('/')
        .slice(0, s.startsWith('@') ? 2 : 1)
        .join('/'),
    );
}

let packed: Map<string, Map<string, Buffer>>;

beforeAll(async () => {
  // Packed once for the smoke tests (packedPackages.ts), as last built.
  packed = new Map();
  for (const { manifest } of PUBLISHED) {
    const files = tarballFiles(await readFile(packedTarball(manifest.name)));
    // Every path in a tarball of `pnpm pack` starts with package/.
    packed.set(
      manifest.name,
      new Map([...files].map(([path, body]) => [path.replace(/^package\//, ''), body])),
    );
  }
});

describe.each(PUBLISHED.map((p) => [p.manifest.name] as const))('the tarball of %s', (name) => {
  const files = () => packed.get(name)!;
  const manifest = () => JSON.parse(files().get('package.json')!.toString('utf8')) as Manifest;

  it('holds its entry points, bins and LICENSE', () => {
    const { exports, imports, bin } = manifest();
    const entries = [...entryFiles(exports), ...entryFiles(imports), ...Object.values(bin ?? {})].map((f) =>
      f.replace(/^\.\//, ''),
    );
    expect(entries.length, `${name} declares no entry point`).toBeGreaterThan(0);
    expect(entries.filter((f) => !files().has(f))).toEqual([]);
    expect([...files().keys()]).toContain('LICENSE');
  });

  it('holds no test, test kit, test double, fixture or tool', () => {
    const published = PUBLIC_TESTING_ENTRIES[name];
    if (published)
      expect(entryFiles(manifest().exports?.[published.subpath])).toContain(`./${published.dir}index.js`);
    const offenders = [...files().keys()].flatMap((path) => {
      const why = notLibraryCode(name, path);
      return why ? [`${path} (${why})`] : [];
    });
    // tsc leaves the outputs of deleted sources in dist/: a stale build shows here too.
    expect(offenders, `${name} packs these (delete its dist/ and build again if they are stale)`).toEqual([]);
  });

  it('declares no workspace: range (pnpm pack rewrote them, as pnpm publish does)', () => {
    const fields = ['dependencies', 'peerDependencies', 'optionalDependencies', 'devDependencies'] as const;
    const ranges = fields.flatMap((field) =>
      Object.entries(manifest()[field] ?? {})
        .filter(([, range]) => range.startsWith('workspace:'))
        .map(([dependency, range]) => `${field}.${dependency}: ${range}`),
    );
    expect(ranges).toEqual([]);
  });

  it('refuses to be packed by npm, which would keep its workspace: ranges', async () => {
    const { dir, manifest: source } = PUBLISHED.find((p) => p.manifest.name === name)!;
    expect(source.scripts?.prepack).toBe('node ../../scripts/refuse-workspace-ranges.mjs');
    const result = await run('npm', ['pack', '--dry-run', '--ignore-scripts=false'], {
      cwd: join(WORKSPACE, 'packages', dir),
      env: withoutPackageManagerEnvironment(),
    });
    if (!JSON.stringify(source).includes('"workspace:')) return;
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(
      /refusing to pack with npm\/.*only pnpm rewrites.*`pnpm pack`.*`pnpm publish`/,
    );
  });

  it('imports no package its manifest does not declare', () => {
    const { dependencies, peerDependencies, optionalDependencies } = manifest();
    const declared = new Set([
      name,
      ...Object.keys({ ...dependencies, ...peerDependencies, ...optionalDependencies }),
    ]);
    const undeclared = [...files()]
      .filter(([path]) => /\.(js|mjs|d\.ts)$/.test(path))
      .flatMap(([path, body]) =>
        importedPackages(body.toString('utf8'))
          .filter((pkg) => !declared.has(pkg))
          .map((pkg) => `${path} imports ${pkg}`),
      );
    expect(undeclared).toEqual([]);
  });
});

/** Every file under `dir`, as a path relative to it with `/` separators. */
function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(join(dir, prefix), { withFileTypes: true }).flatMap((entry) => {
    const path = `${prefix}${entry.name}`;
    return entry.isDirectory() ? filesUnder(dir, `${path}/`) : [path];
  });
}

describe.each(PUBLISHED.map((p) => [p.manifest.name, p.dir] as const))('the sources of %s', (name, dir) => {
  // Tests may sit beside the code they test (the build leaves them out), but
  // test kits, doubles and tools belong in the private packages: the build
  // would ship them.
  it('hold no test kit, test double, fixture or tool', () => {
    const offenders = filesUnder(join(WORKSPACE, 'packages', dir, 'src')).flatMap((path) => {
      if (/\.(test|spec)\./.test(path)) return [];
      // Judged as the build's output of the file would be.
      const why = notLibraryCode(name, `dist/${path}`);
      return why ? [`src/${path} (${why})`] : [];
    });
    expect(offenders).toEqual([]);
  });
});

describe('the workspace packages of test kits and tools', () => {
  it('are private, so that no registry ever gets them', () => {
    const kits = workspacePackages.filter(({ dir }) => /-(testkit|tools)$/.test(dir));
    expect(kits.map(({ dir }) => dir)).toEqual(
      expect.arrayContaining(['core-testkit', 'cuda-testkit', 'cuda-tools', 'text-testkit', 'train-testkit']),
    );
    expect(
      kits.filter(({ manifest }) => manifest.private !== true).map(({ manifest }) => manifest.name),
    ).toEqual([]);
  });
});
