import {
  type BackendPackage,
  defaultSearchDirectories,
  findBackendPackages,
  importBackendPackage,
  PACKAGES_ON_DISK,
} from '#backendPackages';
import type { Backend } from './backend.js';
import { type BackendOptionsOf, checkBackendOptions } from './backendOptions.js';
import type { BackendProvider } from './backendProvider.js';
import type { SlowCompileHandler } from './compileProgress.js';
import { type CoreCopy, duplicateCoreError, realmShared, THIS_CORE } from './coreCopies.js';
import { BackendUnavailableError, InvalidArgumentError, RayoError } from './errors.js';
import type { EnvironmentVariables } from './tuningOptions.js';

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

/** The packages of the backends that rayo itself publishes, for errors about a missing one. */
const PUBLISHED: Readonly<Record<string, string>> = { wgpu: '@rayo/wgpu', cuda: '@rayo/cuda-ptx' };

/** How a backend becomes known, for errors about one that is not. */
function howToMakeKnown(name: string): string {
  const published = PUBLISHED[name];
  if (!PACKAGES_ON_DISK) {
    // A bundle or a browser: nothing is found on disk, a package registers itself when imported.
    return published
      ? `'${name}' is provided by ${published}: add it to the project and import '${published}' once ` +
          '(e.g. in the entry module) so it registers'
      : "import the backend's package once so it registers, or call registerBackend(provider)";
  }
  const generic =
    'install a package that declares it (`"rayo": { "backend": "<name>" }` in its package.json, ' +
    'found under node_modules/@rayo/* or node_modules/rayo-backend-*, e.g. @rayo/wgpu or @rayo/cuda-ptx), ' +
    'import its package once so it registers (what bundles do), or call registerBackend(provider)';
  return published
    ? `'${name}' is provided by ${published}: install it (npm install ${published}); to make a backend known, ${generic}`
    : `to make a backend known, ${generic}`;
}

interface Registration {
  readonly provider: BackendProvider;
  /** The copy of core whose `registerBackend` took it: the one its backend is built on. */
  readonly core: CoreCopy;
  /** Registered by a program (replaces) rather than by a package on import (keeps what is there). */
  readonly replaces: boolean;
}

/**
 * Registered providers, by name, shared by every copy of core in this realm
 * (through a global symbol): a backend registered with one copy and asked for
 * through another is a DuplicateCoreError that names both, not "unknown".
 */
const registrations = realmShared('@rayo/core/backends@1', () => new Map<string, Registration>());

/** Providers of built-in backends, once loaded (this copy's own). */
const builtIns = new Map<string, BackendProvider>();

export interface RegisterOptions {
  /**
   * Whether the provider replaces one already known by its name (default
   * true). A package that registers itself on import passes false, so that a
   * program's own registration or the built-in backend of that name wins.
   */
  readonly replace?: boolean;
}

/**
 * Registers a provider. By default it replaces one of the same name and takes
 * precedence over a built-in backend and over an installed package. Backend
 * packages call this when imported, which is how bundles and browsers (which
 * cannot look for packages on disk) know them.
 */
export function registerBackend(provider: BackendProvider, options: RegisterOptions = {}): void {
  if (!isProvider(provider)) {
    throw new InvalidArgumentError('a backend provider has a name, probe() and create()', {
      operation: 'registerBackend',
      argument: 'provider',
      expected: '{ name: string, probe(), create() }',
      actual: describeValue(provider),
    });
  }
  const replaces = options.replace !== false;
  if (!replaces && (registrations.has(provider.name) || provider.name in BUILT_IN)) return;
  registrations.set(provider.name, { provider, core: THIS_CORE, replaces });
}

