import { checkChoice, type QgemvOptions, type QgemvTuning, resolveQgemvOptions } from '@rayo/core';

/** `qgemvMma`: one-row 4-bit products on tensor cores (`on`) or not (`off`). */
export const QGEMV_MMA_CHOICES = ['on', 'off'] as const;
export type QgemvMma = (typeof QGEMV_MMA_CHOICES)[number];

/**
 * The cuda backend's tuning switches, for measurements: each has a measured
 * default, which leaving it out keeps. Kernels read them from their encoder.
 */
export interface CudaTuningOptions extends QgemvOptions {
  /**
   * `on`: one row of q4g32, q4g32a or q4k weights (and the q4g32 gate·up
   * pair) takes the tensor-core GEMV where it applies; absent or `off`, the
   * CUDA-core kernels (the default: faster than the new one in most shapes
   * on an H200).
   */
  readonly qgemvMma?: QgemvMma;
}

/** The switches, checked; what kernels see as `encoder.tuning`. */
export interface CudaTuning extends QgemvTuning {
  readonly qgemvMma: QgemvMma | undefined;
}

/** Every switch at its measured default. */
export const DEFAULT_CUDA_TUNING: CudaTuning = {
  qgemvVariant: undefined,
  qgemvSlices: undefined,
  qgemvMma: undefined,
};

/** Checks the switches of `options` (a JavaScript caller may pass anything). */
export function resolveCudaTuning(options: CudaTuningOptions): CudaTuning {
  const operation = 'CudaBackend.create';
  return {
    ...resolveQgemvOptions(options, operation),
    qgemvMma: checkChoice(options.qgemvMma, QGEMV_MMA_CHOICES, { operation, argument: 'qgemvMma' }),
  };
}
