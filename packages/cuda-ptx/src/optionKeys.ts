import type { CudaBackendOptions } from './backend.js';

/**
 * Every key of CudaBackendOptions, for `createBackend('cuda')` to reject any
 * other: a key missing here or not in the interface is a compile error.
 */
const OPTION_KEYS: Readonly<Record<keyof CudaBackendOptions, true>> = {
  path: true,
  device: true,
  lib: true,
  maxCachedBytes: true,
  dependentLaunch: true,
  qgemvVariant: true,
  qgemvSlices: true,
  qgemvMma: true,
  qgemvActivations: true,
  qgemvPersistent: true,
  qgemvDepth: true,
  qgemvBlocksPerSm: true,
  attentionSplitTokens: true,
  attentionUnroll: true,
  attentionMaxSplits: true,
  attentionKernel: true,
  weightPrefetch: true,
  gemvSlices: true,
};

export const CUDA_OPTION_KEYS: readonly string[] = Object.keys(OPTION_KEYS);
