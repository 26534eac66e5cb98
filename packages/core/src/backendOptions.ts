import type { BackendProvider } from './backendProvider.js';
import { InvalidArgumentError } from './errors.js';

/**
 * The options of each backend by name, for `createBackend(name, options)`.
 * A backend package adds its own entry by declaration merging in its entry
 * module, so that importing it types `createBackend` for its name:
 *
 * ```ts
 * declare module '@rayo/core' {
 *   interface BackendOptionsMap {
 *     wgpu: WgpuBackendOptions;
 *   }
 * }
 * ```
 */
export interface BackendOptionsMap {
  /** The cpu reference backend takes no options. */
  cpu: Readonly<Record<string, never>>;
}

/**
 * The options `createBackend(name)` takes: those of the backend's entry in
 * {@link BackendOptionsMap}, or any object for a name without one (a
 * backend whose package the program does not import, or a name known only at
 * run time).
 */
export type BackendOptionsOf<Name extends string> = Name extends keyof BackendOptionsMap
  ? BackendOptionsMap[Name]
  : Readonly<Record<string, unknown>>;

/**
 * Throws an InvalidArgumentError naming an option that backend `name` does
 * not take, and the ones it takes: a misspelt option would otherwise be
 * ignored silently. Options of a provider that lists no `optionKeys` are
 * not checked.
 */
export function checkBackendOptions(
  name: string,
  provider: BackendProvider,
  options: Readonly<Record<string, unknown>> | undefined,
): void {
  const known = provider.optionKeys;
  if (known === undefined || options === undefined) return;
  const unknown = Object.keys(options).filter((key) => !known.includes(key));
  if (unknown.length === 0) return;
  const listed = unknown.map((key) => `'${key}'`).join(', ');
  throw new InvalidArgumentError(
    `createBackend('${name}'): unknown option${unknown.length > 1 ? 's' : ''} ${listed}`,
    {
      argument: 'options',
      expected: known.length > 0 ? `options among ${known.join(', ')}` : 'no options',
      actual: `an object with ${listed}`,
    },
  );
}
