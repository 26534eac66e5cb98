import {
  checkChoice,
  QGEMV_ACTIVATION_CHOICES,
  type QgemvActivations,
  type QgemvOptions,
  type QgemvTuning,
  resolveQgemvOptions,
} from '@rayo/core';

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
 * Prefill attention's kernel over f16 caches: 'matrix' (the default: on
 * subgroup matrices where the f16 products take them, emulated where
 * `f16Gemm` is 'emulated', else the f32 kernels) or 'f32' (the f32 kernels
 * always).
 */
export type F16AttentionMode = 'matrix' | 'f32';

export const F16_ATTENTION_MODES: readonly F16AttentionMode[] = ['matrix', 'f32'];

/**
 * Workgroup tiles of the f16 product on subgroup matrices, by name
 * (BM×BN of y, and the WM×WN grid of subgroups; BK is 32): for measuring
 * tiles against each other. Absent, the product picks by size.
 */
export const HALF_GEMM_TILE_NAMES = [
  '128x128w2x4',
  '128x128w2x2',
  '128x64w2x2',
  '64x128w2x2',
  '64x64w2x2',
] as const;
export type HalfGemmTileName = (typeof HALF_GEMM_TILE_NAMES)[number];

/**
 * Workgroup tiles of prefill attention on subgroup matrices, by name
 * (`SxK`: S subgroups of 16 query rows, K/V tiles of K keys), for measuring
 * them against each other. Absent, the first that fits of most rows, then most keys.
 */
export const F16_ATTENTION_TILE_NAMES = ['4x64', '8x32', '4x32', '2x32', '4x16', '2x16'] as const;
export type F16AttentionTileName = (typeof F16_ATTENTION_TILE_NAMES)[number];

/**
 * Tokens a chunk of the decode attention's split pass holds (its workgroup
 * memory holds MAX_CHUNK scores), for measuring chunks against each other.
 * Absent, one chunk up to 256 tokens, then the longest that leaves enough
 * workgroups (see incrementalAttention.ts).
 */
export const ATTENTION_CHUNK_CHOICES = [64, 128, 256] as const;
export type AttentionChunk = (typeof ATTENTION_CHUNK_CHOICES)[number];

/**
 * Output columns each group of 32 lanes of the fused one-row products
 * (rmsNormMatmul, gateUpSwiglu) streams, every loaded x vector serving them
 * all, for measuring them against each other. Absent, picked by the number
 * of workgroups the product leaves (see fused.ts).
 */
export const FUSED_COLUMN_CHOICES = [1, 2, 4] as const;
export type FusedColumns = (typeof FUSED_COLUMN_CHOICES)[number];

/**
 * Adjacent columns each group of 32 invocations of the streaming quantized
 * product takes (kernels/quantized.ts): more read each tile's x once for
 * more columns, fewer leave more workgroups.
 */
export const QUANT_COLUMN_CHOICES = [1, 2, 4] as const;
export type QuantColumns = (typeof QUANT_COLUMN_CHOICES)[number];

/**
 * Whether the streaming quantized product stages a one-row int8 x whole,
 * once per workgroup, where workgroup memory holds it (kernels/quantized.ts's
 * `resident`), or tile by tile; absent, long rows without a folded norm
 * take it (residentWordsFor).
 */
export const QUANT_RESIDENT_CHOICES = ['on', 'off'] as const;
export type QuantResident = (typeof QUANT_RESIDENT_CHOICES)[number];

/**
 * Output columns each group of a gate·up pair in one pass takes (a row of
 * each weight per column): 2 read each tile's x once for twice the words and
 * halve the workgroups that stage it. Absent, 1.
 */
export const QUANT_PAIR_COLUMN_CHOICES = [1, 2] as const;
export type QuantPairColumns = (typeof QUANT_PAIR_COLUMN_CHOICES)[number];

/**
 * The most workgroups a resident x's product launches (each stages x once,
 * then takes column sets in turn): fewer stage x fewer times, more keep more
 * words in flight. Absent, 1,024.
 */
