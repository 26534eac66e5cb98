/**
 * Backend discovery where there is no disk to look at (browsers, bundles for
 * the web, other runtimes): no package is found, so a backend is known only
 * once its package is imported (it registers itself) or a program calls
 * `registerBackend`. Chosen over `./backendPackages.js` by the `#backendPackages`
 * import of core's package.json, so that bundlers never see Node's modules.
 */
import type { BackendPackage } from './backendPackages.js';

export type { BackendPackage } from './backendPackages.js';

/** Whether backend packages are looked for on disk here: they are not. */
export const PACKAGES_ON_DISK = false;

export function findBackendPackages(_startDirectories: readonly string[]): BackendPackage[] {
  return [];
}

export function defaultSearchDirectories(): string[] {
  return [];
}

export function coreDirectory(): string | undefined {
  return undefined;
}

export function importBackendPackage(found: BackendPackage): Promise<unknown> {
  return Promise.reject(new Error(`${found.packageName} cannot be imported from disk here`));
}
