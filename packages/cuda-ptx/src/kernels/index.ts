import type { AnyCudaKernel } from '../kernel.js';
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
import { SOFTMAX_KERNELS } from './softmax.js';

/**
 * Every CUDA kernel, one family per file. A new family exports its list
 * (`REDUCTION_KERNELS`, …) and is appended here; the backend supports
 * exactly the specs listed.
 */
export const CUDA_KERNELS: readonly AnyCudaKernel[] = [
  ...MEMORY_KERNELS,
  ...CAST_KERNELS,
  ...ELEMENTWISE_KERNELS,
  ...OPTIMIZER_KERNELS,
  ...LOSS_KERNELS,
  ...EMBEDDING_KERNELS,
  ...DECODING_KERNELS,
  ...FLASH_ATTENTION_KERNELS,
  ...PAGED_KERNELS,
  ...ROPE_KERNELS,
  ...REDUCTION_KERNELS,
  ...SOFTMAX_KERNELS,
  ...NORMALIZATION_KERNELS,
  ...MATMUL_KERNELS,
  ...FUSED_KERNELS,
  ...QUANTIZED_KERNELS,
  ...QUANTIZED_EMBEDDING_KERNELS,
  ...QUANTIZED_GATE_UP_KERNELS,
  ...QUANTIZE_ROWS_KERNELS,
];
