import {
  checkChoice,
  QGEMV_ACTIVATION_CHOICES,
  type QgemvActivations,
  type QgemvOptions,
  type QgemvTuning,
  resolveQgemvOptions,
} from '@rayo/core';

/** `qgemvMma`: one-row 4-bit products on tensor cores (`on`) or not (`off`). */
export const QGEMV_MMA_CHOICES = ['on', 'off'] as const;
export type QgemvMma = (typeof QGEMV_MMA_CHOICES)[number];

/** `qgemvPersistent`: the int8 GEMV's blocks stay and take columns until none are left (`on`) or not. */
export const QGEMV_PERSISTENT_CHOICES = ['on', 'off'] as const;
export type QgemvPersistent = (typeof QGEMV_PERSISTENT_CHOICES)[number];

/** `qgemvDepth`: the sets of registers the int8 GEMV's loop keeps codes in (steps of loads in flight + 1). */
export const QGEMV_DEPTH_CHOICES = [1, 2, 3] as const;
export type QgemvDepth = (typeof QGEMV_DEPTH_CHOICES)[number];

/** `qgemvBlocksPerSm`: the int8 GEMV's blocks each SM should hold at once (registers capped to fit them). */
export const QGEMV_BLOCKS_PER_SM_CHOICES = [1, 2, 3, 4] as const;
export type QgemvBlocksPerSm = (typeof QGEMV_BLOCKS_PER_SM_CHOICES)[number];

/** `attentionUnroll`: tokens a slot of the decode attention loads together. */
export const ATTENTION_UNROLL_CHOICES = [1, 2, 4, 8] as const;
export type AttentionUnroll = (typeof ATTENTION_UNROLL_CHOICES)[number];

/** `attentionSplitTokens`: the fewest tokens a split of the decode attention's cache keeps. */
export const ATTENTION_SPLIT_CHOICES = [16, 32, 64, 128, 256, 512] as const;
export type AttentionSplitTokens = (typeof ATTENTION_SPLIT_CHOICES)[number];

/** `attentionMaxSplits`: the most splits the decode attention cuts one head's cache into. */
export const ATTENTION_MAX_SPLITS_CHOICES = [64, 128, 256] as const;
export type AttentionMaxSplits = (typeof ATTENTION_MAX_SPLITS_CHOICES)[number];

/** `attentionKernel`: decode attention over bf16 caches on tensor cores (`mma`) or on the CUDA cores (`lanes`). */
export const ATTENTION_KERNEL_CHOICES = ['mma', 'lanes'] as const;
export type AttentionKernel = (typeof ATTENTION_KERNEL_CHOICES)[number];

/** `gemvSlices`: warps a column of the dense one-row GEMVs splits K between. */
export const GEMV_SLICE_CHOICES = [1, 2, 4, 8] as const;
export type GemvSlices = (typeof GEMV_SLICE_CHOICES)[number];
/**
 * `weightPrefetch`: what the int8 GEMVs do before the kernel before them is
 * done, with short kernels (norms, RoPE, decode attention) letting them
 * launch early: `on`, prefetch their weights into L2 and load the first
 * steps; `loads`, only load the first steps; `chain`, that, and persistent
 * GEMVs let the next kernel launch early too; `off` (the default), nothing.
 */
export const WEIGHT_PREFETCH_CHOICES = ['on', 'loads', 'chain', 'off'] as const;
export type WeightPrefetch = (typeof WEIGHT_PREFETCH_CHOICES)[number];

