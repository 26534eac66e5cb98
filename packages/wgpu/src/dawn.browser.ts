/**
 * Where there is no Node (browsers, bundles for the web) Dawn is never
 * loaded: the `#dawn` import of the package.json picks this file instead of
 * `./dawn.js`, so bundlers never see the `webgpu` package or Node's modules.
 */
import { BackendUnavailableError } from '@rayo/core';
import type { DawnOptions } from './dawn.js';

export type { DawnOptions } from './dawn.js';

export async function dawnGpu(_options: DawnOptions): Promise<GPU> {
  throw new BackendUnavailableError(
    'no WebGPU here: navigator.gpu is undefined (a browser without WebGPU, or WebGPU disabled; ' +
      'in a page it also needs a secure context, https or localhost)',
  );
}
