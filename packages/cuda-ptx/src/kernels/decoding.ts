import type { AnyCudaKernel } from '../kernel.js';
import { causalAttentionKernel } from './causalAttention.js';
import { attentionKernel } from './incrementalAttention.js';
import { ropeScatterKernel, scatterKernel } from './kvCache.js';
import { ropeAttentionKernel } from './ropeAttention.js';

/** Decoding kernels: the KV-cache writes, incremental attention over the cache, and a chunk's causal attention (prefill). */
export const DECODING_KERNELS: readonly AnyCudaKernel[] = [
  scatterKernel,
  attentionKernel,
  ropeScatterKernel,
  ropeAttentionKernel,
  causalAttentionKernel,
];
