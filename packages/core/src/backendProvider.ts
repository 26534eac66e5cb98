import type { Backend } from './backend.js';
import type { SlowCompileHandler } from './compileProgress.js';
import type { EnvironmentVariables } from './tuningOptions.js';

/**
 * How a backend package makes itself known: its entry registers its provider
 * when imported (`registerBackend(provider, { replace: false })`), which is
 * how bundles and browsers know it; for Node to find it on disk before it is
 * imported, its package.json declares `"rayo": { "backend": "<name>" }` and
 * its entry exports the provider as `backendProvider`.
 */
export interface BackendProvider {
  readonly name: string;
  /** Resolves to `undefined` when the backend can run here, or to the reason it cannot. */
  probe(): Promise<string | undefined>;
  create(options?: Readonly<Record<string, unknown>>): Promise<Backend>;
  /**
   * The option keys `create` takes: `createBackend` rejects any other with an
   * InvalidArgumentError (a misspelt option is not ignored). Without it,
   * options are passed on unchecked.
   */
  readonly optionKeys?: readonly string[];
  /**
   * The options that environment variables name (tuning switches that
   * measurement programs take from the environment, e.g. RAYO_QGEMV_VARIANT),
   * for `create`. A backend without such variables leaves it out.
   */
  optionsFromEnvironment?(env: EnvironmentVariables): Readonly<Record<string, unknown>>;
  /**
   * For a backend that compiles kernels on first use, slowly on some devices
   * (WebGPU pipelines on a software adapter): sets what is called for each
   * compile slow enough to be worth a word, for every backend it creates (a
   * progress line: `compileProgress`); `undefined` reports none. A backend
   * that compiles nothing slowly leaves it out.
   */
  onSlowCompile?(handler: SlowCompileHandler | undefined): void;
}
