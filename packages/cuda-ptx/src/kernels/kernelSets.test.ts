import { describe, expect, it } from 'vitest';
import { DECODING_KERNELS } from './decoding.js';
import { EMBEDDING_KERNELS } from './embedding.js';
import { FLASH_ATTENTION_KERNELS } from './flashAttention.js';
import { FUSED_KERNELS } from './fused.js';
import { LOSS_KERNELS } from './loss.js';
import { MATMUL_KERNELS } from './matmul.js';
import { MEMORY_KERNELS } from './memory.js';
import { NORMALIZATION_KERNELS } from './normalization.js';
import { OPTIMIZER_KERNELS } from './optimizer.js';
import { PAGED_KERNELS } from './paged.js';
import { REDUCTION_KERNELS } from './reduction.js';
import { ROPE_KERNELS } from './rope.js';
import { SOFTMAX_KERNELS } from './softmax.js';

// Which specs each kernel family implements, in the order it lists them.
const FAMILIES = [
  ['memory', MEMORY_KERNELS, ['fill', 'increment', 'copy', 'transpose', 'copyRows']],
  [
    'optimizer',
    OPTIMIZER_KERNELS,
    ['adamwStep', 'sgdStep', 'clipByGlobalNorm', 'globalNorm', 'multiTensorAdamw', 'updateLossScale'],
  ],
  ['loss', LOSS_KERNELS, ['crossEntropy', 'crossEntropyBackward']],
  ['embedding', EMBEDDING_KERNELS, ['embedding', 'embeddingBackward']],
  [
    'decoding',
    DECODING_KERNELS,
    ['kvCacheScatter', 'incrementalAttention', 'ropeKvScatter', 'ropeAttention', 'causalAttention'],
  ],
  ['flashAttention', FLASH_ATTENTION_KERNELS, ['flashAttention', 'flashAttentionBackward']],
  ['paged', PAGED_KERNELS, ['pagedKvWrite', 'ropePagedKvWrite', 'pagedAttention']],
  ['rope', ROPE_KERNELS, ['rope']],
  ['reduction', REDUCTION_KERNELS, ['sum', 'max', 'sumSquares', 'argmax']],
  ['softmax', SOFTMAX_KERNELS, ['softmax', 'logSoftmax', 'softmaxBackward', 'logSoftmaxBackward']],
  ['normalization', NORMALIZATION_KERNELS, ['rmsNorm', 'rmsNormBackward', 'layerNorm', 'layerNormBackward']],
  ['matmul', MATMUL_KERNELS, ['matmul', 'batchedMatmul']],
  [
    'fused',
    FUSED_KERNELS,
    ['linear', 'biasActivationBackward', 'gateUpSwiglu', 'rmsNormMatmul', 'rmsNormMatmul3'],
  ],
] as const;

describe('kernel families', () => {
  it.each(FAMILIES)('the %s kernels implement exactly their specs', (_family, kernels, names) => {
    expect(kernels.map((k) => k.spec.name)).toEqual(names);
  });
});
