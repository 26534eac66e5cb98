import type { QuantFormat } from '@rayo/core';
import { type FloatStorage, storageKey } from './storage.js';

/** One quantizedEmbedding kernel (quantizedEmbedding.ts, or a word per thread: quantizedEmbeddingWords.ts). */
export interface QuantEmbeddingVariant {
  readonly format: QuantFormat;
  /** Zero points per group (q4g32, q4g128; q4k's sub-block scales come with its format). */
  readonly zeros: boolean;
  /** Storage of the scales (and offsets). */
  readonly scale: FloatStorage;
  /** y's storage (f32 unless given): each value rounded to it as stored. */
  readonly out?: FloatStorage;
  /** A thread per u32 word of codes (quantizedEmbeddingWords.ts) instead of one per element. */
  readonly words?: boolean;
  /**
   * Words with bf16 y on sm_80 or later: pairs rounded by `cvt.rn.bf16x2.f32`
   * (the same bits but a NaN's, which is 0x7fff) instead of by hand.
   */
  readonly cvtBf16?: boolean;
}

export function quantEmbeddingKey(v: QuantEmbeddingVariant): string {
  const out = v.out && v.out !== 'f32' ? `/to-${v.out}` : '';
  const path = v.words ? `/words${v.cvtBf16 ? '/cvt' : ''}` : '';
  return `quantized/embedding/${v.format}${v.zeros ? '/zeros' : ''}${path}${out}${storageKey([v.scale])}`;
}

/** The parameters both quantizedEmbedding kernels take: the ids, the table, y and the table's layout. */
export const EMBEDDING_TABLE_PARAMS = {
  ids: 'ptr',
  packed: 'ptr',
  scales: 'ptr',
  zeros: 'ptr',
  offsets: 'ptr',
  y: 'ptr',
  vocab: 'u32',
  rowWords: 'u32',
  groups: 'u32',
  zeroWords: 'u32',
} as const;