/** `qgemvActivations` (core's QGEMV_ACTIVATION_CHOICES): left out, a call's `activations: 'int8'` takes the int8 GEMV. */
export { QGEMV_ACTIVATION_CHOICES, type QgemvActivations };

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
  /**
   * `int8`: products of up to 4 rows of x against 4- to 8-bit codes (q8,
   * q4g32 and q4g128 without zero points, q8g32, q4g32a, q8g32a, q4k, q5k,
   * q6k, q5g32, q5g32a; single and gate·up pairs) quantize x to int8 per block of 32 (d = max|x|/127)
   * and sum on integer dot products, as llama.cpp's CUDA GEMVs do: several
   * times fewer instructions a weight, and y within Σ d/2 · Σ|w| of the exact
   * product. Absent or `f32`: x stays exact (the default).
   */
  readonly qgemvActivations?: QgemvActivations;
  /**
   * `on`: the int8 GEMV launches as many blocks as the SMs hold, each
   * quantizing x once and taking units of columns until none are left, where
   * N is wide enough; absent or `off`, a block per few columns.
   */
  readonly qgemvPersistent?: QgemvPersistent;
  /**
   * The sets of registers the int8 GEMV's loop keeps codes in: 1, the next
   * step's loaded into fresh registers and moved into the current step's;
   * 2 or 3, a ring whose other sets are on their way while one is used (no
   * moves). Absent: 2. Capped where a lane keeps many sums (deepestFor).
   */
  readonly qgemvDepth?: QgemvDepth;
  /**
   * The int8 GEMV's blocks of 256 threads each SM should hold at once: its
   * registers are capped to fit them (at most 65536 / (256 · B) a thread),
   * and the persistent mode launches that many an SM. Absent: blocked
   * kernels uncapped, persistent ones 2 an SM.
   */
  readonly qgemvBlocksPerSm?: QgemvBlocksPerSm;
  /**
   * The fewest tokens a split of the decode attention's cache keeps (16,
   * 32, 64, 128, 256 or 512): fewer make more blocks for a short cache, each
   * walking fewer tokens one after another, and more partial states to
   * merge. Absent: 32 (MIN_SPLIT_TOKENS) on the CUDA-core kernel, a round
   * of its warps (DECODE_MMA_ROUND, 64) on the tensor-core one, whose splits
   * are whole rounds (a smaller value means one round).
   */
  readonly attentionSplitTokens?: AttentionSplitTokens;
  /**
   * Tokens whose K and V rows a slot of the decode attention loads together
   * (1, 2, 4 or 8): more keep more loads in flight and more registers.
   * Absent: 4 where a lane holds up to 4 dimensions of a row, 2 up to 8,
   * else 1.
   */
  readonly attentionUnroll?: AttentionUnroll;
  /**
   * The most splits the CUDA-core decode attention cuts a head's cache into (64, 128
   * or 256): a long cache then has shorter splits, each block walking fewer
   * tokens one after another, and more partial states to merge. Absent: 64
   * (MAX_SPLITS). On an H200 more splits were slower at every length (the
   * CUDA-core kernel, 32 × 64 heads over 8 kv heads at 8,192 tokens: 15.6
   * µs at 64, 20.5 at 128, 28.3 at 256).
   */
  readonly attentionMaxSplits?: AttentionMaxSplits;
  /**
   * `lanes`: decode attention over bf16 caches on the CUDA-core kernel
   * (lanes of a warp share a row and reduce q·k by shuffles), as every
   * other cache takes. Absent or `mma`: where it applies (sm_80 and later,
   * head dimension 64 or 128, at most 8 query heads a kv head, 16-byte
   * aligned caches), the tensor-core kernel of incrementalAttentionMma.ts.
   */
  readonly attentionKernel?: AttentionKernel;
  /**
   * `on`, with dependent launch (sm_90): the int8 GEMVs prefetch their
   * block's rows of weights into L2 before they wait for the kernel before
   * them, and the short kernels of a decode step (norms, RoPE, attention)
   * let the next kernel launch as soon as they start, so that a GEMV's
   * weights stream in while the memory would sit idle (GEMVs of at most
   * PREFETCH_MAX_BYTES of codes). Absent or `off`: every kernel waits
   * first (the default: on an H200, Llama-3.1-8B in Q4_K decoded at 2.58–
   * 2.61 ms/token with it against 2.42 without, a line prefetched per
   * instruction costing more than the idle memory gave).
   */
  readonly weightPrefetch?: WeightPrefetch;
  /**
   * Warps of a block that split one column's K in the dense streaming
   * products (1, 2, 4 or 8; the fused norm·product, gate·up·SwiGLU and the
   * dot GEMV): more put more of a short row's loads in flight at once.
   * Absent: as many as leave each warp one whole unrolled pass of K, for one
   * row of x (streamSlicesFor); batched rows keep 1.
   */
  readonly gemvSlices?: GemvSlices;
}

