import type { Backend } from './backend.js';
import { BackendUnavailableError, RayoError } from './errors.js';

/**
 * How a backend package makes itself known: the package exports a
 * `backendProvider` with this shape.
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

/** Backends that live in their own packages, loaded on first use. */
const PACKAGES: Readonly<Record<string, string>> = { wgpu: '@rayo/wgpu', cuda: '@rayo/cuda-ptx' };

/** Backends inside @rayo/core, imported on first use. */
const BUILT_IN: Readonly<Record<string, () => Promise<BackendProvider>>> = {
  cpu: async () => (await import('./cpu/backend.js')).cpuBackendProvider,
};

const providers = new Map<string, BackendProvider>();

/** Registers (or replaces) a provider, e.g. the built-in cpu backend or one bundled statically. */
export function registerBackend(provider: BackendProvider): void {
  providers.set(provider.name, provider);
}

/** Every backend name rayo knows of, whether or not it is usable here. */
export function knownBackendNames(): string[] {
  return [...new Set([...Object.keys(BUILT_IN), ...providers.keys(), ...Object.keys(PACKAGES)])];
}

function isProvider(value: unknown): value is BackendProvider {
  const p = value as BackendProvider | undefined;
  return typeof p?.name === 'string' && typeof p.probe === 'function' && typeof p.create === 'function';
}

// In Node a backend package is found from the caller's project first (the
// working directory), then from wherever @rayo/core is installed; elsewhere
// (browsers, bundles) by a plain dynamic import. Node built-ins are imported
// lazily so that core still loads in a browser.
async function importPackage(packageName: string): Promise<unknown> {
  const isNode = typeof process !== 'undefined' && typeof process.versions?.node === 'string';
  if (!isNode) return import(/* @vite-ignore */ packageName);
  const { createRequire } = await import('node:module');
  const { pathToFileURL } = await import('node:url');
  let lastError: unknown;
  for (const base of [`${process.cwd()}/package.json`, import.meta.url]) {
    try {
      const resolved = createRequire(base).resolve(packageName);
      return await import(pathToFileURL(resolved).href);
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}

async function loadProvider(name: string): Promise<BackendProvider> {
  const known = providers.get(name);
  if (known) return known;
  const builtIn = BUILT_IN[name];
  if (builtIn) {
    const provider = await builtIn();
    providers.set(name, provider);
    return provider;
  }
  const packageName = PACKAGES[name];
  if (!packageName) {
    throw new BackendUnavailableError(`unknown backend '${name}'`, {
      kernel: 'createBackend',
      argument: 'name',
      expected: knownBackendNames().join(' | '),
      actual: name,
    });
  }
  let module: unknown;
  try {
    module = await importPackage(packageName);
  } catch (error) {
    throw new BackendUnavailableError(
      `backend '${name}' is not installed: add ${packageName} to your project (${(error as Error).message.split('\n')[0]})`,
      { cause: error },
    );
  }
  const provider = (module as { backendProvider?: unknown }).backendProvider;
  if (!isProvider(provider)) {
    throw new BackendUnavailableError(
      `backend '${name}' is not available: ${packageName} is installed but exports no backendProvider`,
    );
  }
  providers.set(name, provider);
  return provider;
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
