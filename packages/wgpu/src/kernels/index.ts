import type { AnyWgpuKernel } from '../kernel.js';
import { ELEMENTWISE_KERNELS } from './elementwise.js';
import { SOFTMAX_KERNELS } from './softmax.js';
import { REDUCTION_KERNELS } from './reduction.js';
import { MEMORY_KERNELS } from './memory.js';

/** Every WGSL kernel, one family per file. */
export const WGPU_KERNELS: readonly AnyWgpuKernel[] = [...ELEMENTWISE_KERNELS, ...SOFTMAX_KERNELS, ...REDUCTION_KERNELS, ...MEMORY_KERNELS];
