import type { AnyCudaKernel } from '../kernel.js';
import { attentionKernel } from './incrementalAttention.js';
import { ropeScatterKernel, scatterKernel } from './kvCache.js';

/** Decode-time kernels: the KV-cache writes and incremental attention over the cache. */
export const DECODING_KERNELS: readonly AnyCudaKernel[] = [scatterKernel, attentionKernel, ropeScatterKernel];