/** A registration's provider, when its backend is built on this copy of core. */
function providerOf(name: string, registration: Registration): BackendProvider {
  if (registration.core !== THIS_CORE) {
    throw duplicateCoreError(
      `backend '${name}' was registered with another copy of @rayo/core`,
      registration.core,
      {
        operation: 'createBackend',
        argument: 'name',
      },
    );
  }
  return registration.provider;
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
 * packages that declare a backend (see `howToMakeKnown`).
 */
export function knownBackendNames(): string[] {
  return [...new Set([...Object.keys(BUILT_IN), ...registrations.keys(), ...installedPackages().keys()])];
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
  // A package that registers itself on import has done so by now.
  const registration = registrations.get(name);
  if (registration) return providerOf(name, registration);
  const provider = (module as { backendProvider?: unknown }).backendProvider;
  if (!isProvider(provider)) {
    throw new BackendUnavailableError(
      `backend '${name}' is not available: ${found.packageName} declares it but exports no backendProvider`,
    );
  }
  if (provider.name !== name) {
    throw new BackendUnavailableError(`${found.packageName} declares one backend and provides another`, {
      operation: 'createBackend',
      argument: 'name',
      expected: `a backendProvider named '${name}' (its package.json's rayo.backend)`,
      actual: `'${provider.name}'`,
    });
  }
  registerBackend(provider, { replace: false });
  return providerOf(name, registrations.get(name)!);
}

async function loadProvider(name: string): Promise<BackendProvider> {
  const registration = registrations.get(name);
  if (registration?.replaces) return providerOf(name, registration);
  const builtIn = BUILT_IN[name];
  if (builtIn) {
    let provider = builtIns.get(name);
    if (!provider) {
      provider = await builtIn();
      builtIns.set(name, provider);
    }
    return provider;
  }
  if (registration) return providerOf(name, registration);
  const installed = installedPackages().get(name);
  if (!installed) {
    throw new BackendUnavailableError(`unknown backend '${name}'; ${howToMakeKnown(name)}`, {
      operation: 'createBackend',
      argument: 'name',
      expected: knownBackendNames().join(' | '),
      actual: name,
    });
  }
  return providerOfPackage(name, installed);
}

/**
 * Creates a backend by name, or throws a BackendUnavailableError that says why
 * it cannot. Its options are typed per backend (`BackendOptionsMap`,
 * which a backend package extends when imported); an option the backend does
 * not take is an InvalidArgumentError.
 */
export async function createBackend<Name extends string>(
  name: Name,
  options?: BackendOptionsOf<Name>,
): Promise<Backend> {
  const provider = await loadProvider(name);
  // Providers take any object: the types are the packages' promise, the keys checked here.
  const given = options as Readonly<Record<string, unknown>> | undefined;
  checkBackendOptions(name, provider, given);
  const reason = await provider.probe();
  if (reason !== undefined) {
    throw new BackendUnavailableError(`backend '${name}' cannot run on this machine: ${reason}`);
  }
  try {
    return await provider.create(given);
  } catch (error) {
    if (error instanceof RayoError) throw error;
    throw new BackendUnavailableError(`backend '${name}' failed to start: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/**
 * The options of backend `name` that the environment variables `env` name
 * (its provider's `optionsFromEnvironment`; none where it has none), for a
 * program to pass to `createBackend`: `createBackend(name, await
 * backendOptionsFromEnvironment(name, process.env))`. Libraries never read the
 * environment themselves.
 */
export async function backendOptionsFromEnvironment<Name extends string>(
  name: Name,
  env: EnvironmentVariables,
): Promise<BackendOptionsOf<Name>> {
  const provider = await loadProvider(name);
  return (provider.optionsFromEnvironment?.(env) ?? {}) as BackendOptionsOf<Name>;
}

/**
 * Sends backend `name`'s slow kernel compiles to `handler` (its provider's
 * `onSlowCompile`), e.g. `compileProgress(process.stderr).onSlowCompile`;
 * false where the backend reports none.
 */
export async function onSlowBackendCompile(
  name: string,
  handler: SlowCompileHandler | undefined,
): Promise<boolean> {
  const provider = await loadProvider(name);
  if (!provider.onSlowCompile) return false;
  provider.onSlowCompile(handler);
  return true;
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
