import { type QgemvOptions, type QgemvTuning, resolveQgemvOptions } from '@rayo/core';

/**
 * The cuda backend's tuning switches, for measurements: each has a measured
 * default, which leaving it out keeps. Kernels read them from their encoder.
 */
export interface CudaTuningOptions extends QgemvOptions {}

/** The switches, checked; what kernels see as `encoder.tuning`. */
export interface CudaTuning extends QgemvTuning {}

/** Every switch at its measured default. */
export const DEFAULT_CUDA_TUNING: CudaTuning = { qgemvVariant: undefined, qgemvSlices: undefined };

/** Checks the switches of `options` (a JavaScript caller may pass anything). */
export function resolveCudaTuning(options: CudaTuningOptions): CudaTuning {
  return resolveQgemvOptions(options, 'CudaBackend.create');
}
