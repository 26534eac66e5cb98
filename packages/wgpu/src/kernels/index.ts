import type { AnyWgpuKernel } from '../kernel.js';
import { CAST_KERNELS } from './cast.js';
import { DECODING_KERNELS } from './decoding.js';
import { ELEMENTWISE_KERNELS } from './elementwise.js';
import { EMBEDDING_KERNELS } from './embedding.js';
import { FLASH_ATTENTION_KERNELS } from './flashAttention.js';
import { FUSED_KERNELS } from './fused.js';
import { LOSS_KERNELS } from './loss.js';
import { MATMUL_KERNELS } from './matmul.js';
import { MEMORY_KERNELS } from './memory.js';
import { NORMALIZATION_KERNELS } from './normalization.js';
import { OPTIMIZER_KERNELS } from './optimizer.js';
import { PAGED_KERNELS } from './paged.js';
import { QUANTIZED_KERNELS } from './quantized.js';
import { QUANTIZED_EMBEDDING_KERNELS } from './quantizedEmbedding.js';
import { QUANTIZED_GATE_UP_KERNELS } from './quantizedGateUp.js';
import { QUANTIZE_ROWS_KERNELS } from './quantizeRows.js';
import { REDUCTION_KERNELS } from './reduction.js';
import { ROPE_KERNELS } from './rope.js';
import { ropeAttentionKernel } from './ropeAttention.js';
import { SOFTMAX_KERNELS } from './softmax.js';

/** Every WGSL kernel, one family per file. */
export const WGPU_KERNELS: readonly AnyWgpuKernel[] = [
  ...ELEMENTWISE_KERNELS,
  ...SOFTMAX_KERNELS,
  ...REDUCTION_KERNELS,
  ...MEMORY_KERNELS,
  ...CAST_KERNELS,
  ...MATMUL_KERNELS,
  ...NORMALIZATION_KERNELS,
  ...ROPE_KERNELS,
  ...EMBEDDING_KERNELS,
  ...LOSS_KERNELS,
  ...DECODING_KERNELS,
  ropeAttentionKernel,
  ...FLASH_ATTENTION_KERNELS,
  ...PAGED_KERNELS,
  ...OPTIMIZER_KERNELS,
  ...FUSED_KERNELS,
  ...QUANTIZED_KERNELS,
  ...QUANTIZED_EMBEDDING_KERNELS,
  ...QUANTIZED_GATE_UP_KERNELS,
  ...QUANTIZE_ROWS_KERNELS,
];
