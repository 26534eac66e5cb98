import type { KernelBuilder } from '../ptx/kernel.js';
import type { R32, R64 } from '../ptx/operands.js';

// Loads and stores shared by the decoding kernels: cache rows move as `.v4`
// where their length and every base address allow it.

/** A u32 read from device memory when the kernel runs. */
export function loadDeviceU32(k: KernelBuilder, at: R64): R32 {
  return k.ldGlobal('u32', k.reg('u32'), at);
}

/** f32 words moved per load: `.v4` where the row length and every base address allow it, else 1. */
export type VectorWidth = 1 | 4;

/** `.v4` when `count` is a multiple of 4 and every address is 16-byte aligned. */
export function vectorWidth(count: number, addresses: readonly bigint[]): VectorWidth {
  return count % 4 === 0 && addresses.every((a) => a % 16n === 0n) ? 4 : 1;
}
