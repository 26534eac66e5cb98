import type { AnyWgpuKernel } from '../kernel.js';
import { ELEMENTWISE_KERNELS } from './elementwise.js';

/** Every WGSL kernel, one family per file. */
export const WGPU_KERNELS: readonly AnyWgpuKernel[] = [...ELEMENTWISE_KERNELS];