export const QUANT_RESIDENT_WORKGROUP_CHOICES = [256, 512, 1024] as const;
export type QuantResidentWorkgroups = (typeof QUANT_RESIDENT_WORKGROUP_CHOICES)[number];

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
  /** Prefill attention's kernel over f16 caches (see F16AttentionMode); absent, 'matrix'. */
  readonly f16Attention?: F16AttentionMode;
  /** The f16 product's workgroup tile (see HALF_GEMM_TILE_NAMES) where it fits; absent, picked by size. */
  readonly f16GemmTile?: HalfGemmTileName;
  /** Prefill attention's tile on subgroup matrices (see F16_ATTENTION_TILE_NAMES) where it fits; absent, picked by rows then keys. */
  readonly f16AttentionTile?: F16AttentionTileName;
  /** Columns a group of the fused one-row products streams (see FUSED_COLUMN_CHOICES); absent, picked by size. */
  readonly fusedColumns?: FusedColumns;
  /** Columns a group of the streaming quantized product takes (see QUANT_COLUMN_CHOICES); absent, picked by size. */
  readonly quantColumns?: QuantColumns;
  /** A one-row int8 x staged whole (see QUANT_RESIDENT_CHOICES); absent, picked by the row's length. */
  readonly quantResident?: QuantResident;
  /** Output columns a group of a gate·up pair takes (see QUANT_PAIR_COLUMN_CHOICES); absent, 1. */
  readonly quantPairColumns?: QuantPairColumns;
  /** The most workgroups of a resident x's product (see QUANT_RESIDENT_WORKGROUP_CHOICES); absent, 1,024. */
  readonly quantResidentWorkgroups?: QuantResidentWorkgroups;
  /** The streaming quantized product's x as exact f32 or int8 blocks (core's QGEMV_ACTIVATION_CHOICES); absent, as each call's `activations` allows. */
  readonly qgemvActivations?: QgemvActivations;
  /** Tokens a chunk of the decode attention's split pass holds (see ATTENTION_CHUNK_CHOICES); absent, picked by length. */
  readonly attentionChunk?: AttentionChunk;
}

/** The switches, checked; what kernels see as `encoder.tuning`. */
export interface WgpuTuning extends QgemvTuning {
  readonly f16Gemm: HalfGemmMode | undefined;
  readonly f16Attention: F16AttentionMode | undefined;
  readonly f16GemmTile: HalfGemmTileName | undefined;
  readonly f16AttentionTile: F16AttentionTileName | undefined;
  readonly fusedColumns: FusedColumns | undefined;
  readonly quantColumns: QuantColumns | undefined;
  readonly quantResident: QuantResident | undefined;
  readonly quantResidentWorkgroups: QuantResidentWorkgroups | undefined;
  readonly quantPairColumns: QuantPairColumns | undefined;
  readonly qgemvActivations: QgemvActivations | undefined;
  readonly attentionChunk: AttentionChunk | undefined;
}

/** Every switch at its measured default. */
export const DEFAULT_WGPU_TUNING: WgpuTuning = {
  qgemvVariant: undefined,
  qgemvSlices: undefined,
  f16Gemm: undefined,
  f16Attention: undefined,
  f16GemmTile: undefined,
  f16AttentionTile: undefined,
  fusedColumns: undefined,
  quantColumns: undefined,
  quantResident: undefined,
  quantResidentWorkgroups: undefined,
  quantPairColumns: undefined,
  qgemvActivations: undefined,
  attentionChunk: undefined,
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
    f16GemmTile: checkChoice(options.f16GemmTile, HALF_GEMM_TILE_NAMES, {
      operation: CREATE,
      argument: 'f16GemmTile',
    }),
    f16AttentionTile: checkChoice(options.f16AttentionTile, F16_ATTENTION_TILE_NAMES, {
      operation: CREATE,
      argument: 'f16AttentionTile',
    }),
    fusedColumns: checkChoice(options.fusedColumns, FUSED_COLUMN_CHOICES, {
      operation: CREATE,
      argument: 'fusedColumns',
    }),
    quantResident: checkChoice(options.quantResident, QUANT_RESIDENT_CHOICES, {
      operation: CREATE,
      argument: 'quantResident',
    }),
    quantResidentWorkgroups: checkChoice(options.quantResidentWorkgroups, QUANT_RESIDENT_WORKGROUP_CHOICES, {
      operation: CREATE,
      argument: 'quantResidentWorkgroups',
    }),
    quantPairColumns: checkChoice(options.quantPairColumns, QUANT_PAIR_COLUMN_CHOICES, {
      operation: CREATE,
      argument: 'quantPairColumns',
    }),
    quantColumns: checkChoice(options.quantColumns, QUANT_COLUMN_CHOICES, {
      operation: CREATE,
      argument: 'quantColumns',
    }),
    qgemvActivations: checkChoice(options.qgemvActivations, QGEMV_ACTIVATION_CHOICES, {
      operation: CREATE,
      argument: 'qgemvActivations',
    }),
    attentionChunk: checkChoice(options.attentionChunk, ATTENTION_CHUNK_CHOICES, {
      operation: CREATE,
      argument: 'attentionChunk',
    }),
  };
}
