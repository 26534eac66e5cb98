import type { AnyCudaKernel } from '../kernel.js';
import { ELEMENTWISE_KERNELS } from './elementwise.js';
import { MEMORY_KERNELS } from './memory.js';

/**
 * Every CUDA kernel, one family per file. A new family exports its list
 * (`REDUCTION_KERNELS`, …) and is appended here; the backend supports
 * exactly the specs listed.
 */
export const CUDA_KERNELS: readonly AnyCudaKernel[] = [...MEMORY_KERNELS, ...ELEMENTWISE_KERNELS];