/** The switches, checked; what kernels see as `encoder.tuning`. */
export interface CudaTuning extends QgemvTuning {
  readonly qgemvMma: QgemvMma | undefined;
  readonly qgemvActivations: QgemvActivations | undefined;
  readonly qgemvPersistent: QgemvPersistent | undefined;
  readonly qgemvDepth: QgemvDepth | undefined;
  readonly qgemvBlocksPerSm: QgemvBlocksPerSm | undefined;
  readonly attentionSplitTokens: AttentionSplitTokens | undefined;
  readonly attentionUnroll: AttentionUnroll | undefined;
  readonly attentionMaxSplits: AttentionMaxSplits | undefined;
  readonly attentionKernel: AttentionKernel | undefined;
  readonly weightPrefetch: WeightPrefetch | undefined;
  readonly gemvSlices: GemvSlices | undefined;
}

/** Every switch at its measured default. */
export const DEFAULT_CUDA_TUNING: CudaTuning = {
  qgemvVariant: undefined,
  qgemvSlices: undefined,
  qgemvMma: undefined,
  qgemvActivations: undefined,
  qgemvPersistent: undefined,
  qgemvDepth: undefined,
  qgemvBlocksPerSm: undefined,
  attentionSplitTokens: undefined,
  attentionUnroll: undefined,
  attentionMaxSplits: undefined,
  attentionKernel: undefined,
  weightPrefetch: undefined,
  gemvSlices: undefined,
};

/**
 * Each switch of this package beside core's GEMV shape ones, declared once:
 * its choices and the environment variable that names it (see
 * cudaOptionsFromEnvironment). The order is the order they are checked in.
 */
export const CUDA_SWITCHES = {
  qgemvMma: { choices: QGEMV_MMA_CHOICES, variable: 'RAYO_QGEMV_MMA' },
  qgemvActivations: { choices: QGEMV_ACTIVATION_CHOICES, variable: 'RAYO_QGEMV_ACTIVATIONS' },
  qgemvPersistent: { choices: QGEMV_PERSISTENT_CHOICES, variable: 'RAYO_QGEMV_PERSISTENT' },
  qgemvDepth: { choices: QGEMV_DEPTH_CHOICES, variable: 'RAYO_QGEMV_DEPTH' },
  qgemvBlocksPerSm: { choices: QGEMV_BLOCKS_PER_SM_CHOICES, variable: 'RAYO_QGEMV_BLOCKS_PER_SM' },
  attentionSplitTokens: { choices: ATTENTION_SPLIT_CHOICES, variable: 'RAYO_ATTENTION_SPLIT_TOKENS' },
  attentionUnroll: { choices: ATTENTION_UNROLL_CHOICES, variable: 'RAYO_ATTENTION_UNROLL' },
  attentionMaxSplits: { choices: ATTENTION_MAX_SPLITS_CHOICES, variable: 'RAYO_ATTENTION_MAX_SPLITS' },
  attentionKernel: { choices: ATTENTION_KERNEL_CHOICES, variable: 'RAYO_ATTENTION_KERNEL' },
  weightPrefetch: { choices: WEIGHT_PREFETCH_CHOICES, variable: 'RAYO_CUDA_WEIGHT_PREFETCH' },
  gemvSlices: { choices: GEMV_SLICE_CHOICES, variable: 'RAYO_GEMV_SLICES' },
} as const satisfies Record<
  Exclude<keyof CudaTuning, keyof QgemvTuning>,
  { readonly choices: readonly (string | number)[]; readonly variable: string }
>;

export type CudaSwitch = keyof typeof CUDA_SWITCHES;
export const CUDA_SWITCH_NAMES = Object.keys(CUDA_SWITCHES) as CudaSwitch[];

/** A switch's choices, widened for the checks every switch shares. */
export function switchChoices(name: CudaSwitch): readonly (string | number)[] {
  return CUDA_SWITCHES[name].choices;
}

/** Checks the switches of `options` (a JavaScript caller may pass anything). */
export function resolveCudaTuning(options: CudaTuningOptions): CudaTuning {
  const operation = 'CudaBackend.create';
  const switches = Object.fromEntries(
    CUDA_SWITCH_NAMES.map((name) => [
      name,
      checkChoice(options[name], switchChoices(name), { operation, argument: name }),
    ]),
  ) as Pick<CudaTuning, CudaSwitch>;
  return { ...resolveQgemvOptions(options, operation), ...switches };
}
