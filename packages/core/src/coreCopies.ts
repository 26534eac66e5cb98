import { coreDirectory } from '#backendPackages';
import { DuplicateCoreError, type RayoErrorDetails } from './errors.js';
import { CORE_VERSION } from './version.js';

/** One loaded copy of @rayo/core. */
export interface CoreCopy {
  readonly version: string;
  /** Where it was loaded from: its package directory in Node; elsewhere not known. */
  readonly location: string;
}

/**
 * A value shared by every copy of core in this JavaScript realm, under a
 * global symbol: how one copy tells that it meets another. A key names its
 * layout version (`@1`); a different layout takes a new key.
 */
export function realmShared<T>(key: string, create: () => T): T {
  const realm = globalThis as Record<symbol, unknown>;
  const symbol = Symbol.for(key);
  if (!(symbol in realm)) realm[symbol] = create();
  return realm[symbol] as T;
}

/** This copy of core. */
export const THIS_CORE: CoreCopy = Object.freeze({
  version: CORE_VERSION,
  location: coreDirectory() ?? 'a bundle',
});

/**
 * Every copy of core loaded in this realm (a package manager installs a
 * second, nested core for a backend whose peer range the first misses).
 */
const copies = realmShared<CoreCopy[]>('@rayo/core/copies@1', () => []);
copies.push(THIS_CORE);

/** The copies of core loaded besides this one. */
export function otherCores(): readonly CoreCopy[] {
  return copies.filter((copy) => copy !== THIS_CORE);
}

function describe(copy: CoreCopy): string {
  return `${copy.version} at ${copy.location}`;
}

/**
 * The error for a meeting of this copy with `other` (or, when which one is not
 * known, with every other copy loaded).
 */
export function duplicateCoreError(
  what: string,
  other: CoreCopy | undefined,
  details: RayoErrorDetails = {},
): DuplicateCoreError {
  const others = other ? [other] : otherCores();
  return new DuplicateCoreError(
    `${what}: two copies of @rayo/core are loaded (this one ${describe(THIS_CORE)}; ` +
      `also ${others.map(describe).join(', ') || 'another copy'}), and kernel specs, tensors and ` +
      'backends of one do not work with the other. Install one @rayo/core that every @rayo package ' +
      'accepts (they declare it as a peer dependency): `npm ls @rayo/core` shows who needs which, ' +
      '`npm dedupe` (or `pnpm dedupe`) merges them, and a bundler must resolve every import of ' +
      '@rayo/core to one copy',
    details,
  );
}
