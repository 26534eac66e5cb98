import type { Backend } from './backend.js';
import {
  type BackendPackage,
  defaultSearchDirectories,
  findBackendPackages,
  importBackendPackage,
} from './backendPackages.js';
import { BackendUnavailableError, InvalidArgumentError, RayoError } from './errors.js';

/**
 * How a backend package makes itself known: its package.json declares
 * `"rayo": { "backend": "<name>" }` and its entry exports a `backendProvider`
 * with this shape (or a program passes the provider to `registerBackend`).
 */
export interface BackendProvider {
  readonly name: string;
  /** Resolves to `undefined` when the backend can run here, or to the reason it cannot. */
  probe(): Promise<string | undefined>;
  create(options?: Readonly<Record<string, unknown>>): Promise<Backend>;
}

export interface BackendStatus {
  readonly name: string;
  readonly available: boolean;
  /** Why the backend cannot run here (when unavailable). */
  readonly reason?: string;
}

/** Backends inside @rayo/core, imported on first use. */
const BUILT_IN: Readonly<Record<string, () => Promise<BackendProvider>>> = {
  cpu: async () => (await import('./cpu/backend.js')).cpuBackendProvider,
};

/** How a backend becomes known, for errors about one that is not. */
const HOW_TO_MAKE_KNOWN =
  'install a package that declares it (`"rayo": { "backend": "<name>" }` in its package.json, ' +
  'found under node_modules/@rayo/* or node_modules/rayo-backend-*, e.g. @rayo/wgpu or @rayo/cuda-ptx), ' +
  'or call registerBackend(provider) with its backendProvider (what bundles and browsers do)';

/** Registered providers, and those loaded from built-ins and packages (by name). */
const providers = new Map<string, BackendProvider>();
const registered = new Set<string>();

/**
 * Registers (or replaces) a provider. A registered provider takes precedence
 * over a built-in and over an installed package of the same name. Bundles and
 * browsers, which cannot look for packages on disk, register theirs this way.
 */
export function registerBackend(provider: BackendProvider): void {
  if (!isProvider(provider)) {
    throw new InvalidArgumentError('a backend provider has a name, probe() and create()', {
      kernel: 'registerBackend',
      argument: 'provider',
      expected: '{ name: string, probe(), create() }',
      actual: describeValue(provider),
    });
  }
  providers.set(provider.name, provider);
  registered.add(provider.name);
}

// Looking for packages reads the disk: once per working directory.
const installedByDirectory = new Map<string, ReadonlyMap<string, BackendPackage>>();

/** Backend packages installed where Node would find them (none outside Node). */
function installedPackages(): ReadonlyMap<string, BackendPackage> {
  const directories = defaultSearchDirectories();
  const key = directories.join('\0');
  let found = installedByDirectory.get(key);
  if (!found) {
    found = new Map(findBackendPackages(directories).map((p) => [p.backend, p]));
    installedByDirectory.set(key, found);
  }
  return found;
}

/**
 * Every backend name rayo knows of, whether or not it is usable here: the
 * built-in cpu backend, registered providers, and in Node the installed
 * packages that declare a backend (see `HOW_TO_MAKE_KNOWN`).
 */
export function knownBackendNames(): string[] {
  return [...new Set([...Object.keys(BUILT_IN), ...providers.keys(), ...installedPackages().keys()])];
}

function isProvider(value: unknown): value is BackendProvider {
  const p = value as BackendProvider | undefined;
  return typeof p?.name === 'string' && typeof p.probe === 'function' && typeof p.create === 'function';
}

function describeValue(value: unknown): string {
  if (value === null || typeof value !== 'object') return String(value);
  return `an object with keys ${Object.keys(value).join(', ') || '(none)'}`;
}

async function providerOfPackage(name: string, found: BackendPackage): Promise<BackendProvider> {
  let module: unknown;
  try {
    module = await importBackendPackage(found);
  } catch (error) {
    throw new BackendUnavailableError(
      `backend '${name}' could not be loaded from ${found.packageName}: ${(error as Error).message.split('\n')[0]}`,
      { cause: error },
    );
  }
  const provider = (module as { backendProvider?: unknown }).backendProvider;
  if (!isProvider(provider)) {
    throw new BackendUnavailableError(
      `backend '${name}' is not available: ${found.packageName} declares it but exports no backendProvider`,
    );
  }
  if (provider.name !== name) {
    throw new BackendUnavailableError(`${found.packageName} declares one backend and provides another`, {
      kernel: 'createBackend',
      argument: 'name',
      expected: `a backendProvider named '${name}' (its package.json's rayo.backend)`,
      actual: `'${provider.name}'`,
    });
  }
  return provider;
}

async function loadProvider(name: string): Promise<BackendProvider> {
  const known = providers.get(name);
  if (known) return known;
  const builtIn = BUILT_IN[name];
  const installed = builtIn ? undefined : installedPackages().get(name);
  if (!builtIn && !installed) {
    throw new BackendUnavailableError(
      `unknown backend '${name}'; to make a backend known, ${HOW_TO_MAKE_KNOWN}`,
      {
        kernel: 'createBackend',
        argument: 'name',
        expected: knownBackendNames().join(' | '),
        actual: name,
      },
    );
  }
  const provider = builtIn ? await builtIn() : await providerOfPackage(name, installed!);
  // A provider registered while this one loaded takes precedence.
  if (!registered.has(name)) providers.set(name, provider);
  return providers.get(name)!;
}

/** Creates a backend by name, or throws a BackendUnavailableError that says why it cannot. */
export async function createBackend(
  name: string,
  options?: Readonly<Record<string, unknown>>,
): Promise<Backend> {
  const provider = await loadProvider(name);
  const reason = await provider.probe();
  if (reason !== undefined) {
    throw new BackendUnavailableError(`backend '${name}' cannot run on this machine: ${reason}`);
  }
  try {
    return await provider.create(options);
  } catch (error) {
    if (error instanceof RayoError) throw error;
    throw new BackendUnavailableError(`backend '${name}' failed to start: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** Which backends can run here, and why the others cannot. */
export async function probeBackends(
  names: readonly string[] = knownBackendNames(),
): Promise<BackendStatus[]> {
  return Promise.all(
    names.map(async (name): Promise<BackendStatus> => {
      try {
        const reason = await (await loadProvider(name)).probe();
        return reason === undefined ? { name, available: true } : { name, available: false, reason };
      } catch (error) {
        return { name, available: false, reason: (error as Error).message };
      }
    }),
  );
}
