/**
 * Backend packages found on disk (Node only; `./backendPackages.browser.js`
 * stands in for this file elsewhere, chosen by the `#backendPackages` import
 * of core's package.json). A package declares the backend
 * it provides in its package.json, and exports a `backendProvider`:
 *
 *     { "name": "@rayo/wgpu", "rayo": { "backend": "wgpu" } }
 *
 * Packages are looked for under `node_modules/@rayo/*` and
 * `node_modules/rayo-backend-*` of a directory and each of its parents, as
 * Node resolves packages.
 */
export interface BackendPackage {
  /** The backend's registry name, from `rayo.backend`. */
  readonly backend: string;
  readonly packageName: string;
  /** The directory whose `node_modules` holds the package: the package resolves from here. */
  readonly resolveFrom: string;
}

type Fs = typeof import('node:fs');
type Path = typeof import('node:path');

interface NodeBuiltins {
  readonly fs: Fs;
  readonly path: Path;
  readonly url: typeof import('node:url');
  readonly module: typeof import('node:module');
}

/**
 * Node's built-in modules, loaded synchronously without a static import (core
 * also loads in browsers, where this is undefined).
 */
function nodeBuiltins(): NodeBuiltins | undefined {
  const proc = (globalThis as { process?: NodeJS.Process }).process;
  if (typeof proc?.getBuiltinModule !== 'function') return undefined;
  const load = (id: string) => proc.getBuiltinModule(id);
  return {
    fs: load('node:fs') as Fs,
    path: load('node:path') as Path,
    url: load('node:url') as NodeBuiltins['url'],
    module: load('node:module') as NodeBuiltins['module'],
  };
}

/** Whether backend packages are looked for on disk here (in Node, yes). */
export const PACKAGES_ON_DISK = nodeBuiltins() !== undefined;

/** What a package.json says about a backend, or undefined when it declares none. */
function declaredBackend(fs: Fs, packageJson: string): { name: string; backend: string } | undefined {
  let parsed: { name?: unknown; rayo?: { backend?: unknown } };
  try {
    parsed = JSON.parse(fs.readFileSync(packageJson, 'utf8'));
  } catch {
    // Not a package (or not readable): nothing is declared.
    return undefined;
  }
  const backend = parsed.rayo?.backend;
  if (typeof parsed.name !== 'string' || typeof backend !== 'string' || backend === '') return undefined;
  return { name: parsed.name, backend };
}

/** Package directories under one `node_modules` that may declare a backend. */
function candidates(fs: Fs, path: Path, nodeModulesDir: string): string[] {
  const list = (dir: string) => {
    try {
      return fs.readdirSync(dir);
    } catch {
      return [];
    }
  };
  return [
    ...list(path.join(nodeModulesDir, '@rayo')).map((name) => path.join(nodeModulesDir, '@rayo', name)),
    ...list(nodeModulesDir)
      .filter((name) => name.startsWith('rayo-backend-'))
      .map((name) => path.join(nodeModulesDir, name)),
  ];
}

/**
 * Backend packages visible from each of `startDirectories` (walking up to
 * the file system's root), in order: for a backend name found twice, the
 * first wins. Empty outside Node.
 */
export function findBackendPackages(startDirectories: readonly string[]): BackendPackage[] {
  const node = nodeBuiltins();
  if (!node) return [];
  const { fs, path } = node;
  const found = new Map<string, BackendPackage>();
  for (const start of startDirectories) {
    for (let dir = path.resolve(start); ; dir = path.dirname(dir)) {
      for (const candidate of candidates(fs, path, path.join(dir, 'node_modules'))) {
        const declared = declaredBackend(fs, path.join(candidate, 'package.json'));
        if (declared && !found.has(declared.backend)) {
          found.set(declared.backend, {
            backend: declared.backend,
            packageName: declared.name,
            resolveFrom: dir,
          });
        }
      }
      if (path.dirname(dir) === dir) break;
    }
  }
  return [...found.values()];
}

/** The directory of this file (core's `dist` or `src`), when it was loaded from disk. */
function moduleDirectory(node: NodeBuiltins): string | undefined {
  return import.meta.url.startsWith('file:')
    ? node.path.dirname(node.url.fileURLToPath(import.meta.url))
    : undefined;
}

/** The caller's project (the working directory) first, then where @rayo/core is installed. */
export function defaultSearchDirectories(): string[] {
  const node = nodeBuiltins();
  if (!node) return [];
  const core = moduleDirectory(node);
  return [process.cwd(), ...(core ? [core] : [])];
}

/** The package directory of this copy of @rayo/core, when it was loaded from disk. */
export function coreDirectory(): string | undefined {
  const node = nodeBuiltins();
  const dir = node && moduleDirectory(node);
  return dir && node.path.dirname(dir);
}

/**
 * Imports a found package's entry, resolved as Node resolves it from the
 * directory it was found under.
 */
export function importBackendPackage(found: BackendPackage): Promise<unknown> {
  const node = nodeBuiltins();
  if (!node) return Promise.reject(new Error('backend packages are imported from disk only in Node'));
  const entry = node.module
    .createRequire(node.path.join(found.resolveFrom, 'package.json'))
    .resolve(found.packageName);
  return import(/* @vite-ignore */ node.url.pathToFileURL(entry).href);
}
