import { checkChoice, type QgemvOptions, type QgemvTuning, resolveQgemvOptions } from '@rayo/core';

/**
 * Which kernel multiplies f16 a by f16 b where the tiles would (M past the
 * streaming kernels): 'subgroup-matrix' (the default where the device has a
 * usable configuration), 'emulated' (the same tiles and fragment addressing
 * in plain f32 arithmetic, for checking on adapters without subgroup
 * matrices; needs `shader-f16`), or 'widen' (a widened into f32, the f32
 * tiles; the default elsewhere).
 */
export type HalfGemmMode = 'subgroup-matrix' | 'emulated' | 'widen';

export const HALF_GEMM_MODES: readonly HalfGemmMode[] = ['subgroup-matrix', 'emulated', 'widen'];

/**
 * Prefill attention's kernel over f16 caches: 'matrix' (on subgroup matrices
 * where the f16 products take them, emulated where `f16Gemm` is 'emulated')
 * or 'f32' (the f32 kernels, the default: on an H200 the matrix kernel is
 * correct but slower).
 */
export type F16AttentionMode = 'matrix' | 'f32';

export const F16_ATTENTION_MODES: readonly F16AttentionMode[] = ['matrix', 'f32'];

/**
 * The wgpu backend's tuning switches, for measurements and checks: each has
 * a measured default, which leaving it out keeps. Kernels read them from
 * their encoder.
 */
export interface WgpuTuningOptions extends QgemvOptions {
  /**
   * The f16 × f16 matrix products' kernel (see HalfGemmMode), and prefill
   * attention's over f16 caches ('widen' keeps its f32 kernels); absent,
   * subgroup matrices where the device has a usable configuration, else
   * 'widen'. 'subgroup-matrix' on a device without one is an
   * UnsupportedOnBackendError at the product.
   */
  readonly f16Gemm?: HalfGemmMode;
  /** Prefill attention's kernel over f16 caches (see F16AttentionMode); absent, 'f32'. */
  readonly f16Attention?: F16AttentionMode;
}

/** The switches, checked; what kernels see as `encoder.tuning`. */
export interface WgpuTuning extends QgemvTuning {
  readonly f16Gemm: HalfGemmMode | undefined;
  readonly f16Attention: F16AttentionMode | undefined;
}

/** Every switch at its measured default. */
export const DEFAULT_WGPU_TUNING: WgpuTuning = {
  qgemvVariant: undefined,
  qgemvSlices: undefined,
  f16Gemm: undefined,
  f16Attention: undefined,
};

const CREATE = 'WgpuBackend.create';

/** Checks the switches of `options` (a JavaScript caller may pass anything). */
export function resolveWgpuTuning(options: WgpuTuningOptions): WgpuTuning {
  return {
    ...resolveQgemvOptions(options, CREATE),
    f16Gemm: checkChoice(options.f16Gemm, HALF_GEMM_MODES, { operation: CREATE, argument: 'f16Gemm' }),
    f16Attention: checkChoice(options.f16Attention, F16_ATTENTION_MODES, {
      operation: CREATE,
      argument: 'f16Attention',
    }),
  };
}
